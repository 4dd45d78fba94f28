// Package readapi serves the read API: GET /v1/readings, /v1/audit and
// /v1/partitions, for the authenticated tenant only. It is the way `query`
// reads while the gateway holds the embedded store.
package readapi

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"time"

	"github.com/sluicehq/sluice/internal/httpx"
	"github.com/sluicehq/sluice/internal/model"
	"github.com/sluicehq/sluice/internal/reader"
	"github.com/sluicehq/sluice/internal/wire"
)

// DefaultLimit is the page size when the request names none.
const DefaultLimit = 1000

// TimeFormat is how timestamps are written: RFC 3339, UTC, milliseconds.
const TimeFormat = wire.TimeFormat

// Handler serves the read endpoints.
type Handler struct {
	st     reader.Store
	now    func() time.Time
	logger *slog.Logger
	settle func(context.Context, ...model.SeriesDay) error
}

// Option adds optional behaviour to a Handler.
type Option func(*Handler)

// WithSettle has the partitions listing call settle for the series-day it
// lists first: the gateway's sink then makes that series-day's catalogue
// entries exact (they may run ahead of their partitions, see package
// buckets), so the listing shows exact counts.
func WithSettle(settle func(context.Context, ...model.SeriesDay) error) Option {
	return func(h *Handler) { h.settle = settle }
}

// New returns the read API over st.
func New(st reader.Store, now func() time.Time, logger *slog.Logger, opts ...Option) *Handler {
	h := &Handler{st: st, now: now, logger: logger}
	for _, o := range opts {
		o(h)
	}
	return h
}

// ParseTime accepts RFC 3339 or integer epoch milliseconds.
func ParseTime(s string) (int64, error) {
	if ms, err := strconv.ParseInt(s, 10, 64); err == nil {
		return ms, nil
	}
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return 0, fmt.Errorf("%q is neither RFC 3339 nor epoch milliseconds", s)
	}
	return t.UnixMilli(), nil
}

// rangeQuery parses series, from, to, limit and cursor.
func (h *Handler) rangeQuery(r *http.Request, seriesParam string) (reader.Query, error) {
	v := r.URL.Query()
	q := reader.Query{Tenant: httpx.Tenant(r.Context()), Series: v.Get(seriesParam), Cursor: v.Get("cursor"), Limit: DefaultLimit}
	if q.Series == "" {
		return q, fmt.Errorf("parameter %s is required", seriesParam)
	}
	now := h.now().UnixMilli()
	q.To = now + 1
	if s := v.Get("to"); s != "" {
		t, err := ParseTime(s)
		if err != nil {
			return q, fmt.Errorf("parameter to: %w", err)
		}
		q.To = t
	}
	q.From = q.To - model.MillisPerDay
	if s := v.Get("from"); s != "" {
		t, err := ParseTime(s)
		if err != nil {
			return q, fmt.Errorf("parameter from: %w", err)
		}
		q.From = t
	}
	if q.To <= q.From {
		return q, errors.New("parameter to must be after from")
	}
	if s := v.Get("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > reader.MaxLimit {
			return q, fmt.Errorf("parameter limit: must be 1..%d, got %q", reader.MaxLimit, s)
		}
		q.Limit = n
	}
	return q, nil
}

func (h *Handler) fail(w http.ResponseWriter, err error) {
	if errors.Is(err, reader.ErrBadCursor) {
		httpx.Error(w, http.StatusBadRequest, "parameter cursor: "+err.Error())
		return
	}
	if errors.Is(err, reader.ErrBadQuery) {
		httpx.Error(w, http.StatusBadRequest, err.Error())
		return
	}
	h.logger.Error("read", "err", err)
	httpx.Error(w, http.StatusInternalServerError, "read failed: "+err.Error())
}

// Readings serves GET /v1/readings?device=&from=&to=&limit=&cursor=.
func (h *Handler) Readings(w http.ResponseWriter, r *http.Request) {
	q, err := h.rangeQuery(r, "device")
	if err != nil {
		httpx.Error(w, http.StatusBadRequest, err.Error())
		return
	}
	rs, next, err := reader.Readings(r.Context(), h.st, q)
	if err != nil {
		h.fail(w, err)
		return
	}
	out := wire.ReadingsPage{Readings: make([]wire.Reading, len(rs)), NextCursor: next}
	for i, rd := range rs {
		out.Readings[i] = wire.ReadingOf(rd)
	}
	httpx.JSON(w, http.StatusOK, out)
}

// Audit serves GET /v1/audit?stream=&from=&to=&limit=&cursor=.
func (h *Handler) Audit(w http.ResponseWriter, r *http.Request) {
	q, err := h.rangeQuery(r, "stream")
	if err != nil {
		httpx.Error(w, http.StatusBadRequest, err.Error())
		return
	}
	es, next, err := reader.Audit(r.Context(), h.st, q)
	if err != nil {
		h.fail(w, err)
		return
	}
	out := wire.EventsPage{Events: make([]wire.Event, len(es)), NextCursor: next}
	for i, e := range es {
		out.Events[i] = wire.EventOf(e)
	}
	httpx.JSON(w, http.StatusOK, out)
}

// Partitions serves GET /v1/partitions?kind=readings|audit&series=&day=.
// device= and stream= are accepted as shorthands for kind and series.
func (h *Handler) Partitions(w http.ResponseWriter, r *http.Request) {
	v := r.URL.Query()
	kind, series := v.Get("kind"), v.Get("series")
	switch {
	case v.Get("device") != "":
		kind, series = "readings", v.Get("device")
	case v.Get("stream") != "":
		kind, series = "audit", v.Get("stream")
	}
	if kind == "" {
		kind = "readings"
	}
	k, err := model.ParseKind(kind)
	if err != nil {
		httpx.Error(w, http.StatusBadRequest, "parameter kind: "+err.Error())
		return
	}
	if series == "" {
		httpx.Error(w, http.StatusBadRequest, "parameter series (or device, or stream) is required")
		return
	}
	day, err := model.ParseDay(v.Get("day"))
	if err != nil {
		httpx.Error(w, http.StatusBadRequest, "parameter day: "+err.Error())
		return
	}
	sd := model.SeriesDay{Kind: k, Tenant: httpx.Tenant(r.Context()), Series: series, Day: day}
	var out wire.PartitionsPage
	if h.settle != nil {
		// Not settled (the gateway is stopping, the store failed): the
		// stored entries still bound their partitions; say so.
		if err := h.settle(r.Context(), sd); err != nil {
			h.logger.Warn("partitions listed unsettled: their counts may run ahead", "series_day", sd, "err", err)
			out.Unsettled = true
		}
	}
	parts, err := reader.Partitions(r.Context(), h.st, sd)
	if err != nil {
		h.fail(w, err)
		return
	}
	out.Partitions = make([]wire.Partition, len(parts))
	for i, p := range parts {
		out.Partitions[i] = wire.PartitionOf(p)
	}
	httpx.JSON(w, http.StatusOK, out)
}
