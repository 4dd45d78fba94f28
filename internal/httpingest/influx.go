package httpingest

import (
	"errors"
	"net/http"

	"github.com/sluicehq/sluice/internal/decode"
	"github.com/sluicehq/sluice/internal/httpx"
	"github.com/sluicehq/sluice/internal/lineproto"
	"github.com/sluicehq/sluice/internal/model"
	"github.com/sluicehq/sluice/internal/sink"
)

// kindLineProtocol is the kind label of line-protocol writes in the ingest
// counters.
const kindLineProtocol = "lineprotocol"

// InfluxV1 serves POST /write, the InfluxDB 1.x write endpoint: the body is
// line protocol, precision is n, ns, u, us, ms, s, m or h, and db and rp
// are accepted and ignored (the token picks the tenant). Errors are
// answered {"error": "..."} as InfluxDB 1.x does.
func (h *Handler) InfluxV1(w http.ResponseWriter, r *http.Request) {
	h.serveInflux(w, r, false)
}

// InfluxV2 serves POST /api/v2/write, the InfluxDB 2.x write endpoint:
// the body is line protocol, precision is ns, us, ms or s, and org, orgID
// and bucket are accepted and ignored (the token picks the tenant). Errors
// are answered {"code": "...", "message": "..."} as InfluxDB 2.x does.
func (h *Handler) InfluxV2(w http.ResponseWriter, r *http.Request) {
	h.serveInflux(w, r, true)
}

// serveInflux is POST /v1/readings for line protocol: the same body
// limits, budgets, quotas, validation and all-or-nothing write, answered
// as InfluxDB answers: 204 once the readings are durable.
func (h *Handler) serveInflux(w http.ResponseWriter, r *http.Request, v2 bool) {
	const kl = kindLineProtocol
	api := "v1"
	if v2 {
		api = "v2"
	}
	tenant := httpx.Tenant(r.Context())
	prec, err := lineproto.ParsePrecision(r.URL.Query().Get("precision"), !v2)
	if err != nil {
		h.rejectInflux(w, v2, "precision", http.StatusBadRequest, "nothing stored: "+err.Error())
		return
	}
	charge := h.bodies.Charge()
	defer charge.Release()
	body, ok := h.takeBody(w, r, kl, charge, influxAnswers{v2})
	if !ok {
		return
	}
	h.m.bytes.WithLabelValues(kl).Add(float64(len(body)))
	res, err := h.w.Reserve(r.Context(), lineproto.CellsBound(body, h.cfg.Limits))
	if err != nil {
		h.putBuf(body)
		h.influxWriteError(w, r, v2, tenant, 0, err)
		return
	}
	defer res.Release() // unless WriteReserved took it
	lim := h.cfg.Limits
	now := h.now()
	if h.cfg.Horizon != nil {
		lim.Oldest = h.cfg.Horizon(model.KindReadings, tenant, now)
	}
	rs, lines, err := lineproto.Readings(body, now, h.cfg.Influx, lim, lineproto.Options{Precision: prec})
	h.putBuf(body)
	charge.Release()
	h.m.lpLines.WithLabelValues(api).Add(float64(lines))
	if err != nil {
		var le *lineproto.LineError
		var tm *decode.TooManyRowsError
		switch {
		case errors.As(err, &le):
			h.rejectInflux(w, v2, "invalid", http.StatusBadRequest, "nothing stored: "+le.Error())
		case errors.As(err, &tm):
			h.rejectInflux(w, v2, "too_many_rows", http.StatusRequestEntityTooLarge, "nothing stored: "+tm.Error())
		default:
			h.rejectInflux(w, v2, "invalid", http.StatusBadRequest, "nothing stored: "+err.Error())
		}
		return
	}
	if err := h.w.WriteReserved(r.Context(), res, &sink.Request{Tenant: tenant, Readings: rs}); err != nil {
		h.influxWriteError(w, r, v2, tenant, len(rs), err)
		return
	}
	h.m.accepted.WithLabelValues(kl).Add(float64(len(rs)))
	w.WriteHeader(http.StatusNoContent)
}

func (h *Handler) influxWriteError(w http.ResponseWriter, r *http.Request, v2 bool, tenant string, n int, err error) {
	f := h.classify(r, kindLineProtocol, tenant, n, err)
	h.m.rejected.WithLabelValues(kindLineProtocol, f.reason).Inc()
	if f.status == 0 {
		return // the client is gone
	}
	retry := 0.0
	if f.status == http.StatusTooManyRequests || f.status == http.StatusServiceUnavailable {
		retry = max(1, f.retryAfter.Seconds())
	}
	httpx.InfluxError(w, v2, f.status, retry, f.msg)
}

func (h *Handler) rejectInflux(w http.ResponseWriter, v2 bool, reason string, status int, msg string) {
	h.m.rejected.WithLabelValues(kindLineProtocol, reason).Inc()
	httpx.InfluxError(w, v2, status, 0, msg)
}
