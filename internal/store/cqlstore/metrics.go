package cqlstore

import "github.com/prometheus/client_golang/prometheus"

// metrics counts requests to the cluster by operation, never by tenant or
// device.
type metrics struct {
	seconds *prometheus.HistogramVec
	errors  *prometheus.CounterVec
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		seconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "sluice_cassandra_request_seconds",
			Help:    "Duration of requests (statements or single-partition batches) to Cassandra, retries included, by operation.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 14),
		}, []string{"op"}),
		errors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_cassandra_request_errors_total",
			Help: "Requests to Cassandra that failed after their retries, by operation.",
		}, []string{"op"}),
	}
	if reg != nil {
		reg.MustRegister(m.seconds, m.errors)
	}
	return m
}
