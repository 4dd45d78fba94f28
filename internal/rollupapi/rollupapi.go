// Package rollupapi serves the rollup endpoints of the read API, for the
// authenticated tenant only, from whichever rollup backend the gateway uses
// (ClickHouse or the embedded rollup store):
//
//	GET  /v1/rollups?device=&metric=&from=&to=&step=1m|1h|1d
//	GET  /v1/top?metric=&by=max|mean|count&from=&to=&limit=
//	POST /v1/rollups/rebuild?from=&to=[&device=]   NDJSON progress, then the result
//	GET  /v1/rollups/verify?day=YYYY-MM-DD
//	GET  /v1/rollups/status
//
// Free SQL is not served here: it would cross tenants. `query sql` talks to
// ClickHouse directly with the analyst's own credentials.
package rollupapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"time"

	"github.com/sluicehq/sluice/internal/httpx"
	"github.com/sluicehq/sluice/internal/model"
	"github.com/sluicehq/sluice/internal/outbox"
	"github.com/sluicehq/sluice/internal/readapi"
	"github.com/sluicehq/sluice/internal/readparam"
	"github.com/sluicehq/sluice/internal/rollup"
	"github.com/sluicehq/sluice/internal/rollupfeed"
	"github.com/sluicehq/sluice/internal/wire"
)

// Backend is what the endpoints read and rebuild.
type Backend interface {
	rollupfeed.Backend
	Series(ctx context.Context, f rollup.Filter, step rollup.Step) ([]rollup.Bucket, error)
	Top(ctx context.Context, f rollup.Filter, by rollup.By, limit int) ([]rollup.Rank, error)
}

// Status reports the state of the rollup pipeline.
type Status func(tenant string) StatusJSON

// StatusJSON is the answer of /v1/rollups/status.
type StatusJSON struct {
	Backend     string `json:"backend"`
	OutboxRows  int    `json:"outbox_rows"`
	OutboxBytes int64  `json:"outbox_bytes"`
	// DirtyDays are the caller's tenant's days whose rollups lost rows
	// (rebuild them), oldest first.
	DirtyDays []string `json:"dirty_days"`
	// DirtyError says why the dirty days could not be listed (DirtyDays is
	// then incomplete).
	DirtyError string `json:"dirty_error,omitempty"`
}

// OutboxStatus is the Status of a gateway whose feed uses ob: its depth,
// and the dirty days of the asking tenant (with the marks that name no
// tenant).
func OutboxStatus(backend string, ob *outbox.Outbox, logger *slog.Logger) Status {
	return func(tenant string) StatusJSON {
		d := ob.Depth()
		st := StatusJSON{Backend: backend, OutboxRows: d.Rows, OutboxBytes: d.Bytes, DirtyDays: []string{}}
		marks, err := ob.Dirty()
		if err != nil {
			logger.Error("list dirty rollup days", "err", err)
			st.DirtyError = err.Error()
		}
		for _, m := range marks {
			if day := m.Day.String(); (m.Tenant == tenant || m.Tenant == "") && !slices.Contains(st.DirtyDays, day) {
				st.DirtyDays = append(st.DirtyDays, day)
			}
		}
		return st
	}
}

// Handler serves the endpoints.
type Handler struct {
	raw    rollupfeed.Raw
	dst    Backend
	status Status
	now    func() time.Time
	logger *slog.Logger
	read   readapi.Config
	marks  DirtyMarks // nil: rebuilds clear no marks
	// rebuilds holds a token per running rebuild (rollups.max_rebuilds).
	rebuilds       chan struct{}
	rebuildTimeout time.Duration
}

// Option adds optional behaviour to a Handler.
type Option func(*Handler)

// WithReadConfig bounds the requests: read.timeout for reads, and
// read.max_days for the range of reads and rebuilds (default:
// readapi.DefaultConfig).
func WithReadConfig(c readapi.Config) Option {
	return func(h *Handler) { h.read = c }
}

// WithRebuilds lets at most max rebuilds run at once, each for at most
// timeout (default: those of rollupfeed.DefaultConfig).
func WithRebuilds(maxRebuilds int, timeout time.Duration) Option {
	return func(h *Handler) {
		h.rebuilds, h.rebuildTimeout = make(chan struct{}, max(1, maxRebuilds)), timeout
	}
}

// DirtyMarks are the dirty marks a rebuild clears (an *outbox.Outbox).
type DirtyMarks interface {
	DirtySeq() uint64
	ClearDirty(tenant string, days []model.Day, upTo uint64) error
}

// ClearOnRebuild makes a rebuild of every device of a tenant clear the
// marks of the whole UTC days it covered that were written before it began.
func (h *Handler) ClearOnRebuild(m DirtyMarks) { h.marks = m }

