// Package httpingest serves POST /v1/readings and POST /v1/audit: it reads
// the body within its limits (gzip included), decodes and validates every
// row, and hands the request to the write pipeline as one all-or-nothing
// unit. It answers 202 only after the pipeline reports the rows durable.
package httpingest

import (
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice/internal/audit/auditlog"
	"github.com/sluicehq/sluice/internal/decode"
	"github.com/sluicehq/sluice/internal/httpx"
	"github.com/sluicehq/sluice/internal/model"
	"github.com/sluicehq/sluice/internal/sink"
)

// Writer is the write pipeline.
type Writer interface {
	Write(ctx context.Context, req *sink.Request) error
}

// Config bounds request bodies.
type Config struct {
	MaxBodyBytes         int64
	MaxDecompressedBytes int64
	Limits               decode.Limits
	// Horizon, if set, returns the oldest timestamp kept for a tenant's
	// data of a kind at now (the retention policy): older rows are refused
	// with a 400 naming the row, as they would be dropped at once.
	Horizon func(kind model.Kind, tenant string, now time.Time) time.Time
}

// Handler serves both ingest endpoints.
type Handler struct {
	cfg    Config
	w      Writer
	now    func() time.Time
	logger *slog.Logger
	m      *metrics
	bufs   sync.Pool
}

// New returns the ingest handler. now is the clock used for the future
// timestamp limit.
func New(cfg Config, w Writer, now func() time.Time, logger *slog.Logger, reg prometheus.Registerer) *Handler {
	return &Handler{cfg: cfg, w: w, now: now, logger: logger, m: newMetrics(reg),
		bufs: sync.Pool{New: func() any { return new(bytes.Buffer) }}}
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
	buf := h.bufs.Get().(*bytes.Buffer)
	// The decoder copies everything it returns, so the buffer can go back
	// to the pool even while the pipeline still holds the rows.
	defer h.putBuf(buf)
	if status, msg := h.readBody(w, r, buf); status != 0 {
		h.reject(w, kl, "body", status, msg)
		return
	}
	h.m.bytes.WithLabelValues(kl).Add(float64(buf.Len()))
	req := &sink.Request{Tenant: tenant}
	lim := h.cfg.Limits
	now := h.now()
	if h.cfg.Horizon != nil {
		lim.Oldest = h.cfg.Horizon(kind, tenant, now)
	}
	n := 0
	if kind == model.KindReadings {
		req.Readings, err = decode.Readings(buf.Bytes(), format, now, lim, decode.Options{})
		n = len(req.Readings)
	} else {
		req.Audit, err = decode.Audit(buf.Bytes(), format, now, lim)
		n = len(req.Audit)
	}
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
	if err := h.w.Write(r.Context(), req); err != nil {
		var busy *sink.BusyError
		var conflict *sink.ConflictError
		var late *auditlog.LateError
		switch {
		case errors.As(err, &conflict):
			h.reject(w, kl, "conflict", http.StatusConflict, "nothing stored: "+conflict.Error())
		case errors.As(err, &late):
			h.reject(w, kl, "late", http.StatusUnprocessableEntity, "nothing stored: "+late.Error())
		case errors.As(err, &busy):
			h.m.rejected.WithLabelValues(kl, "busy").Inc()
			httpx.Busy(w, busy.RetryAfter, "nothing stored: "+busy.Error())
		case errors.Is(err, sink.ErrClosed):
			h.m.rejected.WithLabelValues(kl, "shutdown").Inc()
			httpx.Busy(w, 5*time.Second, "nothing stored: gateway is shutting down")
		case r.Context().Err() != nil:
			h.m.rejected.WithLabelValues(kl, "cancelled").Inc() // the client is gone
		default:
			h.logger.Error("write request", "kind", kl, "tenant", tenant, "rows", n, "err", err)
			h.reject(w, kl, "store", http.StatusInternalServerError, "rows not stored: "+err.Error())
		}
		return
	}
	h.m.accepted.WithLabelValues(kl).Add(float64(n))
	httpx.JSON(w, http.StatusAccepted, struct {
		Accepted int `json:"accepted"`
	}{n})
}

func (h *Handler) reject(w http.ResponseWriter, kind, reason string, status int, msg string) {
	h.m.rejected.WithLabelValues(kind, reason).Inc()
	httpx.Error(w, status, msg)
}

func (h *Handler) putBuf(b *bytes.Buffer) {
	if b.Cap() > 4<<20 {
		return // let large buffers go rather than pin them
	}
	b.Reset()
	h.bufs.Put(b)
}

// readBody reads the (possibly gzip-encoded) body into buf. It returns a
// status and message when the body cannot be taken.
func (h *Handler) readBody(w http.ResponseWriter, r *http.Request, buf *bytes.Buffer) (int, string) {
	if r.ContentLength > h.cfg.MaxBodyBytes {
		return http.StatusRequestEntityTooLarge, fmt.Sprintf("nothing stored: body of %d bytes is over the limit of %d bytes", r.ContentLength, h.cfg.MaxBodyBytes)
	}
	body := http.MaxBytesReader(w, r.Body, h.cfg.MaxBodyBytes)
	var src io.Reader = body
	switch enc := strings.ToLower(strings.TrimSpace(r.Header.Get("Content-Encoding"))); enc {
	case "", "identity":
	case "gzip":
		zr, err := gzip.NewReader(body)
		if err != nil {
			return bodyError(err, h.cfg.MaxBodyBytes, "nothing stored: body is not valid gzip")
		}
		defer zr.Close()
		src = io.LimitReader(zr, h.cfg.MaxDecompressedBytes+1)
	default:
		return http.StatusUnsupportedMediaType, fmt.Sprintf("nothing stored: Content-Encoding %q is not supported (allowed: gzip, identity)", enc)
	}
	if _, err := buf.ReadFrom(src); err != nil {
		return bodyError(err, h.cfg.MaxBodyBytes, "nothing stored: read body: "+err.Error())
	}
	if int64(buf.Len()) > h.cfg.MaxDecompressedBytes {
		return http.StatusRequestEntityTooLarge, fmt.Sprintf("nothing stored: decompressed body is over the limit of %d bytes", h.cfg.MaxDecompressedBytes)
	}
	return 0, ""
}

func bodyError(err error, limit int64, msg string) (int, string) {
	var mbe *http.MaxBytesError
	if errors.As(err, &mbe) {
		return http.StatusRequestEntityTooLarge, fmt.Sprintf("nothing stored: body is over the limit of %d bytes", limit)
	}
	if errors.Is(err, gzip.ErrHeader) || errors.Is(err, gzip.ErrChecksum) || errors.Is(err, io.ErrUnexpectedEOF) {
		return http.StatusBadRequest, "nothing stored: body is not valid gzip"
	}
	return http.StatusBadRequest, msg
}
