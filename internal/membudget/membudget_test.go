package membudget

import "testing"

func TestForDividesTheBudget(t *testing.T) {
	for _, tc := range []struct {
		budget                   int64
		wantSeriesDays, wantPend int
		wantStoreMemTable        int64
	}{
		{Min, 37_865, 34_078, 8 << 20},
		{Default, 99_032, 89_128, 16 << 20},
		{4 << 30, 1_130_131, 1_017_118, 64 << 20},
	} {
		p := For(tc.budget)
		if p.SeriesDays != tc.wantSeriesDays || p.MaxPending != tc.wantPend || p.StoreMemTable != tc.wantStoreMemTable {
			t.Errorf("For(%d MiB): series-days %d, pending %d, memtable %d MiB; want %d, %d, %d MiB",
				tc.budget>>20, p.SeriesDays, p.MaxPending, p.StoreMemTable>>20, tc.wantSeriesDays, tc.wantPend, tc.wantStoreMemTable>>20)
		}
		// The parts never add up to more than the budget: the stores'
		// most, the runtime's allowance and the Go heap limit.
		if sum := p.OffHeap() + runtimeBytes + p.GoLimit; sum != p.Budget {
			t.Errorf("For(%d MiB): off-heap %d + runtime %d + Go heap %d = %d, want the budget", tc.budget>>20, p.OffHeap(), int64(runtimeBytes), p.GoLimit, sum)
		}
		// The fleet's state leaves room in the heap for requests and the
		// collector.
		if st := State(p.SeriesDays, p.MaxPending); st > p.GoLimit/2 {
			t.Errorf("For(%d MiB): fleet state %d MiB is over half the Go heap limit %d MiB", tc.budget>>20, st>>20, p.GoLimit>>20)
		}
		if p.GoLimit < 32<<20 {
			t.Errorf("For(%d MiB): Go heap limit %d MiB", tc.budget>>20, p.GoLimit>>20)
		}
	}
}

func TestOver(t *testing.T) {
	p := For(Default)
	if msg, over := p.Over(p.SeriesDays, p.MaxPending, p.StoreCache); over {
		t.Errorf("the plan's own settings are over it: %s", msg)
	}
	if _, over := p.Over(p.SeriesDays/2, p.MaxPending, 1<<20); over {
		t.Error("smaller settings reported over the plan")
	}
	msg, over := p.Over(1_000_000, p.MaxPending, p.StoreCache)
	if !over || msg == "" {
		t.Fatal("a million series-days in 512 MiB not reported")
	}
	t.Log(msg)
}
