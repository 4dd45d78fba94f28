package rollupfeed

import "github.com/prometheus/client_golang/prometheus"

// dropReasons are the values of sluice_rollup_dropped_rows_total's reason:
// a batch committed after the feed began to close (queue_full), the outbox
// was full or failed, or an outbox record could not be decoded.
var dropReasons = []string{"queue_full", "outbox_full", "outbox_error", "corrupt"}

type metrics struct {
	emitted    prometheus.Counter
	reemitted  prometheus.Counter
	late       prometheus.Counter
	duplicates prometheus.Counter
	shipped    prometheus.Counter
	shipErrors prometheus.Counter
	dropped    *prometheus.CounterVec
	windows    prometheus.Gauge
	queueWait  prometheus.Counter
}

func newMetrics(reg prometheus.Registerer, ob Outbox) *metrics {
	m := &metrics{
		emitted: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sluice_rollup_rows_emitted_total", Help: "Rollup rows emitted by the aggregator, re-emissions included.",
		}),
		reemitted: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sluice_rollup_rows_reemitted_total", Help: "Rollup rows emitted again as a new version after a late reading.",
		}),
		late: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sluice_rollup_late_readings_total", Help: "Reading rows that arrived after their minute window closed.",
		}),
		duplicates: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sluice_rollup_duplicate_readings_total", Help: "Reading rows seen twice by the aggregator (retries), counted once.",
		}),
		shipped: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sluice_rollup_rows_shipped_total", Help: "Rollup rows inserted into the rollup backend.",
		}),
		shipErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sluice_rollup_ship_errors_total", Help: "Failed inserts into the rollup backend (retried).",
		}),
		dropped: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_rollup_dropped_rows_total",
			Help: "Rows left out of the rollups (raw data is unaffected; their days are marked dirty for rebuild), by reason.",
		}, []string{"reason"}),
		windows: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "sluice_rollup_windows", Help: "Minute windows held in memory by the aggregator.",
		}),
		queueWait: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sluice_rollup_queue_wait_seconds_total",
			Help: "Time the write pipeline waited for room in the aggregator's queue (rollups behind ingest).",
		}),
	}
	// Every reason is exported from the start, at 0, so that an alert on
	// increase() sees the first drop (a series born non-zero has no
	// increase).
	for _, r := range dropReasons {
		m.dropped.WithLabelValues(r)
	}
	depthRows := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "sluice_rollup_outbox_rows", Help: "Rollup rows waiting in the durable outbox for the rollup backend.",
	}, func() float64 { return float64(ob.Depth().Rows) })
	depthBytes := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "sluice_rollup_outbox_bytes", Help: "Bytes of rollup rows waiting in the durable outbox.",
	}, func() float64 { return float64(ob.Depth().Bytes) })
	if reg != nil {
		reg.MustRegister(m.emitted, m.reemitted, m.late, m.duplicates, m.shipped, m.shipErrors, m.dropped, m.windows, m.queueWait, depthRows, depthBytes)
	}
	return m
}
