// Package readapi serves the read API: GET /v1/readings, /v1/audit,
// /v1/partitions and /v1/deadletters, for the authenticated tenant only. It
// is the way `query` reads while the gateway holds the embedded store.
//
// Every request is bounded: its parameters are checked (package readparam),
// its range may span at most read.max_days days, it runs under the
// read.timeout deadline and stops when the client goes away. Its cursors
// are sealed (package cursor): bound to the tenant, the kind of read, the
// series and the range.
package readapi

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"github.com/sluicehq/sluice/internal/cursor"
	"github.com/sluicehq/sluice/internal/httpx"
	"github.com/sluicehq/sluice/internal/model"
	"github.com/sluicehq/sluice/internal/partcount"
	"github.com/sluicehq/sluice/internal/reader"
	"github.com/sluicehq/sluice/internal/readparam"
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
	// reconciles reports whether the gateway settles a claim of sub-bucket
	// sub (nil: every claim, as on the embedded store).
	reconciles func(sub uint32) bool
	cfg        Config
	keys       *cursor.Keys
	// hottest ranks partitions by recent write rate; nil in direct mode.
	hottest HottestFunc
	// recount bounds the rows counted to list a claim exactly (0: claims
	// are listed as they are stored).
	recount int64
}

// WithRecount has the partitions listing count the rows of every entry
// that is still a claim after settling (another gateway's, or a killed
// one's that no gateway of its slot reloaded yet), reading at most
// maxRows+1 rows of each (buckets.max_rows), and list the counts: exact
// at the time of the listing, without writing anything (the entry stays
// its writer's to settle).
func WithRecount(maxRows int64) Option {
	return func(h *Handler) { h.recount = maxRows }
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

// WithReconciles has the ranking of partitions ask settle only for the
// claims the gateway settles itself (reconciles reports it by sub-bucket:
// its own writer slot, see buckets.Planner.Reconciles); other gateways'
// claims are listed as they are stored, marked ahead. Without it every
// claim ranked is asked for.
func WithReconciles(reconciles func(sub uint32) bool) Option {
	return func(h *Handler) { h.reconciles = reconciles }
}

// WithConfig sets the bounds of every request (default: DefaultConfig).
func WithConfig(c Config) Option {
	return func(h *Handler) { h.cfg = c }
}

// WithCursorKeys seals and opens cursors with keys. Without it a random
// key is made, and cursors live as long as the Handler.
func WithCursorKeys(keys *cursor.Keys) Option {
	return func(h *Handler) { h.keys = keys }
}

// New returns the read API over st.
func New(st reader.Store, now func() time.Time, logger *slog.Logger, opts ...Option) *Handler {
	h := &Handler{st: st, now: now, logger: logger, cfg: DefaultConfig()}
	for _, o := range opts {
		o(h)
	}
	if h.keys == nil {
		h.keys = EphemeralKeys()
	}
	return h
}

// EphemeralKeys returns cursor keys under a random key.
func EphemeralKeys() *cursor.Keys {
	var b [cursor.KeySize]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails
	k, _ := cursor.New(b[:])
	return k
}

// Deadline returns the request's context bounded by read.timeout.
func (h *Handler) deadline(r *http.Request) (context.Context, context.CancelFunc) {
	return httpx.ReadTimeout{Timeout: h.cfg.Timeout}.Deadline(r)
}

// openCursor checks the cursor parameter, if any, against the query: its
// seal must verify for scope, and a from or to the request names must be
// the range the cursor was made for. It returns the span to read (the
// cursor's, when there is one) and the reader's position.
func (h *Handler) openCursor(r *http.Request, scope cursor.Scope, span readparam.Span) (readparam.Span, string, error) {
	v := r.URL.Query()
	c := v.Get("cursor")
	if c == "" {
		return span, "", nil
	}
	tok, err := h.keys.Open(scope, c)
	if err != nil {
		return span, "", &readparam.Error{Param: "cursor", Reason: err.Error()}
	}
	if (v.Get("from") != "" && span.From != tok.From) || (v.Get("to") != "" && span.To != tok.To) {
		return span, "", &readparam.Error{Param: "cursor", Reason: fmt.Sprintf(
			"it continues a read of [%s, %s): send that from and to, or neither", wire.FormatTS(tok.From), wire.FormatTS(tok.To))}
	}
	return readparam.Span{From: tok.From, To: tok.To}, string(tok.Pos), nil
}

// seal returns the cursor of the page after pos ("" for none).
func (h *Handler) seal(scope cursor.Scope, span readparam.Span, pos string) string {
	if pos == "" {
		return ""
	}
	return h.keys.Seal(scope, cursor.Token{From: span.From, To: span.To, Pos: []byte(pos)})
}

// rangeQuery parses series, from, to, limit and cursor.
func (h *Handler) rangeQuery(r *http.Request, seriesParam string, kind model.Kind) (reader.Query, cursor.Scope, readparam.Span, error) {
	v := r.URL.Query()
	q := reader.Query{Tenant: httpx.Tenant(r.Context()), Series: v.Get(seriesParam), MaxDays: h.cfg.MaxDays}
	scope := cursor.Scope{Tenant: q.Tenant, Kind: kind.String(), Series: q.Series}
	if q.Series == "" {
		return q, scope, readparam.Span{}, &readparam.Error{Param: seriesParam, Reason: "required"}
	}
	span, err := readparam.ParseSpan(v, h.now().UnixMilli()+1)
	if err != nil {
		return q, scope, span, err
	}
	if q.Limit, err = readparam.Limit(v, "limit", DefaultLimit, reader.MaxLimit); err != nil {
		return q, scope, span, err
	}
	if span, q.Cursor, err = h.openCursor(r, scope, span); err != nil {
		return q, scope, span, err
	}
	if err := span.CheckDays(h.cfg.MaxDays, "read.max_days"); err != nil {
		return q, scope, span, err
	}
	q.From, q.To = span.From, span.To
	return q, scope, span, nil
}

// fail answers a request that failed: 400 for a bad parameter, 504 when
// read.timeout ran out, nothing when the client is gone, 500 else.
func (h *Handler) fail(w http.ResponseWriter, r *http.Request, err error) {
	switch {
	case readparam.IsParam(err):
		httpx.Error(w, http.StatusBadRequest, err.Error())
	case errors.Is(err, reader.ErrBadCursor):
		httpx.Error(w, http.StatusBadRequest, "parameter cursor: "+err.Error())
	case errors.Is(err, reader.ErrBadQuery):
		httpx.Error(w, http.StatusBadRequest, err.Error())
	case r.Context().Err() != nil:
		h.logger.DebugContext(r.Context(), "read abandoned by the client", "path", r.URL.Path, "err", err)
	case httpx.ReadTimeout{Timeout: h.cfg.Timeout}.Stopped(w, r, "the read", err):
	default:
		h.logger.ErrorContext(r.Context(), "read", "err", err)
		httpx.Error(w, http.StatusInternalServerError, "read failed: "+err.Error())
	}
}

// Readings serves GET /v1/readings?device=&from=&to=&limit=&cursor=.
func (h *Handler) Readings(w http.ResponseWriter, r *http.Request) {
	q, scope, span, err := h.rangeQuery(r, "device", model.KindReadings)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	ctx, cancel := h.deadline(r)
	defer cancel()
	rs, next, err := reader.Readings(ctx, h.st, q)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	out := wire.ReadingsPage{Readings: make([]wire.Reading, len(rs)), NextCursor: h.seal(scope, span, next)}
	for i, rd := range rs {
		out.Readings[i] = wire.ReadingOf(rd)
	}
	httpx.JSON(w, http.StatusOK, out)
}

// Audit serves GET /v1/audit?stream=&from=&to=&limit=&cursor=.
func (h *Handler) Audit(w http.ResponseWriter, r *http.Request) {
	q, scope, span, err := h.rangeQuery(r, "stream", model.KindAudit)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	ctx, cancel := h.deadline(r)
	defer cancel()
	es, next, err := reader.Audit(ctx, h.st, q)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	out := wire.EventsPage{Events: make([]wire.Event, len(es)), NextCursor: h.seal(scope, span, next)}
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
	day, err := readparam.Day("day", v.Get("day"))
	if err != nil {
		h.fail(w, r, err)
		return
	}
	ctx, cancel := h.deadline(r)
	defer cancel()
	sd := model.SeriesDay{Kind: k, Tenant: httpx.Tenant(r.Context()), Series: series, Day: day}
	var out wire.PartitionsPage
	if h.settle != nil {
		// Not settled (the gateway is stopping, the store failed): the
		// stored entries still bound their partitions; say so.
		if err := h.settle(ctx, sd); err != nil {
			h.logger.WarnContext(r.Context(), "partitions listed unsettled: their counts may run ahead", "series_day", sd, "err", err)
			out.Unsettled = true
		}
	}
	parts, err := reader.Partitions(ctx, h.st, sd)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	h.recountClaims(ctx, parts)
	out.Partitions = make([]wire.Partition, len(parts))
	for i, p := range parts {
		out.Partitions[i] = wire.PartitionOf(p)
		// A claim left by a gateway that did not settle it (another
		// gateway's, still running or gone): counts may run ahead.
		out.Unsettled = out.Unsettled || p.Ahead
	}
	httpx.JSON(w, http.StatusOK, out)
}

// recountClaims replaces the entries of parts that are still claims with
// their counted rows, when WithRecount is set. A partition over the bound,
// or a count that fails, leaves the claim listed as one.
func (h *Handler) recountClaims(ctx context.Context, parts []model.PartitionInfo) {
	if h.recount <= 0 {
		return
	}
	for i, p := range parts {
		if !p.Ahead {
			continue
		}
		exact, over, err := partcount.Recount(ctx, h.st, p.Key, max(h.recount, p.Rows))
		if err != nil || over {
			h.logger.Warn("partition listed as a claim: its rows could not be counted", "partition", p.Key, "over_bound", over, "err", err)
			continue
		}
		exact.State, exact.Closed = p.State, p.Closed
		parts[i] = exact
	}
}
