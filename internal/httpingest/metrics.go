package httpingest

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice/internal/bytebudget"
)

type metrics struct {
	accepted *prometheus.CounterVec
	rejected *prometheus.CounterVec
	bytes    *prometheus.CounterVec
	lpLines  *prometheus.CounterVec
	// body is the body budget's (package bytebudget).
	body bytebudget.Metrics
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		accepted: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_http_rows_accepted_total", Help: "Rows acknowledged (202; 204 for line protocol), by kind: readings, audit, lineprotocol (readings written as line protocol).",
		}, []string{"kind"}),
		rejected: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_http_requests_rejected_total", Help: "Ingest requests refused, by kind and reason.",
		}, []string{"kind", "reason"}),
		bytes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_http_body_bytes_total", Help: "Decompressed ingest body bytes read, by kind.",
		}, []string{"kind"}),
		lpLines: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_http_lineprotocol_lines_total", Help: "Line-protocol lines read from POST /write (api v1) and /api/v2/write (api v2), accepted or not.",
		}, []string{"api"}),
		body: bytebudget.Metrics{
			Inflight: prometheus.NewGauge(prometheus.GaugeOpts{
				Name: "sluice_http_body_inflight_bytes", Help: "Bytes of request body buffers held now, charged to http.max_inflight_body_bytes before they are allocated.",
			}),
			Busy: prometheus.NewCounter(prometheus.CounterOpts{
				Name: "sluice_http_body_busy_total", Help: "Ingest requests refused with 503 because the body budget stayed full.",
			}),
		},
	}
	if reg != nil {
		reg.MustRegister(m.accepted, m.rejected, m.bytes, m.lpLines, m.body.Inflight, m.body.Busy)
	}
	return m
}
