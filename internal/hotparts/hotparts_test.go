package hotparts

import (
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/model"
)

func key(series string) model.PartitionKey {
	return model.SeriesDay{Kind: model.KindReadings, Tenant: "t", Series: series, Day: 20000}.Partition(0)
}

// A steady writer's rate is measured; the hot ones come first.
func TestSteadyRates(t *testing.T) {
	tr := New(10, time.Minute)
	t0 := time.Unix(1_700_000_000, 0)
	// Ten minutes: a at 100 rows/s, b at 10, c at 1.
	for s := range 600 {
		now := t0.Add(time.Duration(s) * time.Second)
		tr.Add(now, key("a"), 100)
		tr.Add(now, key("b"), 10)
		tr.Add(now, key("c"), 1)
	}
	top := tr.Top(t0.Add(600*time.Second), nil, 10)
	want := []struct {
		series string
		rate   float64
	}{{"a", 100}, {"b", 10}, {"c", 1}}
	if len(top) != len(want) {
		t.Fatalf("Top = %+v, want 3 partitions", top)
	}
	for i, w := range want {
		if top[i].Key.Series != w.series || math.Abs(top[i].RowsPerSecond-w.rate) > 0.05*w.rate {
			t.Errorf("top[%d] = %s at %.2f rows/s, want %s at about %.0f", i, top[i].Key.Series, top[i].RowsPerSecond, w.series, w.rate)
		}
	}
	// Silence decays the rates.
	later := tr.Top(t0.Add(600*time.Second+10*time.Minute), nil, 1)
	if len(later) != 1 || later[0].RowsPerSecond > 0.01 {
		t.Errorf("ten minutes later Top = %+v, want a decayed rate", later)
	}
}

// The tracker holds at most its capacity, and keeps the heavy hitters
// among many light ones.
func TestBoundedKeepsHeavyHitters(t *testing.T) {
	tr := New(16, time.Minute)
	t0 := time.Unix(1_700_000_000, 0)
	for s := range 120 {
		now := t0.Add(time.Duration(s) * time.Second)
		for i := range 1000 {
			tr.Add(now, key(fmt.Sprint("quiet-", (s*1000+i)%5000)), 1)
		}
		tr.Add(now, key("hot-1"), 2000)
		tr.Add(now, key("hot-2"), 1000)
	}
	if n := tr.Len(); n != 16 {
		t.Errorf("tracker holds %d partitions, want its capacity 16", n)
	}
	top := tr.Top(t0.Add(120*time.Second), nil, 2)
	if len(top) != 2 || top[0].Key.Series != "hot-1" || top[1].Key.Series != "hot-2" {
		t.Errorf("Top(2) = %+v, want hot-1 then hot-2", top)
	}
}

// Rescaling the origin (hours of operation) keeps rates and order.
func TestRescale(t *testing.T) {
	tr := New(4, time.Second)
	t0 := time.Unix(1_700_000_000, 0)
	for s := range 200 { // 200 time constants: several rescales
		now := t0.Add(time.Duration(s) * time.Second)
		tr.Add(now, key("a"), 10)
		tr.Add(now, key("b"), 5)
	}
	top := tr.Top(t0.Add(199*time.Second), nil, 4)
	if len(top) != 2 || top[0].Key.Series != "a" || math.IsInf(top[0].RowsPerSecond, 0) || math.IsNaN(top[0].RowsPerSecond) {
		t.Fatalf("Top after rescales = %+v", top)
	}
	if r := top[0].RowsPerSecond / top[1].RowsPerSecond; math.Abs(r-2) > 0.01 {
		t.Errorf("rate ratio %.3f, want 2", r)
	}
}

// keep filters, and n bounds, the answer.
func TestTopFilter(t *testing.T) {
	tr := New(8, time.Minute)
	now := time.Unix(1_700_000_000, 0)
	for i := range 5 {
		tr.Add(now, key(fmt.Sprint("d", i)), int64(i+1))
	}
	got := tr.Top(now, func(k model.PartitionKey) bool { return k.Series != "d4" }, 2)
	if len(got) != 2 || got[0].Key.Series != "d3" || got[1].Key.Series != "d2" {
		t.Errorf("Top without d4, 2 = %+v", got)
	}
	if got := tr.Top(now, nil, 0); got != nil {
		t.Errorf("Top(0) = %+v", got)
	}
}

