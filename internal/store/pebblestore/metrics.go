package pebblestore

import (
	"fmt"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/prometheus/client_golang/prometheus"
)

// scrape is what one scrape reads: Pebble's metrics and the write-stall
// counter.
type scrape struct {
	*pebble.Metrics
	stalls  [stallReasons]uint64
	stalled [stallReasons]time.Duration
}

// family is one metric family of the embedded store.
type family struct {
	Name, Help string
	Type       prometheus.ValueType
	value      func(scrape) float64
	// byReason, if set instead of value, is the family's value for each
	// stall reason, exported with the label reason.
	byReason func(s scrape, reason int) float64
}

// families are the embedded store's metrics (docs/operations.md, "The
// embedded store").
var families = []family{
	{Name: "sluice_store_l0_sublevels", Type: prometheus.GaugeValue,
		Help:  fmt.Sprintf("Sublevels of level 0 of the embedded store: compacted from %d, commits held at %d.", l0CompactionThreshold/2, l0StopWritesThreshold),
		value: func(s scrape) float64 { return float64(s.Levels[0].Sublevels) }},
	{Name: "sluice_store_l0_tables", Type: prometheus.GaugeValue,
		Help:  "Tables in level 0 of the embedded store.",
		value: func(s scrape) float64 { return float64(s.Levels[0].TablesCount) }},
	{Name: "sluice_store_compaction_debt_bytes", Type: prometheus.GaugeValue,
		Help:  "Bytes the embedded store estimates it must compact to bring its levels within their targets.",
		value: func(s scrape) float64 { return float64(s.Compact.EstimatedDebt) }},
	{Name: "sluice_store_flushes_total", Type: prometheus.CounterValue,
		Help:  "Memtable flushes of the embedded store.",
		value: func(s scrape) float64 { return float64(s.Flush.Count) }},
	{Name: "sluice_store_compactions_total", Type: prometheus.CounterValue,
		Help:  "Compactions of the embedded store.",
		value: func(s scrape) float64 { return float64(s.Compact.Count) }},
	{Name: "sluice_store_memtable_bytes", Type: prometheus.GaugeValue,
		Help:  "Bytes of the embedded store's memtables: the one written and any waiting for their flush.",
		value: func(s scrape) float64 { return float64(s.MemTable.Size) }},
	{Name: "sluice_store_disk_bytes", Type: prometheus.GaugeValue,
		Help:  "Bytes the embedded store's files take on disk.",
		value: func(s scrape) float64 { return float64(s.DiskSpaceUsage()) }},
	{Name: "sluice_store_block_cache_hits_total", Type: prometheus.CounterValue,
		Help:  "Block look-ups of the embedded store served by its block cache.",
		value: func(s scrape) float64 { return float64(s.BlockCache.Hits) }},
	{Name: "sluice_store_block_cache_misses_total", Type: prometheus.CounterValue,
		Help:  "Block look-ups of the embedded store that missed its block cache and read the block from its file.",
		value: func(s scrape) float64 { return float64(s.BlockCache.Misses) }},
	{Name: "sluice_store_write_stalls_total", Type: prometheus.CounterValue,
		Help:     "Times the embedded store held commits because flushes or compactions were behind, by reason: memtables (all full, the oldest not flushed yet), l0 (level 0 at its bound), other.",
		byReason: func(s scrape, r int) float64 { return float64(s.stalls[r]) }},
	{Name: "sluice_store_write_stall_seconds_total", Type: prometheus.CounterValue,
		Help:     "Time the embedded store held commits because flushes or compactions were behind, by reason (as sluice_store_write_stalls_total).",
		byReason: func(s scrape, r int) float64 { return s.stalled[r].Seconds() }},
}

// collector exports families, reading Pebble's metrics once a scrape.
type collector struct {
	db     *pebble.DB
	stalls *stalls
	descs  []*prometheus.Desc
}

func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range c.descs {
		ch <- d
	}
}

func (c *collector) Collect(ch chan<- prometheus.Metric) {
	sc := scrape{Metrics: c.db.Metrics()}
	sc.stalls, sc.stalled = c.stalls.read()
	for i, f := range families {
		if f.byReason == nil {
			ch <- prometheus.MustNewConstMetric(c.descs[i], f.Type, f.value(sc))
			continue
		}
		for r, label := range stallReasonLabels {
			ch <- prometheus.MustNewConstMetric(c.descs[i], f.Type, f.byReason(sc, r), label)
		}
	}
}

// Register adds the embedded store's metrics to reg: the shape of its LSM
// tree (level 0's sublevels and tables, the compaction debt), its flushes,
// compactions and write stalls, its memtables, its block cache and its
// size on disk.
func (s *Store) Register(reg prometheus.Registerer) error {
	c := &collector{db: s.db, stalls: s.stalls}
	for _, f := range families {
		var labels []string
		if f.byReason != nil {
			labels = []string{"reason"}
		}
		c.descs = append(c.descs, prometheus.NewDesc(f.Name, f.Help, labels, nil))
	}
	if err := reg.Register(c); err != nil {
		return fmt.Errorf("register the embedded store's metrics: %w", err)
	}
	return nil
}
