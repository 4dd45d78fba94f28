package rollupfeed

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// dropReasons are the values of sluice_rollup_dropped_rows_total's reason:
// the outbox was full or failed, an outbox record could not be decoded, or
// a device's minutes could not be recomputed after maxFailures tries
// (recompute_failed; counted in minutes).
var dropReasons = []string{"outbox_full", "outbox_error", "corrupt", "recompute_failed"}

type metrics struct {
	emitted     prometheus.Counter
	rolled      prometheus.Counter
	carried     prometheus.Counter
	rawReads    prometheus.Counter
	rawReadings prometheus.Counter
	rollErrors  prometheus.Counter
	shipped     prometheus.Counter
	shipErrors  prometheus.Counter
	dropped     *prometheus.CounterVec
	pending     prometheus.Gauge
	queueWait   prometheus.Counter
}

func newMetrics(reg prometheus.Registerer, ob Outbox, f *Feed) *metrics {
	m := &metrics{
		emitted: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sluice_rollup_rows_emitted_total", Help: "Rollup rows recomputed from the raw store, or summed from the one commit that wrote their minute, and handed to the rollup backend or its outbox.",
		}),
		carried: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sluice_rollup_minutes_carried_total", Help: "Device-minutes summed from the one commit that wrote them, without reading the raw store back (embedded store).",
		}),
		rolled: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sluice_rollup_minutes_rolled_total", Help: "Device-minutes recomputed from the raw store.",
		}),
		rawReads: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sluice_rollup_raw_reads_total", Help: "Range reads of the raw store made to recompute rollups.",
		}),
		rawReadings: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sluice_rollup_raw_readings_read_total", Help: "Readings read back from the raw store to recompute rollups.",
		}),
		rollErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sluice_rollup_recompute_errors_total", Help: "Device recomputes that failed to read the raw store (retried).",
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
		pending: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "sluice_rollup_pending_minutes", Help: "Device-minutes written and waiting to be recomputed (an upper bound).",
		}),
		queueWait: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sluice_rollup_queue_wait_seconds_total",
			Help: "Time the write pipeline waited for the rollups (pending minutes weighing more than twice rollups.max_pending).",
		}),
	}
	// Every reason is exported from the start, at 0, so that an alert on
	// increase() sees the first drop (a series born non-zero has no
	// increase).
	for _, r := range dropReasons {
		m.dropped.WithLabelValues(r)
	}
	lag := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "sluice_rollup_lag_seconds",
		Help: "How long the oldest pending device-minute has waited for its recompute, or a carried one to be stored (0 when none waits).",
	}, func() float64 { return f.lag().Seconds() })
	depthRows := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "sluice_rollup_outbox_rows", Help: "Rollup rows waiting in the durable outbox for the rollup backend.",
	}, func() float64 { return float64(ob.Depth().Rows) })
	depthBytes := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "sluice_rollup_outbox_bytes", Help: "Bytes of rollup rows waiting in the durable outbox.",
	}, func() float64 { return float64(ob.Depth().Bytes) })
	if reg != nil {
		reg.MustRegister(m.emitted, m.rolled, m.carried, m.rawReads, m.rawReadings, m.rollErrors, m.shipped, m.shipErrors, m.dropped, m.pending, m.queueWait, lag, depthRows, depthBytes)
	}
	return m
}

// lag is how long the oldest pending device-minute has waited.
func (f *Feed) lag() time.Duration {
	f.mu.Lock()
	defer f.mu.Unlock()
	t := f.pending.oldestSince()
	if c := f.carried.since; len(f.carried.b) > 0 && (t.IsZero() || c.Before(t)) {
		t = c
	}
	if t.IsZero() {
		return 0
	}
	return max(0, f.now().Sub(t))
}