// wholeDays returns the UTC days that lie wholly inside [from, to), a range
// of valid times (model.CheckTime).
func wholeDays(from, to int64) []model.Day {
	var out []model.Day
	for d := model.DayOf(from); d.Start()+model.MillisPerDay <= to; d++ {
		if d.Start() >= from {
			out = append(out, d)
		}
	}
	return out
}

// New returns the handler.
func New(raw rollupfeed.Raw, dst Backend, status Status, now func() time.Time, logger *slog.Logger, opts ...Option) *Handler {
	h := &Handler{raw: raw, dst: dst, status: status, now: now, logger: logger, read: readapi.DefaultConfig()}
	WithRebuilds(rollupfeed.DefaultConfig().MaxRebuilds, rollupfeed.DefaultConfig().RebuildTimeout)(h)
	for _, o := range opts {
		o(h)
	}
	return h
}

// Routes returns the endpoints by pattern, for server.Routes.Extra.
func (h *Handler) Routes() map[string]http.HandlerFunc {
	return map[string]http.HandlerFunc{
		"GET /v1/rollups":          h.Rollups,
		"GET /v1/top":              h.Top,
		"POST /v1/rollups/rebuild": h.Rebuild,
		"GET /v1/rollups/verify":   h.Verify,
		"GET /v1/rollups/status":   h.Status,
	}
}

// Bucket is the JSON form of one step of a series.
type Bucket = wire.Bucket

// Rank is the JSON form of one device of a top list.
type Rank = wire.Rank

func ts(ms int64) string { return wire.FormatTS(ms) }

// span parses from and to (default: the 24 hours before now), each in the
// valid time range, spanning at most read.max_days days.
func (h *Handler) span(r *http.Request) (int64, int64, error) {
	sp, err := readparam.ParseSpan(r.URL.Query(), h.now().UnixMilli())
	if err != nil {
		return 0, 0, err
	}
	if err := sp.CheckDays(h.read.MaxDays, "read.max_days"); err != nil {
		return 0, 0, err
	}
	return sp.From, sp.To, nil
}

// deadline returns the request's context bounded by read.timeout.
func (h *Handler) deadline(r *http.Request) (context.Context, context.CancelFunc) {
	return httpx.ReadTimeout{Timeout: h.read.Timeout}.Deadline(r)
}

func (h *Handler) fail(w http.ResponseWriter, r *http.Request, what string, err error) {
	switch {
	case r.Context().Err() != nil:
		h.logger.DebugContext(r.Context(), what+": abandoned by the client", "err", err)
	case httpx.ReadTimeout{Timeout: h.read.Timeout}.Stopped(w, r, what, err):
	default:
		h.logger.ErrorContext(r.Context(), what, "err", err)
		httpx.Error(w, http.StatusBadGateway, what+": "+err.Error())
	}
}

// Rollups serves GET /v1/rollups.
func (h *Handler) Rollups(w http.ResponseWriter, r *http.Request) {
	v := r.URL.Query()
	f := rollup.Filter{Tenant: httpx.Tenant(r.Context()), Device: v.Get("device"), Metric: v.Get("metric")}
	if f.Device == "" || f.Metric == "" {
		httpx.Error(w, http.StatusBadRequest, "parameters device and metric are required")
		return
	}
	step := rollup.StepMinute
	if s := v.Get("step"); s != "" {
		var err error
		if step, err = rollup.ParseStep(s); err != nil {
			httpx.Error(w, http.StatusBadRequest, "parameter step: "+err.Error())
			return
		}
	}
	var err error
	if f.From, f.To, err = h.span(r); err != nil {
		httpx.Error(w, http.StatusBadRequest, err.Error())
		return
	}
	ctx, cancel := h.deadline(r)
	defer cancel()
	bs, err := h.dst.Series(ctx, f, step)
	if err != nil {
		h.fail(w, r, "read rollups", err)
		return
	}
	out := wire.RollupSeries{Device: f.Device, Metric: f.Metric, Step: step.String(), Buckets: make([]Bucket, len(bs))}
	for i, b := range bs {
		out.Buckets[i] = BucketOf(b)
	}
	httpx.JSON(w, http.StatusOK, out)
}

// Top serves GET /v1/top.
func (h *Handler) Top(w http.ResponseWriter, r *http.Request) {
	v := r.URL.Query()
	f := rollup.Filter{Tenant: httpx.Tenant(r.Context()), Metric: v.Get("metric")}
	if f.Metric == "" {
		httpx.Error(w, http.StatusBadRequest, "parameter metric is required")
		return
	}
	by := rollup.ByMax
	if s := v.Get("by"); s != "" {
		var err error
		if by, err = rollup.ParseBy(s); err != nil {
			httpx.Error(w, http.StatusBadRequest, "parameter by: "+err.Error())
			return
		}
	}
	limit, err := readparam.Limit(v, "limit", 10, 10_000)
	if err != nil {
		httpx.Error(w, http.StatusBadRequest, err.Error())
		return
	}
	if f.From, f.To, err = h.span(r); err != nil {
		httpx.Error(w, http.StatusBadRequest, err.Error())
		return
	}
	ctx, cancel := h.deadline(r)
	defer cancel()
	ranks, err := h.dst.Top(ctx, f, by, limit)
	if err != nil {
		h.fail(w, r, "rank devices", err)
		return
	}
	out := wire.TopList{Metric: f.Metric, By: string(by), Devices: make([]Rank, len(ranks))}
	for i, k := range ranks {
		out.Devices[i] = RankOf(k)
	}
	httpx.JSON(w, http.StatusOK, out)
}

