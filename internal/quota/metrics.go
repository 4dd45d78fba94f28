package quota

import "github.com/prometheus/client_golang/prometheus"

// metrics are labelled by tenant: the tenants of the configuration by
// name, every other one as "(other)", so the label's values are bounded
// by the configuration.
type metrics struct {
	refused     *prometheus.CounterVec
	refusedRows *prometheus.CounterVec
	waits       *prometheus.CounterVec
	waitSeconds *prometheus.CounterVec
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		refused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_quota_refused_requests_total", Help: "HTTP ingest requests answered 429 because the tenant was over a quota, by tenant and quota.",
		}, []string{"tenant", "quota"}),
		refusedRows: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_quota_refused_rows_total", Help: "Rows of HTTP ingest requests answered 429 after decoding, by tenant (requests refused before their body was read are not counted here).",
		}, []string{"tenant"}),
		waits: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_quota_waits_total", Help: "MQTT writes held back until the tenant's bucket allowed them, by tenant and quota.",
		}, []string{"tenant", "quota"}),
		waitSeconds: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_quota_wait_seconds_total", Help: "Time MQTT writes spent waiting for the tenant's quotas, by tenant.",
		}, []string{"tenant"}),
	}
	if reg != nil {
		reg.MustRegister(m.refused, m.refusedRows, m.waits, m.waitSeconds)
	}
	return m
}
