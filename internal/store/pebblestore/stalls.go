package pebblestore

import (
	"sync"
	"time"
)

// stalls counts Pebble's write stalls: the times commits waited because
// the memtables or level 0 were at their bound (MemTableStopWritesThreshold,
// l0StopWritesThreshold), and for how long. The clock is read under the
// lock, so that a scrape racing a stall's end never sees the time stalled
// go back.
type stalls struct {
	now   func() time.Time // time.Now unless a test sets it
	mu    sync.Mutex
	count uint64
	total time.Duration
	since time.Time // when the stall under way began; zero if none
}

func (st *stalls) clock() time.Time {
	if st.now != nil {
		return st.now()
	}
	return time.Now()
}

func (st *stalls) begin() {
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.since.IsZero() {
		st.count++
		st.since = st.clock()
	}
}

func (st *stalls) end() {
	st.mu.Lock()
	defer st.mu.Unlock()
	if !st.since.IsZero() {
		st.total += max(st.clock().Sub(st.since), 0)
		st.since = time.Time{}
	}
}

// read returns the stalls begun and the time spent stalled, the stall under
// way included.
func (st *stalls) read() (count uint64, stalled time.Duration) {
	st.mu.Lock()
	defer st.mu.Unlock()
	stalled = st.total
	if !st.since.IsZero() {
		stalled += max(st.clock().Sub(st.since), 0)
	}
	return st.count, stalled
}
