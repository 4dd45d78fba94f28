// Package hotparts keeps the partitions written fastest recently, in
// bounded memory: a space-saving top-K over exponentially decayed row
// counts. The sink feeds it the rows of each batch it plans; the
// partitions ranking (GET /v1/partitions/top?by=rate) reads it. It reads
// no store and no row.
//
// Counts decay with time constant Tau (a row written Tau ago weighs 1/e of
// one written now), so a partition written at a steady r rows per second
// has a decayed count of about r·Tau, and Rate reports count/Tau. Counts
// use forward decay (each addition weighted by e^((t-t0)/Tau) against a
// fixed origin t0, rescaled now and then), so the order of the tracked
// partitions never changes as time passes and a min-heap keeps it.
//
// When the tracker holds Capacity partitions and a new one is written, the
// one with the smallest count is dropped and the new one takes over its
// count plus its own rows (the space-saving rule): every partition whose
// decayed count exceeds 1/Capacity of the total is held, and a newly held
// partition's rate may be overstated by at most the dropped one's.
package hotparts

import (
	"cmp"
	"container/heap"
	"math"
	"slices"
	"sync"
	"time"

	"github.com/sluicehq/sluice/internal/model"
)

// DefaultTau is the time constant of the decay.
const DefaultTau = time.Minute

// rescaleAt is how far (in units of Tau) the origin may fall behind before
// every weight is rescaled: e^40 keeps far from float64 overflow.
const rescaleAt = 40

// Rate is a tracked partition and its recent write rate.
type Rate struct {
	Key           model.PartitionKey
	RowsPerSecond float64
}

type item struct {
	key model.PartitionKey
	w   float64 // forward-decayed count, relative to origin
	i   int     // index in the heap
}

type minHeap []*item

func (h minHeap) Len() int           { return len(h) }
func (h minHeap) Less(i, j int) bool { return h[i].w < h[j].w }
func (h minHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i]; h[i].i = i; h[j].i = j }
func (h *minHeap) Push(x any)        { it := x.(*item); it.i = len(*h); *h = append(*h, it) }
func (h *minHeap) Pop() any {
	old := *h
	it := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	return it
}

// Tracker is safe for concurrent use.
type Tracker struct {
	mu     sync.Mutex
	cap    int
	tau    float64 // seconds
	origin time.Time
	h      minHeap
	idx    map[model.PartitionKey]*item
}

// New returns a tracker holding at most capacity partitions (at least 1),
// with counts decaying with time constant tau (DefaultTau if not positive).
func New(capacity int, tau time.Duration) *Tracker {
	if tau <= 0 {
		tau = DefaultTau
	}
	capacity = max(capacity, 1)
	return &Tracker{cap: capacity, tau: tau.Seconds(), idx: make(map[model.PartitionKey]*item, capacity)}
}

// Add records rows written to partition pk at now.
func (t *Tracker) Add(now time.Time, pk model.PartitionKey, rows int64) {
	if rows <= 0 {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.origin.IsZero() {
		t.origin = now
	}
	x := now.Sub(t.origin).Seconds() / t.tau
	if x > rescaleAt {
		f := math.Exp(-x)
		for _, it := range t.h {
			it.w *= f
		}
		t.origin, x = now, 0
	}
	w := float64(rows) * math.Exp(x)
	if it, ok := t.idx[pk]; ok {
		it.w += w
		heap.Fix(&t.h, it.i)
		return
	}
	if len(t.h) < t.cap {
		it := &item{key: pk, w: w}
		heap.Push(&t.h, it)
		t.idx[pk] = it
		return
	}
	low := t.h[0]
	delete(t.idx, low.key)
	low.key, low.w = pk, low.w+w
	t.idx[pk] = low
	heap.Fix(&t.h, 0)
}

// Top returns up to n tracked partitions that keep accepts, fastest first,
// with their rates at now.
func (t *Tracker) Top(now time.Time, keep func(model.PartitionKey) bool, n int) []Rate {
	if n <= 0 {
		return nil
	}
	// Collect under the lock, sort after it: Add, which the flusher calls
	// for every batch, must not wait for the sort.
	out := t.rates(now, keep, n)
	if out == nil {
		return nil // nothing tracked
	}
	SortRates(out)
	return out[:min(n, len(out))]
}

// rates returns the rates at now of the tracked partitions that keep
// accepts, unsorted: nil if none is tracked, else a (maybe empty) slice.
func (t *Tracker) rates(now time.Time, keep func(model.PartitionKey) bool, n int) []Rate {
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(t.h) == 0 {
		return nil
	}
	f := math.Exp(-now.Sub(t.origin).Seconds()/t.tau) / t.tau
	out := make([]Rate, 0, min(n, len(t.h)))
	for _, it := range t.h {
		if keep == nil || keep(it.key) {
			out = append(out, Rate{Key: it.key, RowsPerSecond: it.w * f})
		}
	}
	return out
}

// Len returns the number of partitions tracked.
func (t *Tracker) Len() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.h)
}

// SortRates orders rates fastest first, ties by series and sub-bucket.
func SortRates(rs []Rate) {
	slices.SortFunc(rs, func(a, b Rate) int {
		if c := cmp.Compare(b.RowsPerSecond, a.RowsPerSecond); c != 0 {
			return c
		}
		if c := cmp.Compare(a.Key.Series, b.Key.Series); c != 0 {
			return c
		}
		return cmp.Compare(a.Key.Sub, b.Key.Sub)
	})
}
