// Package httpingest serves POST /v1/readings and POST /v1/audit, and the
// InfluxDB write endpoints POST /write and /api/v2/write (line protocol,
// see influx.go): it reads the body within its limits (gzip included),
// decodes and validates every row, and hands the request to the write
// pipeline as one all-or-nothing unit. It answers 202 (204 to line
// protocol) only after the pipeline reports the rows durable.
//
// Memory is admitted before it is spent. Every byte of buffer a body is read
// or inflated into is first charged to a gateway-wide budget
// (Config.MaxInflightBodyBytes): from Content-Length when it is known, in
// bounded steps as a chunked or gzip body grows; the budget is given back
// once the body is decoded. The rows a body can hold are bounded from its
// bytes without decoding and taken from the pipeline's row budget
// (sink.Sink.Reserve) before decoding. Either budget staying full answers
// 503 with Retry-After, before the memory is allocated.
package httpingest

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice/internal/audit/auditlog"
	"github.com/sluicehq/sluice/internal/bytebudget"
	"github.com/sluicehq/sluice/internal/decode"
	"github.com/sluicehq/sluice/internal/httpx"
	"github.com/sluicehq/sluice/internal/lineproto"
	"github.com/sluicehq/sluice/internal/model"
	"github.com/sluicehq/sluice/internal/quota"
	"github.com/sluicehq/sluice/internal/sink"
)

// Writer is the write pipeline: room for a request's rows is reserved
// before they are decoded, then the rows are written under it.
type Writer interface {
	Reserve(ctx context.Context, rows int) (*sink.Reservation, error)
	WriteReserved(ctx context.Context, res *sink.Reservation, req *sink.Request) error
}

// Config bounds request bodies.
type Config struct {
	MaxBodyBytes         int64
	MaxDecompressedBytes int64
	// MaxInflightBodyBytes is the budget of body buffers held by all
	// requests at once (see the package comment). It must be at least
	// MinInflightBodyBytes(MaxBodyBytes, MaxDecompressedBytes); zero means
	// exactly that.
	MaxInflightBodyBytes int64
	// BodyAdmissionTimeout is how long a request waits for room in that
	// budget before it is answered 503.
	BodyAdmissionTimeout time.Duration
	Limits               decode.Limits
	// Horizon, if set, returns the oldest timestamp kept for a tenant's
	// data of a kind at now (the retention policy): older rows are refused
	// with a 400 naming the row, as they would be dropped at once.
	Horizon func(kind model.Kind, tenant string, now time.Time) time.Time
	// Influx maps line protocol (POST /write, /api/v2/write) to readings.
	Influx lineproto.Config
}

// Handler serves both ingest endpoints.
type Handler struct {
	cfg    Config
	w      Writer
	now    func() time.Time
	logger *slog.Logger
	m      *metrics
	bodies *bytebudget.Budget
	// bufs holds body buffers (*[]byte) for reuse: see getBuf.
	bufs sync.Pool
}

// New returns the ingest handler. now is the clock used for the future
// timestamp limit.
func New(cfg Config, w Writer, now func() time.Time, logger *slog.Logger, reg prometheus.Registerer) *Handler {
	if cfg.MaxInflightBodyBytes == 0 {
		cfg.MaxInflightBodyBytes = MinInflightBodyBytes(cfg.MaxBodyBytes, cfg.MaxDecompressedBytes)
	}
	m := newMetrics(reg)
	return &Handler{cfg: cfg, w: w, now: now, logger: logger, m: m,
		bodies: bytebudget.New(cfg.MaxInflightBodyBytes, cfg.BodyAdmissionTimeout, m.body)}
}

// Readings serves POST /v1/readings.
func (h *Handler) Readings(w http.ResponseWriter, r *http.Request) {
	h.serve(w, r, model.KindReadings)
}

// Audit serves POST /v1/audit.
func (h *Handler) Audit(w http.ResponseWriter, r *http.Request) {
	h.serve(w, r, model.KindAudit)
}

