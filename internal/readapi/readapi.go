// Package readapi serves the read API: GET /v1/readings, /v1/audit and
// /v1/partitions, for the authenticated tenant only. It is the way `query`
// reads while the gateway holds the embedded store.
package readapi

import (
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"time"

	"github.com/sluicehq/sluice/internal/httpx"
	"github.com/sluicehq/sluice/internal/model"
	"github.com/sluicehq/sluice/internal/reader"
)

// DefaultLimit is the page size when the request names none.
const DefaultLimit = 1000

// TimeFormat is how timestamps are written: RFC 3339, UTC, milliseconds.
const TimeFormat = "2006-01-02T15:04:05.000Z07:00"

// Handler serves the read endpoints.
type Handler struct {
	st     reader.Store
	now    func() time.Time
	logger *slog.Logger
}

// New returns the read API over st.
func New(st reader.Store, now func() time.Time, logger *slog.Logger) *Handler {
	return &Handler{st: st, now: now, logger: logger}
}

// Reading is the JSON form of a reading.
type Reading struct {
	DeviceID string             `json:"device_id"`
	TS       string             `json:"ts"`
	Seq      *int64             `json:"seq,omitempty"`
	Metrics  map[string]float64 `json:"metrics"`
}

// Event is the JSON form of an audit event.
type Event struct {
	EventID    string          `json:"event_id"`
	Stream     string          `json:"stream"`
	TS         string          `json:"ts"`
	Actor      string          `json:"actor,omitempty"`
	Action     string          `json:"action"`
	Resource   string          `json:"resource,omitempty"`
	Outcome    string          `json:"outcome,omitempty"`
	Attributes json.RawMessage `json:"attributes,omitempty"`
}

// Partition is the JSON form of a catalogue entry.
type Partition struct {
	Kind      string `json:"kind"`
	Series    string `json:"series"`
	Day       string `json:"day"`
	SubBucket uint32 `json:"sub_bucket"`
	State     string `json:"state"`
	Closed    bool   `json:"closed"`
	Rows      int64  `json:"rows"`
	Bytes     int64  `json:"bytes"`
	MinTS     string `json:"min_ts"`
	MaxTS     string `json:"max_ts"`
}

func formatTS(ms int64) string { return time.UnixMilli(ms).UTC().Format(TimeFormat) }

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
	out := struct {
		Readings   []Reading `json:"readings"`
		NextCursor string    `json:"next_cursor,omitempty"`
	}{Readings: make([]Reading, len(rs)), NextCursor: next}
	for i, rd := range rs {
		j := Reading{DeviceID: rd.DeviceID, TS: formatTS(rd.TS), Metrics: make(map[string]float64, len(rd.Metrics))}
		if rd.HasSeq {
			j.Seq = &rd.Seq
		}
		for _, m := range rd.Metrics {
			j.Metrics[m.Name] = m.Value
		}
		out.Readings[i] = j
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
	out := struct {
		Events     []Event `json:"events"`
		NextCursor string  `json:"next_cursor,omitempty"`
	}{Events: make([]Event, len(es)), NextCursor: next}
	for i, e := range es {
		out.Events[i] = Event{EventID: e.EventID, Stream: e.Stream, TS: formatTS(e.TS), Actor: e.Actor, Action: e.Action,
			Resource: e.Resource, Outcome: e.Outcome, Attributes: e.Attributes}
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
	parts, err := reader.Partitions(r.Context(), h.st, model.SeriesDay{Kind: k, Tenant: httpx.Tenant(r.Context()), Series: series, Day: day})
	if err != nil {
		h.fail(w, err)
		return
	}
	out := struct {
		Partitions []Partition `json:"partitions"`
	}{Partitions: make([]Partition, len(parts))}
	for i, p := range parts {
		out.Partitions[i] = Partition{Kind: p.Key.Kind.String(), Series: p.Key.Series, Day: p.Key.Day.String(), SubBucket: p.Key.Sub,
			State: p.State, Closed: p.Closed, Rows: p.Rows, Bytes: p.Bytes, MinTS: formatTS(p.MinTS), MaxTS: formatTS(p.MaxTS)}
	}
	httpx.JSON(w, http.StatusOK, out)
}
