// Package membudget divides the gateway's memory budget (memory.budget_bytes)
// among what it holds: the embedded Pebble databases' memtables and block
// caches (allocated outside the Go heap), the Go heap's soft limit, and
// within that heap the two kinds of state that grow with the number of
// distinct devices a day: the bucket planner's series-days
// (buckets.max_series_days) and the device-minutes waiting for their
// rollups' recompute (rollups.max_pending).
//
// The division, for a budget B, of what the configuration opens
// (docs/operations.md, "Memory budget"):
//
//	raw store (pebble)      memtables B/8, 2 held            (4–64 MiB each)
//	                        block cache 3B/16                (store.pebble.cache_bytes;
//	                        below 512 MiB it shrinks to B/16 at 256 MiB)
//	rollup store (embedded) memtables B/32, 2 held           (16–64 MiB each)
//	rollups                 marks' memtables B/64, 2 held    (2–16 MiB each;
//	                        none with the raw store, whose database
//	                        keeps the marks)
//	                        outbox memtables 4 MiB, 2 held
//	                        block caches of 8 MiB (Pebble's default) for the
//	                        outbox, the rollup store and the marks (when
//	                        they have a database of their own)
//	runtime                 32 MiB (code, thread stacks, allocator slack)
//	Go heap limit           what is left (runtime/debug.SetMemoryLimit); in a
//	                        build without cgo Pebble allocates in the Go heap,
//	                        and the limit includes its terms
//	  series-days           a 4th of the Go heap limit, 512 B each
//	  pending minutes       a 24th of it, 2 × 200 B per rollups.max_pending
//
// The rest of the Go heap limit is for requests in flight (bounded by their
// own settings), a recompute's rows and the collector's headroom: the
// smaller the live heap against the limit, the less often the collector
// runs. The off-heap terms are upper bounds (every memtable full); the heap
// terms are costs measured at a million devices a day.
package membudget

import "fmt"

// Default is the default budget: 512 MiB.
const Default = 512 << 20

// Min is the smallest budget accepted: below it the fixed terms (the
// smallest memtables, the runtime) leave too little for the Go heap.
const Min = 256 << 20

// Max is the largest budget accepted: 1 TiB.
const Max = 1 << 40

const (
	// SeriesDayBytes is what the bucket planner holds per series-day,
	// measured at a million devices a day (Series, Partition, map entry):
	// 480 B, and 32 B more since a series-day's state keeps what its
	// last round claimed as new minutes (sink.WithNewMinutes). The
	// planner's index by hash (16 B more in Series, a map slot 40 B
	// smaller) left it no larger.
	SeriesDayBytes = 512
	// PendingBytes is what one pending device-minute holds when it is its
	// own device's only one (the device, its map entry, list links, the
	// minute). rollups.max_pending counts minutes; up to twice as many are
	// held before the write pipeline waits.
	PendingBytes = 200
	// SettledBytes is what the planner holds at most per series-day it
	// forgot and remembers compactly (buckets.max_settled_series_days):
	// a 32-byte slot of a table at most 70% full, sized for the bound
	// (46 B; a Go map took 52–84 B a record), and a byte of each of two
	// days' spill filters.
	SettledBytes = 48

	runtimeBytes     = 32 << 20
	smallCacheBytes  = 8 << 20 // Pebble's default block cache
	outboxMemTable   = 4 << 20 // Pebble's default memtable
	storeMemTables   = 2       // the raw store's MemTableStopWritesThreshold
	otherMemTables   = 2       // Pebble's default threshold, the other databases
	seriesDayShare   = 4       // a 4th of the Go heap limit
	pendingShare     = 24      // a 24th
	settledShare     = 5       // a 5th
	minSeriesDays    = 10_000
	minPendingMinute = 10_000
	maxSeriesDays    = 1 << 30
	maxPendingMinute = 100_000_000 // rollups.max_pending's largest
)

// Opens says which Pebble databases the configuration opens.
type Opens struct {
	RawStore    bool // store.backend pebble
	Rollups     bool // rollups.enabled: the outbox, and the marks (in the raw store with RawStore)
	RollupStore bool // rollups without ClickHouse: the embedded rollup store
}

// All is every database: the embedded defaults.
var All = Opens{RawStore: true, Rollups: true, RollupStore: true}

// Plan is a budget divided.
type Plan struct {
	Budget int64
	Opens  Opens

	StoreMemTable  int64 // raw store: bytes per memtable
	StoreMemTables int   // raw store: memtables held before writes wait
	StoreCache     int64 // raw store: block cache (store.pebble.cache_bytes)
	RollupMemTable int64 // embedded rollup store: bytes per memtable
	MarksMemTable  int64 // rollup marks, in a database of their own (not with RawStore): bytes per memtable
	OutboxMemTable int64 // rollup outbox: bytes per memtable
	SmallCache     int64 // block cache of the marks, the outbox and the rollup store, each

	// GoLimit is the Go heap's soft limit (GOMEMLIMIT, unless that is set in
	// the environment): what is left of the budget, and Pebble's terms too
	// in a build without cgo, where Pebble allocates from the Go heap.
	GoLimit int64
	// SeriesDays is buckets.max_series_days, unless set.
	SeriesDays int
	// MaxPending is rollups.max_pending, unless set.
	MaxPending int
	// Settled is buckets.max_settled_series_days, unless set: none
	// without the embedded store.
	Settled int
}

