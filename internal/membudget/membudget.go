// Package membudget divides the gateway's memory budget (memory.budget_bytes)
// among what it holds: the embedded Pebble databases' memtables and block
// caches (allocated outside the Go heap), the Go heap's soft limit, and
// within that heap the two kinds of state that grow with the number of
// distinct devices a day: the bucket planner's series-days
// (buckets.max_series_days) and the device-minutes waiting for their
// rollups' recompute (rollups.max_pending).
//
// The division, for a budget B (docs/operations.md, "Memory budget"):
//
//	raw store        memtables  B/32 each, up to 4 held      (4 MiB..64 MiB each)
//	                 block cache B/8                          (store.pebble.cache_bytes)
//	rollup store     memtables  B/32 each, up to 2 held      (4 MiB..64 MiB each)
//	rollup marks     memtables  B/64 each, up to 2 held      (2 MiB..16 MiB each)
//	outbox           memtables  4 MiB each, up to 2 held
//	small caches     8 MiB each (Pebble's default) for the rollup store, marks and outbox
//	runtime          32 MiB (stacks, the collector's own structures, code)
//	Go heap limit    what is left (runtime/debug.SetMemoryLimit)
//	  series-days    a sixth of the Go heap limit, 480 B each
//	  pending        an eighth of it, 2 × 200 B per rollups.max_pending
//
// The rest of the Go heap limit is for requests in flight (bounded by their
// own settings), a recompute's rows and the collector's headroom. The off-heap
// terms are upper bounds (every memtable full and queued for a flush); the
// heap terms are measured costs at a million devices a day.
package membudget

import "fmt"

// Default is the default budget: 512 MiB.
const Default = 512 << 20

// Min is the smallest budget accepted: below it the fixed terms (the
// smallest memtables, the runtime) leave no room for the fleet's state.
const Min = 256 << 20

// Max is the largest budget accepted: 1 TiB.
const Max = 1 << 40

const (
	// SeriesDayBytes is what the bucket planner holds per series-day,
	// measured at a million devices a day (Series, Partition, map entry).
	SeriesDayBytes = 480
	// PendingBytes is what one pending device-minute holds when it is its
	// own device's only one (the device, its map entry, list links, the
	// minute). rollups.max_pending counts minutes; up to twice as many are
	// held before the write pipeline waits.
	PendingBytes = 200

	runtimeBytes     = 32 << 20
	smallCacheBytes  = 8 << 20 // Pebble's default block cache
	outboxMemTable   = 4 << 20
	storeMemTables   = 4 // Pebble MemTableStopWritesThreshold of the raw store
	otherMemTables   = 2 // Pebble's default threshold, the other databases
	seriesDayShare   = 6 // a sixth of the Go heap limit
	pendingShare     = 8 // an eighth
	minSeriesDays    = 10_000
	minPendingMinute = 10_000
)

// Plan is a budget divided.
type Plan struct {
	Budget int64

	StoreMemTable  int64 // raw store: bytes per memtable
	StoreCache     int64 // raw store: block cache (store.pebble.cache_bytes)
	RollupMemTable int64 // embedded rollup store: bytes per memtable
	MarksMemTable  int64 // rollup marks: bytes per memtable
	SmallCache     int64 // block cache of the rollup store, the marks and the outbox
	OutboxMemTable int64

	// GoLimit is the Go heap's soft limit (GOMEMLIMIT, unless that is set in
	// the environment).
	GoLimit int64
	// SeriesDays is buckets.max_series_days, unless set.
	SeriesDays int
	// MaxPending is rollups.max_pending, unless set.
	MaxPending int
}

// For divides budget, which must be within [Min, Max].
func For(budget int64) Plan {
	budget = min(max(budget, Min), Max)
	p := Plan{
		Budget:         budget,
		StoreMemTable:  clamp(budget/32, 4<<20, 64<<20),
		StoreCache:     budget / 8,
		RollupMemTable: clamp(budget/32, 4<<20, 64<<20),
		MarksMemTable:  clamp(budget/64, 2<<20, 16<<20),
		SmallCache:     smallCacheBytes,
		OutboxMemTable: outboxMemTable,
	}
	p.GoLimit = budget - p.OffHeap() - runtimeBytes
	p.SeriesDays = int(max(p.GoLimit/seriesDayShare/SeriesDayBytes, minSeriesDays))
	p.MaxPending = int(max(p.GoLimit/pendingShare/(2*PendingBytes), minPendingMinute))
	return p
}

// OffHeap is the most the Pebble databases hold outside the Go heap: every
// memtable they may keep before they stop writes, and their block caches.
func (p Plan) OffHeap() int64 {
	return storeMemTables*p.StoreMemTable + p.StoreCache +
		otherMemTables*(p.RollupMemTable+p.MarksMemTable+p.OutboxMemTable) + 3*p.SmallCache
}

// State is what seriesDays and maxPending make the Go heap hold at most.
func State(seriesDays, maxPending int) int64 {
	return int64(seriesDays)*SeriesDayBytes + int64(maxPending)*2*PendingBytes
}

// Over reports, for settings given explicitly, whether the fleet's state
// they allow (and a store cache of storeCache bytes) takes more of the
// budget than the plan gives those terms, and says by how much.
func (p Plan) Over(seriesDays, maxPending int, storeCache int64) (string, bool) {
	planned := State(p.SeriesDays, p.MaxPending) + p.StoreCache
	got := State(seriesDays, maxPending) + storeCache
	if got <= planned {
		return "", false
	}
	return fmt.Sprintf("buckets.max_series_days %d, rollups.max_pending %d and store.pebble.cache_bytes %d may hold %d MiB, where memory.budget_bytes %d plans %d MiB for them",
		seriesDays, maxPending, storeCache, got>>20, p.Budget, planned>>20), true
}

func clamp(v, lo, hi int64) int64 { return min(max(v, lo), hi) }
