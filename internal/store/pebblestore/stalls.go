package pebblestore

import (
	"sync"
	"time"
)

// stalls counts Pebble's write stalls: the times commits waited because
// the memtables waiting for their flush, or the sublevels of level 0, were
// at their bound (l0StopWritesThreshold), and for how long.
type stalls struct {
	mu    sync.Mutex
	count uint64
	total time.Duration
	since time.Time // when the stall under way began; zero if none
}

func (st *stalls) begin(now time.Time) {
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.since.IsZero() {
		st.count++
		st.since = now
	}
}

func (st *stalls) end(now time.Time) {
	st.mu.Lock()
	defer st.mu.Unlock()
	if !st.since.IsZero() {
		st.total += now.Sub(st.since)
		st.since = time.Time{}
	}
}

// read returns the stalls begun and the time spent stalled up to now,
// the stall under way included.
func (st *stalls) read(now time.Time) (count uint64, stalled time.Duration) {
	st.mu.Lock()
	defer st.mu.Unlock()
	stalled = st.total
	if !st.since.IsZero() {
		stalled += now.Sub(st.since)
	}
	return st.count, stalled
}
