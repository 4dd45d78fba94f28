package pebblemetrics

import (
	"strings"
	"sync"
	"time"

	"github.com/cockroachdb/pebble/v2"
)

// Listener returns the event listener that counts the database's stalls
// in st: the database's pebble.Options.EventListener.
func (st *Stalls) Listener() *pebble.EventListener {
	return &pebble.EventListener{
		WriteStallBegin: func(info pebble.WriteStallBeginInfo) { st.begin(info.Reason) },
		WriteStallEnd:   st.end,
	}
}

// Stalls counts a database's write stalls: the times commits waited
// because the memtables or level 0 were at their bound
// (MemTableStopWritesThreshold, L0StopWritesThreshold), and for how long,
// by reason. The clock is read under the lock, so that a scrape racing a
// stall's end never sees the time stalled go back. The zero value counts
// none yet.
type Stalls struct {
	now    func() time.Time // time.Now unless a test sets it
	mu     sync.Mutex
	count  [stallReasons]uint64
	total  [stallReasons]time.Duration
	since  time.Time // when the stall under way began; zero if none
	reason int       // the stall under way's
}

// The reasons a stall is counted under (the label reason of its metrics).
const (
	stallMemtables = iota // the memtables all full, the oldest not flushed yet
	stallL0               // level 0 at l0StopWritesThreshold
	stallOther            // a reason Pebble names that is neither
	stallReasons
)

var stallReasonLabels = [stallReasons]string{"memtables", "l0", "other"}

// stallReason classifies the reason Pebble gives a stall
// (pebble.WriteStallBeginInfo.Reason).
func stallReason(r string) int {
	switch {
	case strings.HasPrefix(r, "memtable"):
		return stallMemtables
	case strings.HasPrefix(r, "L0"):
		return stallL0
	}
	return stallOther
}

func (st *Stalls) clock() time.Time {
	if st.now != nil {
		return st.now()
	}
	return time.Now()
}

// begin records the start of a stall Pebble gives reason for; a begin
// during a stall is part of it.
func (st *Stalls) begin(reason string) {
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.since.IsZero() {
		st.reason = stallReason(reason)
		st.count[st.reason]++
		st.since = st.clock()
	}
}

func (st *Stalls) end() {
	st.mu.Lock()
	defer st.mu.Unlock()
	if !st.since.IsZero() {
		st.total[st.reason] += max(st.clock().Sub(st.since), 0)
		st.since = time.Time{}
	}
}

// read returns the stalls begun and the time spent stalled, by reason, the
// stall under way included.
func (st *Stalls) read() (count [stallReasons]uint64, stalled [stallReasons]time.Duration) {
	st.mu.Lock()
	defer st.mu.Unlock()
	stalled = st.total
	if !st.since.IsZero() {
		stalled[st.reason] += max(st.clock().Sub(st.since), 0)
	}
	return st.count, stalled
}
