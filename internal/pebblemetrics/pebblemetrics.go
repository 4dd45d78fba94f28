// Package pebblemetrics exports the health of a Pebble database as
// Prometheus metrics: the shape of its LSM tree (level 0's sublevels and
// tables, the compaction debt), its flushes, compactions and write stalls
// (by reason), its memtables, its block cache and its size on disk. The
// embedded store (sluice_store_*) and the embedded rollup store
// (sluice_rollup_store_*) each export one set.
package pebblemetrics

import (
	"fmt"

	"github.com/cockroachdb/pebble/v2"
	"github.com/prometheus/client_golang/prometheus"
)

// DB is one database whose metrics are exported.
type DB struct {
	// Prefix starts every metric's name (sluice_store).
	Prefix string
	// What names the database in the metrics' help (the embedded store).
	What string
	// L0CompactionThreshold and L0StopWritesThreshold are the database's
	// pebble.Options of those names, for the help.
	L0CompactionThreshold, L0StopWritesThreshold int
	// Stalls counts the database's write stalls: its Listener must be
	// the database's event listener.
	Stalls *Stalls
}

// scrape is what one scrape reads: Pebble's metrics and the write stalls.
type scrape struct {
	*pebble.Metrics
	stalls  [stallReasons]uint64
	stalled [stallReasons]float64 // seconds
}

// family is one metric family.
type family struct {
	suffix, help string
	typ          prometheus.ValueType
	value        func(scrape) float64
	// byReason, if set instead of value, is the family's value for each
	// stall reason, exported with the label reason.
	byReason func(s scrape, reason int) float64
}

// families are a database's metrics (docs/operations.md, "The embedded
// store").
func families(d DB) []family {
	return []family{
		{suffix: "_l0_sublevels", typ: prometheus.GaugeValue,
			// Pebble scores level 0 at twice its sublevels over the
			// threshold and compacts from a score of 1.
			help:  fmt.Sprintf("Sublevels of level 0 of the %s: compacted from %d, commits held at %d.", d.What, d.L0CompactionThreshold/2, d.L0StopWritesThreshold),
			value: func(s scrape) float64 { return float64(s.Levels[0].Sublevels) }},
		{suffix: "_l0_tables", typ: prometheus.GaugeValue,
			help:  "Tables in level 0 of the " + d.What + ".",
			value: func(s scrape) float64 { return float64(s.Levels[0].TablesCount) }},
		{suffix: "_compaction_debt_bytes", typ: prometheus.GaugeValue,
			help:  "Bytes the " + d.What + " estimates it must compact to bring its levels within their targets.",
			value: func(s scrape) float64 { return float64(s.Compact.EstimatedDebt) }},
		{suffix: "_flushes_total", typ: prometheus.CounterValue,
			help:  "Memtable flushes of the " + d.What + ".",
			value: func(s scrape) float64 { return float64(s.Flush.Count) }},
		{suffix: "_compactions_total", typ: prometheus.CounterValue,
			help:  "Compactions of the " + d.What + ".",
			value: func(s scrape) float64 { return float64(s.Compact.Count) }},
		{suffix: "_memtable_bytes", typ: prometheus.GaugeValue,
			help:  "Bytes of the " + d.What + "'s memtables: the one written and any waiting for their flush.",
			value: func(s scrape) float64 { return float64(s.MemTable.Size) }},
		{suffix: "_disk_bytes", typ: prometheus.GaugeValue,
			help:  "Bytes the " + d.What + "'s files take on disk.",
			value: func(s scrape) float64 { return float64(s.DiskSpaceUsage()) }},
		{suffix: "_block_cache_hits_total", typ: prometheus.CounterValue,
			help:  "Block look-ups of the " + d.What + " served by its block cache.",
			value: func(s scrape) float64 { return float64(s.BlockCache.Hits) }},
		{suffix: "_block_cache_misses_total", typ: prometheus.CounterValue,
			help:  "Block look-ups of the " + d.What + " that missed its block cache and read the block from its file.",
			value: func(s scrape) float64 { return float64(s.BlockCache.Misses) }},
		{suffix: "_write_stalls_total", typ: prometheus.CounterValue,
			help:     "Times the " + d.What + " held commits because flushes or compactions were behind, by reason: memtables (all full, the oldest not flushed yet), l0 (level 0 at its bound), other.",
			byReason: func(s scrape, r int) float64 { return float64(s.stalls[r]) }},
		{suffix: "_write_stall_seconds_total", typ: prometheus.CounterValue,
			help:     "Time the " + d.What + " held commits because flushes or compactions were behind, by reason (as " + d.Prefix + "_write_stalls_total).",
			byReason: func(s scrape, r int) float64 { return s.stalled[r] }},
	}
}

// collector exports a database's families, reading Pebble's metrics once a
// scrape.
type collector struct {
	db       *pebble.DB
	stalls   *Stalls
	families []family
	descs    []*prometheus.Desc
}

func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range c.descs {
		ch <- d
	}
}

func (c *collector) Collect(ch chan<- prometheus.Metric) {
	sc := scrape{Metrics: c.db.Metrics()}
	if c.stalls != nil {
		count, stalled := c.stalls.read()
		sc.stalls = count
		for r, d := range stalled {
			sc.stalled[r] = d.Seconds()
		}
	}
	for i, f := range c.families {
		if f.byReason == nil {
			ch <- prometheus.MustNewConstMetric(c.descs[i], f.typ, f.value(sc))
			continue
		}
		for r, label := range stallReasonLabels {
			ch <- prometheus.MustNewConstMetric(c.descs[i], f.typ, f.byReason(sc, r), label)
		}
	}
}

// Register adds db's metrics, described by d, to reg.
func Register(reg prometheus.Registerer, db *pebble.DB, d DB) error {
	c := &collector{db: db, stalls: d.Stalls, families: families(d)}
	for _, f := range c.families {
		var labels []string
		if f.byReason != nil {
			labels = []string{"reason"}
		}
		c.descs = append(c.descs, prometheus.NewDesc(d.Prefix+f.suffix, f.help, labels, nil))
	}
	if err := reg.Register(c); err != nil {
		return fmt.Errorf("register the %s's metrics: %w", d.What, err)
	}
	return nil
}