// For divides budget, clamped to [Min, Max], among what o opens.
func For(budget int64, o Opens) Plan {
	budget = min(max(budget, Min), Max)
	// The raw store's memtables are the larger share: every flush of its
	// device-ordered keys overlaps the whole of the level below, which each
	// compaction then rewrites, while the rollup store's keys, ordered by
	// the hour first, flush into tables that barely overlap: it has a 32nd,
	// and the Go heap (the planner's share of it) what a larger one would
	// take. Below 16 MiB its flushes cost more than the heap gains.
	p := Plan{
		Budget: budget, Opens: o,
		StoreMemTable:  clamp(budget/8, 4<<20, 64<<20),
		StoreMemTables: storeMemTables,
		StoreCache:     storeCache(budget),
		RollupMemTable: clamp(budget/32, 16<<20, 64<<20),
		MarksMemTable:  clamp(budget/64, 2<<20, 16<<20),
		OutboxMemTable: outboxMemTable,
		SmallCache:     smallCacheBytes,
	}
	// What the Go heap may hold beside Pebble's memory, which is outside it
	// when Pebble allocates with cgo and inside it otherwise (a build with
	// CGO_ENABLED=0, as the container image is).
	heap := budget - p.OffHeap() - runtimeBytes
	p.GoLimit = heap
	if !pebbleOffHeap {
		p.GoLimit = budget - runtimeBytes
	}
	p.SeriesDays = int(clamp(heap/seriesDayShare/SeriesDayBytes, minSeriesDays, maxSeriesDays))
	p.MaxPending = int(clamp(heap/pendingShare/(2*PendingBytes), minPendingMinute, maxPendingMinute))
	if o.RawStore {
		// Only a planner that is its store's one writer remembers.
		p.Settled = int(clamp(heap/settledShare/SettledBytes, minSeriesDays, maxSeriesDays))
	}
	return p
}

// OffHeap is the most the Pebble databases the plan opens hold outside the
// Go heap: every memtable they may keep before they stop writes, and their
// block caches.
func (p Plan) OffHeap() int64 {
	var n int64
	if p.Opens.RawStore {
		n += int64(p.StoreMemTables)*p.StoreMemTable + p.StoreCache
	}
	if p.Opens.Rollups {
		n += otherMemTables*p.OutboxMemTable + p.SmallCache
		if !p.Opens.RawStore {
			// The marks' database of their own: on the embedded store they
			// are kept in its database, in its memtables.
			n += otherMemTables*p.MarksMemTable + p.SmallCache
		}
	}
	if p.Opens.RollupStore {
		n += otherMemTables*p.RollupMemTable + p.SmallCache
	}
	return n
}

// State is what seriesDays, maxPending and settled make the Go heap hold
// at most.
func State(seriesDays, maxPending, settled int) int64 {
	return int64(seriesDays)*SeriesDayBytes + int64(maxPending)*2*PendingBytes + int64(max(settled, 0))*SettledBytes
}

// Over reports, for settings given explicitly, whether the fleet's state
// they allow (and a raw store cache of storeCache bytes, if the plan opens
// the raw store) takes more of the budget than the plan gives those terms,
// and says by how much.
func (p Plan) Over(seriesDays, maxPending, settled int, storeCache int64) (string, bool) {
	planCache, gotCache := p.StoreCache, storeCache
	if !p.Opens.RawStore {
		planCache, gotCache = 0, 0 // not opened: no cache on either side
	}
	planned := State(p.SeriesDays, p.MaxPending, p.Settled) + planCache
	got := State(seriesDays, maxPending, settled) + gotCache
	if got <= planned {
		return "", false
	}
	return fmt.Sprintf("buckets.max_series_days %d, rollups.max_pending %d, buckets.max_settled_series_days %d and store.pebble.cache_bytes %d may hold %d MiB, where memory.budget_bytes %d plans %d MiB for them",
		seriesDays, maxPending, settled, storeCache, got>>20, p.Budget, planned>>20), true
}

// storeCache is the raw store's block cache for a budget: 3/16 of it, and
// below 512 MiB less, down to a 16th at Min, so that a small budget's Go
// heap keeps what it had. At a million devices a day the reads that miss
// this cache (the recomputes' read-back of the minutes just written, the
// planner's catalogue reloads) are most of the gateway's CPU: 32 → 96 MiB at
// the default budget took the fleet benchmark from 102.9 to 65.4 CPU-s per
// million readings (docs/benchmarks.md, "Memory budget").
func storeCache(budget int64) int64 {
	return min(3*budget/16, budget/16+max(budget-Min, 0)/4)
}

func clamp(v, lo, hi int64) int64 { return min(max(v, lo), hi) }
