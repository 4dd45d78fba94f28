package retention

import "github.com/prometheus/client_golang/prometheus"

// sweepResults are the values of sluice_retention_sweeps_total's result.
var sweepResults = []string{"ok", "error", "dry_run"}

type metrics struct {
	sweeps      *prometheus.CounterVec
	buckets     *prometheus.CounterVec
	rows        *prometheus.CounterVec
	deletes     *prometheus.CounterVec
	lastSuccess prometheus.Gauge
}

// newMetrics registers the sweeper's metrics on reg (nil: not exported).
func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		sweeps: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_retention_sweeps_total", Help: "Retention sweeps by result (ok, error, dry_run).",
		}, []string{"result"}),
		buckets: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_retention_dropped_buckets_total", Help: "Day buckets dropped, by kind.",
		}, []string{"kind"}),
		rows: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_retention_dropped_rows_total", Help: "Rows dropped as catalogued (an upper bound), by kind.",
		}, []string{"kind"}),
		deletes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_retention_deletes_total", Help: "Delete operations issued (range or partition deletes, never rows), by kind.",
		}, []string{"kind"}),
		lastSuccess: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "sluice_retention_last_success_timestamp_seconds", Help: "When the last sweep without errors started.",
		}),
	}
	// Every result is exported from the start, at 0: an alert on
	// increase(...{result="error"}) then sees the first failure (a series
	// born at 1 has no increase).
	for _, r := range sweepResults {
		m.sweeps.WithLabelValues(r)
	}
	if reg != nil {
		reg.MustRegister(m.sweeps, m.buckets, m.rows, m.deletes, m.lastSuccess)
	}
	return m
}
