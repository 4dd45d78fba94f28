package sink

import "github.com/prometheus/client_golang/prometheus"

// healthMetrics are the partition health metrics of the sink.
type healthMetrics struct {
	reconciled prometheus.Counter
}

func newHealthMetrics(reg prometheus.Registerer) *healthMetrics {
	m := &healthMetrics{
		reconciled: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sluice_sink_partitions_reconciled_total",
			Help: "Partitions whose catalogue entry, left ahead by a gateway that stopped without settling, was recounted from their rows.",
		}),
	}
	if reg != nil {
		reg.MustRegister(m.reconciled)
	}
	return m
}
