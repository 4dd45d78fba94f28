package sink

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice/internal/buckets"
	"github.com/sluicehq/sluice/internal/hotparts"
	"github.com/sluicehq/sluice/internal/model"
)

// healthMetrics are the partition health metrics of the sink.
type healthMetrics struct {
	reconciled  prometheus.Counter
	closedRows  *prometheus.HistogramVec
	closedBytes *prometheus.HistogramVec
	subBuckets  *prometheus.HistogramVec
}

func newHealthMetrics(reg prometheus.Registerer) *healthMetrics {
	m := &healthMetrics{
		reconciled: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sluice_sink_partitions_reconciled_total",
			Help: "Partitions whose catalogue entry, left ahead by a gateway that stopped without settling, was recounted from their rows.",
		}),
		closedRows: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "sluice_partition_closed_rows",
			Help:    "Rows of each partition this gateway closed at its bound, by kind.",
			Buckets: prometheus.ExponentialBuckets(1000, 2, 12), // 1k .. 2M
		}, []string{"kind"}),
		closedBytes: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "sluice_partition_closed_bytes",
			Help:    "Bytes of row payload of each partition this gateway closed at its bound, by kind.",
			Buckets: prometheus.ExponentialBuckets(64<<10, 2, 12), // 64 KiB .. 128 MiB
		}, []string{"kind"}),
		subBuckets: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "sluice_partition_sub_buckets",
			Help:    "Partitions of a series-day (device-day or stream-day), observed each time this gateway opens one, by kind: a count above 1 is a split day.",
			Buckets: []float64{1, 2, 3, 5, 10, 20, 50, 100, 500, 1000, 5000},
		}, []string{"kind"}),
	}
	if reg != nil {
		reg.MustRegister(m.reconciled, m.closedRows, m.closedBytes, m.subBuckets)
	}
	return m
}

// observe feeds the partition health signals of a planned batch: the rows
// it writes per partition to the hot-partition tracker, the partitions the
// round closed and opened to the histograms.
func (s *Sink) observe(bt *batch, entries []buckets.Entry) {
	parts := bt.b.Partitions
	s.hot.AddEach(time.Now(), len(parts), func(i int) (model.PartitionKey, int64) {
		return parts[i].Key, int64(len(parts[i].Readings) + len(parts[i].Events))
	})
	for _, e := range entries {
		if e.Info.Closed {
			kind := e.Info.Key.Kind.String()
			s.hm.closedRows.WithLabelValues(kind).Observe(float64(e.Info.Rows))
			s.hm.closedBytes.WithLabelValues(kind).Observe(float64(e.Info.Bytes))
		}
	}
	for _, o := range s.planner.TakeOpened() {
		s.hm.subBuckets.WithLabelValues(o.Kind.String()).Observe(float64(o.N))
	}
}

// Hottest returns up to n of tenant's partitions of kind on day that this
// gateway wrote fastest recently (over about the last minute), fastest
// first. It reads memory only: the tracker holds at most
// Config.HotPartitions partitions of all tenants.
func (s *Sink) Hottest(tenant string, kind model.Kind, day model.Day, n int) []hotparts.Rate {
	return s.hot.Top(time.Now(), func(k model.PartitionKey) bool {
		return k.Tenant == tenant && k.Kind == kind && k.Day == day
	}, n)
}

// maxHotPartitions bounds sink.hot_partitions: about 200 MB of tracker.
const maxHotPartitions = 1_000_000