func (h *Handler) serve(w http.ResponseWriter, r *http.Request, kind model.Kind) {
	kl := kind.String()
	tenant := httpx.Tenant(r.Context())
	ct := r.Header.Get("Content-Type")
	if strings.HasPrefix(ct, "application/x-www-form-urlencoded") {
		ct = "" // what curl -d sends by default: read the body as JSON
	}
	format, err := decode.FormatFromContentType(ct)
	if err != nil {
		h.reject(w, kl, "content_type", http.StatusUnsupportedMediaType, err.Error())
		return
	}
	charge := h.bodies.Charge()
	defer charge.Release()
	body, ok := h.takeBody(w, r, kl, charge, jsonAnswers{})
	if !ok {
		return
	}
	h.m.bytes.WithLabelValues(kl).Add(float64(len(body)))
	// Take the pipeline's room for as many rows as the body can hold before
	// decoding it, so that a request the pipeline has no room for is refused
	// before its rows cost memory.
	var bound int
	if kind == model.KindReadings {
		bound = decode.ReadingCellsBound(body, h.cfg.Limits)
	} else {
		bound = decode.AuditRowsBound(body, h.cfg.Limits)
	}
	res, err := h.w.Reserve(r.Context(), bound)
	if err != nil {
		h.putBuf(body)
		h.writeError(w, r, kl, tenant, 0, err)
		return
	}
	defer res.Release() // unless WriteReserved took it
	req := &sink.Request{Tenant: tenant}
	lim := h.cfg.Limits
	now := h.now()
	if h.cfg.Horizon != nil {
		lim.Oldest = h.cfg.Horizon(kind, tenant, now)
	}
	n := 0
	if kind == model.KindReadings {
		req.Readings, err = decode.Readings(body, format, now, lim, decode.Options{})
		n = len(req.Readings)
	} else {
		req.Audit, err = decode.Audit(body, format, now, lim)
		n = len(req.Audit)
	}
	// The decoder copies everything it returns: the body is not needed any
	// more, its buffer goes back to the pool and its room to the budget
	// while the rows are written.
	h.putBuf(body)
	charge.Release()
	if err != nil {
		var fe *decode.FieldError
		var tm *decode.TooManyRowsError
		switch {
		case errors.As(err, &fe):
			row := fe.Row
			h.m.rejected.WithLabelValues(kl, "invalid").Inc()
			httpx.JSON(w, http.StatusBadRequest, httpx.ErrorBody{Error: "nothing stored: " + fe.Error(), Row: &row, Line: fe.Line, Field: fe.Field, Reason: fe.Reason})
		case errors.As(err, &tm):
			h.reject(w, kl, "too_many_rows", http.StatusRequestEntityTooLarge, "nothing stored: "+tm.Error())
		default:
			h.reject(w, kl, "invalid", http.StatusBadRequest, "nothing stored: "+err.Error())
		}
		return
	}
	if err := h.w.WriteReserved(r.Context(), res, req); err != nil {
		h.writeError(w, r, kl, tenant, n, err)
		return
	}
	h.m.accepted.WithLabelValues(kl).Add(float64(n))
	httpx.JSON(w, http.StatusAccepted, struct {
		Accepted int `json:"accepted"`
	}{n})
}

// writeError answers a request the pipeline did not take.
func (h *Handler) writeError(w http.ResponseWriter, r *http.Request, kl, tenant string, n int, err error) {
	f := h.classify(r, kl, tenant, n, err)
	switch {
	case f.status == 0:
		h.m.rejected.WithLabelValues(kl, f.reason).Inc() // the client is gone
	case f.status == http.StatusTooManyRequests:
		h.m.rejected.WithLabelValues(kl, f.reason).Inc()
		httpx.TooMany(w, f.retryAfter, f.msg)
	case f.status == http.StatusServiceUnavailable:
		h.m.rejected.WithLabelValues(kl, f.reason).Inc()
		httpx.Busy(w, f.retryAfter, f.msg)
	default:
		h.reject(w, kl, f.reason, f.status, f.msg)
	}
}

// failure is how a request the pipeline did not take is answered: status
// (0 when the client is gone and nobody is answered), Retry-After for 429
// and 503, the reason label of the rejected counter and the message.
type failure struct {
	status     int
	retryAfter time.Duration
	reason     string
	msg        string
}

// classify maps an error of the pipeline (Reserve, WriteReserved) to its
// answer; every ingest endpoint shares it, whatever the format of its
// answers.
func (h *Handler) classify(r *http.Request, kl, tenant string, n int, err error) failure {
	var busy *sink.BusyError
	var over *quota.ExceededError
	var conflict *sink.ConflictError
	var late *auditlog.LateError
	switch {
	case errors.As(err, &conflict):
		return failure{status: http.StatusConflict, reason: "conflict", msg: "nothing stored: " + conflict.Error()}
	case errors.As(err, &late):
		return failure{status: http.StatusUnprocessableEntity, reason: "late", msg: "nothing stored: " + late.Error()}
	case errors.As(err, &over):
		return failure{status: http.StatusTooManyRequests, retryAfter: over.RetryAfter, reason: "quota", msg: quota.ExceededMessage(over)}
	case errors.As(err, &busy):
		return failure{status: http.StatusServiceUnavailable, retryAfter: busy.RetryAfter, reason: "busy", msg: "nothing stored: " + busy.Error()}
	case errors.Is(err, sink.ErrClosed):
		return failure{status: http.StatusServiceUnavailable, retryAfter: 5 * time.Second, reason: "shutdown", msg: "nothing stored: gateway is shutting down"}
	case r.Context().Err() != nil:
		return failure{reason: "cancelled"}
	default:
		h.logger.ErrorContext(r.Context(), "write request", "kind", kl, "tenant", tenant, "rows", n, "err", err)
		return failure{status: http.StatusInternalServerError, reason: "store", msg: "rows not stored: " + err.Error()}
	}
}

func (h *Handler) reject(w http.ResponseWriter, kind, reason string, status int, msg string) {
	h.m.rejected.WithLabelValues(kind, reason).Inc()
	httpx.Error(w, status, msg)
}
