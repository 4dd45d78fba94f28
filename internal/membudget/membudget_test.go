package membudget

import (
	"os"
	"testing"
)

func TestForDividesTheBudget(t *testing.T) {
	for _, tc := range []struct {
		budget                   int64
		wantSeriesDays, wantPend int
		wantStoreMemTable        int64
		wantRollupMemTable       int64
		wantStoreCache           int64
	}{
		{Min, 45_056, 10_000, 32 << 20, 16 << 20, 16 << 20},
		{384 << 20, 73_728, 15_728, 48 << 20, 16 << 20, 56 << 20},
		{Default, 102_400, 21_845, 64 << 20, 16 << 20, 96 << 20},
		{4 << 30, 1_544_192, 329_427, 64 << 20, 64 << 20, 768 << 20},
		{Max, 436_047_872, 93_023_546, 64 << 20, 64 << 20, 3 << 36},
	} {
		p := For(tc.budget, All)
		if p.SeriesDays != tc.wantSeriesDays || p.MaxPending != tc.wantPend || p.StoreMemTable != tc.wantStoreMemTable || p.RollupMemTable != tc.wantRollupMemTable || p.StoreCache != tc.wantStoreCache {
			t.Errorf("For(%d MiB): series-days %d, pending %d, memtables %d and %d MiB, cache %d MiB; want %d, %d, %d and %d MiB, %d MiB",
				tc.budget>>20, p.SeriesDays, p.MaxPending, p.StoreMemTable>>20, p.RollupMemTable>>20, p.StoreCache>>20,
				tc.wantSeriesDays, tc.wantPend, tc.wantStoreMemTable>>20, tc.wantRollupMemTable>>20, tc.wantStoreCache>>20)
		}
		// The parts never add up to more than the budget: the stores'
		// most, the runtime's allowance and the Go heap limit.
		if sum := addUp(p); sum != p.Budget {
			t.Errorf("For(%d MiB): off-heap %d + runtime %d + Go heap %d = %d, want the budget", tc.budget>>20, p.OffHeap(), int64(runtimeBytes), p.GoLimit, sum)
		}
		// The fleet's state leaves room in the heap for requests and the
		// collector.
		if st := State(p.SeriesDays, p.MaxPending, p.Settled); st > p.GoLimit/2 {
			t.Errorf("For(%d MiB): fleet state %d MiB is over half the Go heap limit %d MiB", tc.budget>>20, st>>20, p.GoLimit>>20)
		}
		if p.GoLimit < 32<<20 {
			t.Errorf("For(%d MiB): Go heap limit %d MiB", tc.budget>>20, p.GoLimit>>20)
		}
	}
}

// A database the configuration does not open leaves its share to the Go
// heap.
func TestForCountsWhatIsOpened(t *testing.T) {
	all := For(Default, All)
	for _, o := range []Opens{{RawStore: true, Rollups: true}, {RawStore: true}, {Rollups: true, RollupStore: true}, {}} {
		p := For(Default, o)
		if p.OffHeap() >= all.OffHeap() || p.GoLimit < all.GoLimit || p.SeriesDays <= all.SeriesDays {
			t.Errorf("%+v: off-heap %d MiB, Go heap %d MiB, %d series-days; with every database %d, %d, %d",
				o, p.OffHeap()>>20, p.GoLimit>>20, p.SeriesDays, all.OffHeap()>>20, all.GoLimit>>20, all.SeriesDays)
		}
		if sum := addUp(p); sum != p.Budget {
			t.Errorf("%+v: parts add up to %d, want the budget %d", o, sum, p.Budget)
		}
	}
}

// The rollups' marks have memtables of their own only beside a raw store
// that is not embedded: on the embedded store they are kept in its
// database.
func TestMarksShareOnlyWithoutEmbeddedStore(t *testing.T) {
	outbox := int64(otherMemTables*outboxMemTable + smallCacheBytes)
	rollupStore := func(p Plan) int64 { return otherMemTables*p.RollupMemTable + p.SmallCache }
	emb := For(Default, All)
	raw := int64(emb.StoreMemTables)*emb.StoreMemTable + emb.StoreCache
	if got := emb.OffHeap() - raw - rollupStore(emb); got != outbox {
		t.Errorf("embedded store: rollups hold %d MiB off the heap, want the outbox's %d", got>>20, outbox>>20)
	}
	cas := For(Default, Opens{Rollups: true, RollupStore: true})
	marks := otherMemTables*cas.MarksMemTable + cas.SmallCache
	if got := cas.OffHeap() - rollupStore(cas); got != outbox+marks {
		t.Errorf("Cassandra: rollups hold %d MiB off the heap, want the outbox's and the marks' %d", got>>20, (outbox+marks)>>20)
	}
}

// addUp is what p plans to hold: the Go heap limit, the runtime's
// allowance and, when Pebble allocates outside the Go heap (cgo), its terms.
func addUp(p Plan) int64 {
	if pebbleOffHeap {
		return p.OffHeap() + runtimeBytes + p.GoLimit
	}
	return runtimeBytes + p.GoLimit
}

func TestOver(t *testing.T) {
	p := For(Default, All)
	if msg, over := p.Over(p.SeriesDays, p.MaxPending, p.Settled, p.StoreCache); over {
		t.Errorf("the plan's own settings are over it: %s", msg)
	}
	if _, over := p.Over(p.SeriesDays/2, p.MaxPending, p.Settled, 1<<20); over {
		t.Error("smaller settings reported over the plan")
	}
	msg, over := p.Over(1_000_000, p.MaxPending, p.Settled, p.StoreCache)
	if !over || msg == "" {
		t.Fatal("a million series-days in 512 MiB not reported")
	}
	t.Log(msg)
}

// With cgo on Linux (Pebble's memory from the C allocator) the
// allocator's arenas are capped at two when the program starts, unless
// MALLOC_ARENA_MAX says otherwise or the C library has no such setting;
// without cgo there is nothing to cap.
func TestMallocArenas(t *testing.T) {
	want := 0
	if pebbleOffHeap && arenaCapKnown() && os.Getenv("MALLOC_ARENA_MAX") == "" {
		want = 2
	}
	if got := MallocArenas(); got != want {
		t.Errorf("MallocArenas() = %d, want %d (cgo %t, MALLOC_ARENA_MAX %q)", got, want, pebbleOffHeap, os.Getenv("MALLOC_ARENA_MAX"))
	}
}
