package auditlog

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
)

// Limits bound the work of one audit log request, as the read API's are
// bounded (read.timeout, read.max_days).
type Limits struct {
	Timeout time.Duration // 0: none
	MaxDays int           // the days one verify may span; 0: reader.MaxDays
}

// Routes returns the read endpoints of the audit logs, by pattern, for
// server.Routes.Extra. Every answer is JSON; proofs and checkpoints are
// carried verbatim in string fields.
func (l *Log) Routes(logger *slog.Logger, lim Limits) map[string]http.HandlerFunc {
	if lim.MaxDays == 0 {
		lim.MaxDays = reader.MaxDays
	}
	h := &handler{l: l, logger: logger, lim: lim}
	return map[string]http.HandlerFunc{
		"GET /v1/audit/checkpoint":  h.route(h.checkpoint),
		"GET /v1/audit/checkpoints": h.route(h.checkpoints),
		"GET /v1/audit/proof":       h.route(h.proof),
		"GET /v1/audit/consistency": h.route(h.consistency),
		"GET /v1/audit/verify":      h.route(h.verify),
	}
}

type handler struct {
	l      *Log
	logger *slog.Logger
	lim    Limits
}

// route serves fn with the request's tenant and stream, under the
// request's deadline, answering its error with fail.
func (h *handler) route(fn func(w http.ResponseWriter, r *http.Request, tenant, stream string) error) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		s, err := streamParam(r)
		if err != nil {
			h.fail(w, r, err)
			return
		}
		ctx := r.Context()
		if h.lim.Timeout > 0 {
			var cancel context.CancelFunc
			ctx, cancel = httpx.ReadTimeout{Timeout: h.lim.Timeout}.Deadline(r)
			defer cancel()
		}
		if err := fn(w, r.WithContext(ctx), httpx.Tenant(ctx), s); err != nil {
			h.fail(w, r, err)
		}
	}
}

// CheckpointAnswer is the answer of GET /v1/audit/checkpoint.
type CheckpointAnswer struct {
	Origin     string   `json:"origin"`
	Day        string   `json:"day"`
	Size       int64    `json:"size"`
	Checkpoint string   `json:"checkpoint"`
	PublicKeys []string `json:"public_keys"`
}

// ProofAnswer is the answer of GET /v1/audit/proof and /consistency.
type ProofAnswer struct {
	Proof string `json:"proof"`
}

func (h *handler) fail(w http.ResponseWriter, r *http.Request, err error) {
	switch {
	case errors.Is(err, ErrNotFound):
		httpx.Error(w, http.StatusNotFound, err.Error())
	case errors.Is(err, errBadParam):
		httpx.Error(w, http.StatusBadRequest, err.Error())
	case httpx.ReadTimeout{Timeout: h.lim.Timeout}.Stopped(w, r, "the audit log read", err):
	default:
		h.logger.Error("audit log read", "path", r.URL.Path, "err", err)
		httpx.Error(w, http.StatusInternalServerError, err.Error())
	}
}

var errBadParam = errors.New("bad parameter")

func streamParam(r *http.Request) (string, error) {
	s := r.URL.Query().Get("stream")
	if s == "" || len(s) > 256 {
		return "", fmt.Errorf("%w: stream is required (1-256 bytes)", errBadParam)
	}
	return s, nil
}

