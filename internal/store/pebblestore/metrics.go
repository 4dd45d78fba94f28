package pebblestore

import (
	"fmt"
	"sync"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/prometheus/client_golang/prometheus"
)

// snapshotAge is how long one reading of Pebble's metrics serves a scrape:
// the families below read it once per scrape, not once each.
const snapshotAge = time.Second

// lsm reads Pebble's metrics for the families Register adds.
type lsm struct {
	db *pebble.DB
	mu sync.Mutex
	at time.Time
	m  *pebble.Metrics
}

func (l *lsm) metrics() *pebble.Metrics {
	l.mu.Lock()
	defer l.mu.Unlock()
	if now := time.Now(); l.m == nil || now.Sub(l.at) > snapshotAge {
		l.m, l.at = l.db.Metrics(), now
	}
	return l.m
}

// Register adds the embedded store's metrics to reg: the shape of its LSM
// tree (level 0's sublevels and tables, the compaction debt), its flushes,
// compactions and write stalls, its block cache and its size on disk
// (docs/operations.md, "The embedded store").
func (s *Store) Register(reg prometheus.Registerer) error {
	l := &lsm{db: s.db}
	m := l.metrics
	cs := []prometheus.Collector{
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "sluice_store_l0_sublevels",
			Help: "Sublevels of level 0 of the embedded store: compacted from 4, writes wait at 32."},
			func() float64 { return float64(m().Levels[0].Sublevels) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "sluice_store_l0_tables",
			Help: "Tables in level 0 of the embedded store."},
			func() float64 { return float64(m().Levels[0].TablesCount) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "sluice_store_compaction_debt_bytes",
			Help: "Bytes the embedded store estimates it must compact to bring its levels within their targets."},
			func() float64 { return float64(m().Compact.EstimatedDebt) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "sluice_store_flushes_total",
			Help: "Memtable flushes of the embedded store."},
			func() float64 { return float64(m().Flush.Count) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "sluice_store_compactions_total",
			Help: "Compactions of the embedded store."},
			func() float64 { return float64(m().Compact.Count) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "sluice_store_memtable_bytes",
			Help: "Bytes of the embedded store's memtables, the one written and those waiting for their flush."},
			func() float64 { return float64(m().MemTable.Size) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "sluice_store_disk_bytes",
			Help: "Bytes the embedded store's files take on disk."},
			func() float64 { return float64(m().DiskSpaceUsage()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "sluice_store_block_cache_hits_total",
			Help: "Reads of the embedded store served by its block cache."},
			func() float64 { return float64(m().BlockCache.Hits) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "sluice_store_block_cache_misses_total",
			Help: "Reads of the embedded store that missed its block cache."},
			func() float64 { return float64(m().BlockCache.Misses) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "sluice_store_write_stalls_total",
			Help: "Times the embedded store held commits because flushes or compactions were behind."},
			func() float64 { n, _ := s.stalls.read(time.Now()); return float64(n) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "sluice_store_write_stall_seconds_total",
			Help: "Time the embedded store held commits because flushes or compactions were behind."},
			func() float64 { _, d := s.stalls.read(time.Now()); return d.Seconds() }),
	}
	for _, c := range cs {
		if err := reg.Register(c); err != nil {
			return fmt.Errorf("register the embedded store's metrics: %w", err)
		}
	}
	return nil
}
