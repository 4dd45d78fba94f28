package pebblestore

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice/internal/pebblemetrics"
)

// Register adds the embedded store's metrics (package pebblemetrics,
// named sluice_store_*) to reg: the shape of its LSM tree, its flushes,
// compactions and write stalls, its memtables, its block cache and its
// size on disk.
func (s *Store) Register(reg prometheus.Registerer) error {
	return pebblemetrics.Register(reg, s.db, pebblemetrics.DB{Prefix: "sluice_store", What: "embedded store",
		L0CompactionThreshold: l0CompactionThreshold, L0StopWritesThreshold: l0StopWritesThreshold, Stalls: s.stalls})
}