func sizeParam(r *http.Request, name string) (int64, error) {
	v := r.URL.Query().Get(name)
	if v == "" {
		return 0, nil
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < 1 {
		return 0, fmt.Errorf("%w: %s=%q must be a tree size of at least 1", errBadParam, name, v)
	}
	return n, nil
}

func dayParam(r *http.Request, name string, def model.Day) (model.Day, error) {
	v := r.URL.Query().Get(name)
	if v == "" {
		return def, nil
	}
	d, err := model.ParseDay(v)
	if err != nil {
		return 0, fmt.Errorf("%w: %s=%q must be YYYY-MM-DD", errBadParam, name, v)
	}
	return d, nil
}

func (h *handler) checkpoint(w http.ResponseWriter, r *http.Request, tenant, s string) error {
	rec, err := h.l.Latest(r.Context(), tenant, s)
	if err != nil {
		return err
	}
	httpx.JSON(w, http.StatusOK, CheckpointAnswer{Origin: h.l.origin(tenant, s), Day: rec.Day, Size: rec.Size,
		Checkpoint: rec.Checkpoint, PublicKeys: h.l.keys.Public})
	return nil
}

func (h *handler) checkpoints(w http.ResponseWriter, r *http.Request, tenant, s string) error {
	from, err := dayParam(r, "from", model.Day(-1<<30))
	if err != nil {
		return err
	}
	to, err := dayParam(r, "to", model.Day(1<<30))
	if err != nil {
		return err
	}
	recs, err := h.l.Records(r.Context(), tenant, s)
	if err != nil {
		return err
	}
	exp := Export{Origin: h.l.origin(tenant, s), PublicKeys: h.l.keys.Public, Days: []DayRecord{}}
	for _, rec := range recs {
		if rec.day >= from && rec.day <= to {
			exp.Days = append(exp.Days, *rec)
		}
	}
	httpx.JSON(w, http.StatusOK, exp)
	return nil
}

func (h *handler) proof(w http.ResponseWriter, r *http.Request, tenant, s string) error {
	if r.URL.Query().Get("day") == "" {
		return fmt.Errorf("%w: day is required (the UTC day of the event's ts, YYYY-MM-DD)", errBadParam)
	}
	day, err := dayParam(r, "day", 0)
	if err != nil {
		return err
	}
	id := r.URL.Query().Get("event_id")
	if id == "" || len(id) > 256 {
		return fmt.Errorf("%w: event_id is required (1-256 bytes)", errBadParam)
	}
	size, err := sizeParam(r, "size")
	if err != nil {
		return err
	}
	p, err := h.l.Inclusion(r.Context(), tenant, s, day, id, size)
	if err != nil {
		return err
	}
	httpx.JSON(w, http.StatusOK, ProofAnswer{Proof: string(p.Marshal())})
	return nil
}

func (h *handler) consistency(w http.ResponseWriter, r *http.Request, tenant, s string) error {
	old, err := sizeParam(r, "old")
	if err == nil && old == 0 {
		err = fmt.Errorf("%w: old is required (the older checkpoint's tree size)", errBadParam)
	}
	if err != nil {
		return err
	}
	nw, err := sizeParam(r, "new")
	if err != nil {
		return err
	}
	p, err := h.l.Consistency(r.Context(), tenant, s, old, nw)
	if err != nil {
		return err
	}
	httpx.JSON(w, http.StatusOK, ProofAnswer{Proof: string(p.Marshal())})
	return nil
}

func (h *handler) verify(w http.ResponseWriter, r *http.Request, tenant, s string) error {
	recs, err := h.l.Records(r.Context(), tenant, s)
	if err != nil {
		return err
	}
	today := model.DayOf(h.l.now().UnixMilli())
	first := today
	if len(recs) > 0 {
		first = recs[0].day
	}
	from, err := dayParam(r, "from", first)
	if err != nil {
		return err
	}
	to, err := dayParam(r, "to", today)
	if err != nil {
		return err
	}
	if to < from || int(to-from) >= h.lim.MaxDays {
		return fmt.Errorf("%w: from..to must be 1-%d days (read.max_days), got %s..%s", errBadParam, h.lim.MaxDays, from, to)
	}
	start := time.Now()
	rep, err := h.l.verify(r.Context(), tenant, s, recs, from, to) // the records read above: once per request
	if err != nil {
		return err
	}
	h.logger.InfoContext(r.Context(), "audit log verified", "tenant", tenant, "stream", s, "from", from.String(), "to", to.String(),
		"ok", rep.OK, "problems", len(rep.Problems), "seconds", time.Since(start).Seconds())
	httpx.JSON(w, http.StatusOK, rep)
	return nil
}
