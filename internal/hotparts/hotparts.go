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
// partition's rate may be overstated by at most the dropped one's. (A
// partition whose key hashes like a tracked other's is not counted: about
// one add in 10^16, see Tracker.idx.)
package hotparts

import (
	"cmp"
	"hash/maphash"
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
	h   uint64 // its key's hash (Tracker.hashOf)
	i   int    // index in the heap
}

// entry is one slot of the heap: a tracked item and its forward-decayed
// count, relative to origin, kept in the heap itself so that ordering it
// reads no item.
type entry struct {
	w  float64
	it *item
}

// minHeap is a 4-ary heap of the tracked items by count, the smallest at
// the top. The flusher fixes it for every partition of every batch, and
// with more partitions written than tracked each one replaces the top and
// sinks to the bottom: typed (not container/heap), with the counts inline
// and four children a node (half the levels of a binary heap, whose
// siblings share a cache line), a sink reads no item and writes each moved
// one's index once.
type minHeap []entry

func (h *minHeap) push(it *item, w float64) {
	*h = append(*h, entry{w: w, it: it})
	h.up(len(*h) - 1)
}

// fix restores the order after the count at i grew (counts only grow
// between rescales, which keep the order).
func (h minHeap) fix(i int) {
	e, n := h[i], len(h)
	for {
		first := 4*i + 1
		if first >= n {
			break
		}
		c := first
		for k := first + 1; k < min(first+4, n); k++ {
			if h[k].w < h[c].w {
				c = k
			}
		}
		if h[c].w >= e.w {
			break
		}
		h[i] = h[c]
		h[i].it.i = i
		i = c
	}
	h[i] = e
	e.it.i = i
}

func (h minHeap) up(i int) {
	e := h[i]
	for i > 0 {
		p := (i - 1) / 4
		if e.w >= h[p].w {
			break
		}
		h[i] = h[p]
		h[i].it.i = i
		i = p
	}
	h[i] = e
	e.it.i = i
}

// Tracker is safe for concurrent use.
type Tracker struct {
	mu     sync.Mutex
	cap    int
	tau    float64 // seconds
	origin time.Time
	h      minHeap
	// idx holds the tracked items by a seeded 64-bit hash of their key
	// (hashOf): the key's two strings hashed once an add instead of the
	// whole key three times (look-up, delete, insert), as the flusher adds
	// every partition of every batch. A key whose hash equals a tracked
	// item's other key is not counted; with at most Capacity items
	// tracked, that is about one add in 10^16 at the default capacity.
	idx  map[uint64]*item
	seed maphash.Seed
}

// New returns a tracker holding at most capacity partitions (at least 1),
// with counts decaying with time constant tau (DefaultTau if not positive).
func New(capacity int, tau time.Duration) *Tracker {
	if tau <= 0 {
		tau = DefaultTau
	}
	capacity = max(capacity, 1)
	return &Tracker{cap: capacity, tau: tau.Seconds(), idx: make(map[uint64]*item, capacity), seed: maphash.MakeSeed()}
}

// hashOf returns pk's hash in idx.
func (t *Tracker) hashOf(pk model.PartitionKey) uint64 { return pk.Hash(t.seed) }

// Add records rows written to partition pk at now.
func (t *Tracker) Add(now time.Time, pk model.PartitionKey, rows int64) {
	t.AddEach(now, 1, func(int) (model.PartitionKey, int64) { return pk, rows })
}

// AddEach records the rows of n partitions written at now: each(i) returns
// the i-th partition and its rows. It takes the lock once for all of them.
func (t *Tracker) AddEach(now time.Time, n int, each func(i int) (model.PartitionKey, int64)) {
	if n <= 0 {
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
		for i := range t.h {
			t.h[i].w *= f
		}
		t.origin, x = now, 0
	}
	weight := math.Exp(x)
	for i := range n {
		pk, rows := each(i)
		if rows > 0 {
			t.add(pk, float64(rows)*weight)
		}
	}
}

// add adds w to pk's count. t.mu is held.
func (t *Tracker) add(pk model.PartitionKey, w float64) {
	h := t.hashOf(pk)
	if it, ok := t.idx[h]; ok {
		if it.key != pk {
			return // another key's hash: see idx
		}
		t.h[it.i].w += w
		t.h.fix(it.i)
		return
	}
	if len(t.h) < t.cap {
		it := &item{key: pk, h: h}
		t.h.push(it, w)
		t.idx[h] = it
		return
	}
	low := t.h[0].it
	delete(t.idx, low.h)
	low.key, low.h = pk, h
	t.h[0].w += w
	t.idx[h] = low
	t.h.fix(0)
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
	for _, e := range t.h {
		if keep == nil || keep(e.it.key) {
			out = append(out, Rate{Key: e.it.key, RowsPerSecond: e.w * f})
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
