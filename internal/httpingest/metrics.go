package httpingest

import "github.com/prometheus/client_golang/prometheus"

type metrics struct {
	accepted *prometheus.CounterVec
	rejected *prometheus.CounterVec
	bytes    *prometheus.CounterVec
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		accepted: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_http_rows_accepted_total", Help: "Rows acknowledged with 202, by kind.",
		}, []string{"kind"}),
		rejected: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_http_requests_rejected_total", Help: "Ingest requests refused, by kind and reason.",
		}, []string{"kind", "reason"}),
		bytes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_http_body_bytes_total", Help: "Decompressed ingest body bytes read, by kind.",
		}, []string{"kind"}),
	}
	if reg != nil {
		reg.MustRegister(m.accepted, m.rejected, m.bytes)
	}
	return m
}
