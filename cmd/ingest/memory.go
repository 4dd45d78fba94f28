package main

import (
	"log/slog"
	"runtime/debug"
	"strconv"

	"github.com/sluicehq/sluice/internal/config"
	"github.com/sluicehq/sluice/internal/membudget"
)

// applyMemoryBudget sets the Go heap's soft limit to its share of
// memory.budget_bytes, unless GOMEMLIMIT is set in the environment (getenv),
// and the collector's percentage to memory.gc_percent, unless GOGC is; logs
// the division (with the C allocator's arenas, which membudget caps when
// the program starts), and warns when explicit settings plan more state
// than the budget has room for. It returns what restores the previous
// settings.
func applyMemoryBudget(cfg config.Config, logger *slog.Logger, getenv func(string) string) (restore func()) {
	p := cfg.Plan()
	restore = func() {}
	limit := "memory.budget_bytes"
	if getenv("GOMEMLIMIT") == "" {
		prev := debug.SetMemoryLimit(p.GoLimit)
		restore = func() { debug.SetMemoryLimit(prev) }
	} else {
		limit = "GOMEMLIMIT"
	}
	arenas := "default"
	if n := membudget.MallocArenas(); n > 0 {
		arenas = strconv.Itoa(n)
	} else if env := getenv("MALLOC_ARENA_MAX"); env != "" {
		arenas = env + " (MALLOC_ARENA_MAX)"
	}
	gcPercent, gcFrom := strconv.Itoa(cfg.Memory.GCPercent), "memory.gc_percent"
	if env := getenv("GOGC"); env == "" {
		prev := debug.SetGCPercent(cfg.Memory.GCPercent)
		restoreLimit := restore
		restore = func() { debug.SetGCPercent(prev); restoreLimit() }
	} else {
		gcPercent, gcFrom = env, "GOGC"
	}
	logger.Info("memory budget", "budget_mib", p.Budget>>20, "go_heap_limit_mib", debug.SetMemoryLimit(-1)>>20, "go_heap_limit_from", limit,
		"gc_percent", gcPercent, "gc_percent_from", gcFrom, "malloc_arenas", arenas,
		"max_series_days", cfg.Buckets.MaxSeriesDays, "max_settled_series_days", cfg.Buckets.MaxSettled, "max_pending", cfg.Rollups.MaxPending,
		"store_cache_mib", cfg.Store.Pebble.CacheBytes>>20, "store_memtable_mib", p.StoreMemTable>>20)
	if msg, over := p.Over(cfg.Buckets.MaxSeriesDays, cfg.Rollups.MaxPending, cfg.Buckets.MaxSettled, cfg.Store.Pebble.CacheBytes); over {
		logger.Warn(msg + "; peak memory may exceed the budget: raise memory.budget_bytes or set them to 0")
	}
	return restore
}