// ProgressLine is one NDJSON line of a rebuild answer: progress, then one
// line with Result or Error.
type ProgressLine = wire.RebuildProgress

// Rebuild serves POST /v1/rollups/rebuild, streaming progress. A rebuild
// is a bounded job: its range spans at most read.max_days days, at most
// rollups.max_rebuilds run at once (one more is answered 503), each stops
// after rollups.rebuild_timeout or when its client goes away.
func (h *Handler) Rebuild(w http.ResponseWriter, r *http.Request) {
	from, to, err := h.span(r)
	if err != nil {
		httpx.Error(w, http.StatusBadRequest, err.Error())
		return
	}
	select {
	case h.rebuilds <- struct{}{}:
		defer func() { <-h.rebuilds }()
	default:
		httpx.Busy(w, 30*time.Second, fmt.Sprintf("%d rollup rebuilds are running, the most rollups.max_rebuilds allows: retry later", cap(h.rebuilds)))
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), h.rebuildTimeout)
	defer cancel()
	// A rebuild may outlast http.write_timeout: it streams progress instead.
	_ = http.NewResponseController(w).SetWriteDeadline(time.Time{})
	w.Header().Set("Content-Type", "application/x-ndjson")
	w.WriteHeader(http.StatusOK)
	enc := json.NewEncoder(w)
	fl, _ := w.(http.Flusher)
	send := func(l ProgressLine) {
		_ = enc.Encode(l)
		if fl != nil {
			fl.Flush()
		}
	}
	send(ProgressLine{Done: 0, Total: 0})
	tenant := httpx.Tenant(r.Context())
	device := r.URL.Query().Get("device")
	var before uint64
	if h.marks != nil {
		before = h.marks.DirtySeq()
	}
	res, err := rollupfeed.Rebuild(ctx, h.raw, h.dst, tenant, device, from, to,
		rollupfeed.Version(h.now()), func(p rollupfeed.Progress) {
			send(ProgressLine{Done: p.Done, Total: p.Total, Device: p.Device, Day: p.Day.String()})
		})
	if err != nil {
		if errors.Is(err, context.DeadlineExceeded) && r.Context().Err() == nil {
			err = fmt.Errorf("stopped after rollups.rebuild_timeout (%s): rebuild a shorter range: %w", h.rebuildTimeout, err)
		}
		h.logger.ErrorContext(r.Context(), "rebuild rollups", "tenant", tenant, "err", err)
		send(ProgressLine{Error: err.Error()})
		return
	}
	h.logger.InfoContext(r.Context(), "rollups rebuilt", "tenant", tenant, "from", ts(from), "to", ts(to), "device_days", res.DeviceDays, "rows", res.Written)
	// Every device's whole days are repaired: their dirty marks can go.
	if days := wholeDays(from, to); h.marks != nil && device == "" && len(days) > 0 {
		if err := h.marks.ClearDirty(tenant, days, before); err != nil {
			h.logger.ErrorContext(r.Context(), "clear the dirty marks of rebuilt days", "tenant", tenant, "err", err)
		}
	}
	send(ProgressLine{Result: &res})
}

// VerifyJSON is the answer of /v1/rollups/verify.
type VerifyJSON = wire.Verification

// Verify serves GET /v1/rollups/verify.
func (h *Handler) Verify(w http.ResponseWriter, r *http.Request) {
	day, err := readparam.Day("day", r.URL.Query().Get("day"))
	if err != nil {
		httpx.Error(w, http.StatusBadRequest, err.Error())
		return
	}
	ctx, cancel := h.deadline(r)
	defer cancel()
	res, err := rollupfeed.Verify(ctx, h.raw, h.dst, httpx.Tenant(r.Context()), day)
	if err != nil {
		h.fail(w, r, "verify rollups", err)
		return
	}
	out := VerifyJSON{Day: day.String(), Devices: res.Devices, Metrics: res.Metrics, RawRows: res.RawRows,
		RollupRows: res.RollupRows, Mismatches: res.Mismatches}
	if out.Mismatches == nil {
		out.Mismatches = []rollupfeed.Mismatch{}
	}
	httpx.JSON(w, http.StatusOK, out)
}

// Status serves GET /v1/rollups/status.
func (h *Handler) Status(w http.ResponseWriter, r *http.Request) {
	httpx.JSON(w, http.StatusOK, h.status(httpx.Tenant(r.Context())))
}