// BenchmarkAddEach measures the tracker at a million devices a day: batches
// of 1,000 partitions, nearly all new, into a tracker of the default 1,000
// (205 ns a partition with container/heap and a lock each, 176 typed and
// one lock a batch; on a later, noisier machine, in alternating runs,
// 174–263 binary with the counts in the items, 164–188 4-ary with them
// inline). Hashing the partition keys for the index is most of the rest.
func BenchmarkAddEach(b *testing.B) {
	keys := make([]model.PartitionKey, 100_000)
	for i := range keys {
		keys[i] = key(fmt.Sprint("device-", i))
	}
	tr := New(1000, time.Minute)
	now := time.Unix(1_700_000_000, 0)
	b.ResetTimer()
	for n := 0; n < b.N; n += 1000 {
		now = now.Add(5 * time.Millisecond)
		off := n % len(keys)
		tr.AddEach(now, 1000, func(i int) (model.PartitionKey, int64) { return keys[(off+i)%len(keys)], 5 })
	}
}

// The heap stays ordered through replacements, growth of held counts and
// rescales: its top is always the smallest count held.
func TestHeapOrder(t *testing.T) {
	tr := New(50, time.Second)
	now := time.Unix(1_700_000_000, 0)
	for s := range 300 {
		now = now.Add(200 * time.Millisecond)
		tr.AddEach(now, 20, func(i int) (model.PartitionKey, int64) {
			return key(fmt.Sprint("d", (s*7+i*13)%120)), int64(1 + (s+i)%9)
		})
		for i, e := range tr.h {
			if e.it.i != i {
				t.Fatalf("round %d: item at %d knows index %d", s, i, e.it.i)
			}
			if i > 0 && e.w < tr.h[(i-1)/4].w {
				t.Fatalf("round %d: item at %d below its parent", s, i)
			}
			if tr.idx[tr.hashOf(e.it.key)] != e.it {
				t.Fatalf("round %d: item %v not indexed", s, e.it.key)
			}
		}
		if len(tr.idx) != len(tr.h) {
			t.Fatalf("round %d: %d indexed, %d held", s, len(tr.idx), len(tr.h))
		}
	}
}

// Keys differing in one field hash apart, and a key whose hash is a
// tracked item's (forced here) is not counted as that item.
func TestHashOf(t *testing.T) {
	tr := New(10, time.Minute)
	base := model.PartitionKey{Kind: model.KindReadings, Tenant: "t", Series: "dev", Day: 20_000, Sub: 3}
	seen := map[uint64]model.PartitionKey{}
	for _, v := range []func(*model.PartitionKey){
		func(*model.PartitionKey) {},
		func(k *model.PartitionKey) { k.Kind = model.KindAudit },
		func(k *model.PartitionKey) { k.Tenant = "u" },
		func(k *model.PartitionKey) { k.Series = "dew" },
		func(k *model.PartitionKey) { k.Day++ },
		func(k *model.PartitionKey) { k.Sub++ },
		func(k *model.PartitionKey) { k.Day, k.Sub = k.Day+1, k.Sub-1 },
	} {
		k := base
		v(&k)
		h := tr.hashOf(k)
		if prev, dup := seen[h]; dup {
			t.Errorf("%v and %v hash alike", prev, k)
		}
		seen[h] = k
	}
	now := time.Unix(1_700_000_000, 0)
	a, b := key("a"), key("b")
	tr.Add(now, a, 5)
	it := tr.idx[tr.hashOf(a)]
	delete(tr.idx, tr.hashOf(a))
	tr.idx[tr.hashOf(b)] = it // as if b's hash were a's
	tr.Add(now, b, 7)
	if len(tr.h) != 1 || it.key != a || tr.h[0].w != 5 {
		t.Errorf("after an add of a colliding key: %d held, the item's key %v, its count %v; want 1, %v, 5", len(tr.h), it.key, tr.h[0].w, a)
	}
}
