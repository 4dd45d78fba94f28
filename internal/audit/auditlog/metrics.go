package auditlog

import "github.com/prometheus/client_golang/prometheus"

type metrics struct {
	sealed       prometheus.Counter
	sealedEvents prometheus.Counter
	sealSeconds  prometheus.Histogram
	errors       prometheus.Counter
	conflicts    prometheus.Counter
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		sealed: prometheus.NewCounter(prometheus.CounterOpts{Name: "sluice_audit_days_sealed_total",
			Help: "Stream-days this gateway sealed into their audit logs."}),
		sealedEvents: prometheus.NewCounter(prometheus.CounterOpts{Name: "sluice_audit_sealed_events_total",
			Help: "Audit events this gateway appended to audit logs by sealing."}),
		sealSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "sluice_audit_seal_seconds",
			Help: "Time to seal one stream-day.", Buckets: prometheus.ExponentialBuckets(0.001, 4, 10)}),
		errors: prometheus.NewCounter(prometheus.CounterOpts{Name: "sluice_audit_seal_errors_total",
			Help: "Seals that failed (retried at the next checkpoint interval)."}),
		conflicts: prometheus.NewCounter(prometheus.CounterOpts{Name: "sluice_audit_seal_conflicts_total",
			Help: "Seals another gateway stored with different contents: the gateways read different events."}),
	}
	if reg != nil {
		reg.MustRegister(m.sealed, m.sealedEvents, m.sealSeconds, m.errors, m.conflicts)
	}
	return m
}
