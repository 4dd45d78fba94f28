package pebblemetrics

import (
	"testing"
	"time"
)

// Pebble's reasons for a stall (pebble.WriteStallBeginInfo.Reason).
const (
	memtablesFull = "memtable count limit reached"
	l0Full        = "L0 file count limit exceeded"
)

func TestStalls(t *testing.T) {
	type step struct {
		at     int    // milliseconds
		op     string // "begin", "end"
		reason string // of a begin
	}
	ms := func(n int) time.Duration { return time.Duration(n) * time.Millisecond }
	tests := []struct {
		name      string
		steps     []step
		readAt    int
		wantCount [stallReasons]uint64
		wantTime  [stallReasons]time.Duration
	}{
		{"none", nil, 0, [stallReasons]uint64{}, [stallReasons]time.Duration{}},
		{"one ended", []step{{0, "begin", memtablesFull}, {30, "end", ""}}, 100, [stallReasons]uint64{1, 0, 0}, [stallReasons]time.Duration{ms(30), 0, 0}},
		{"one under way counts up to now", []step{{10, "begin", l0Full}}, 50, [stallReasons]uint64{0, 1, 0}, [stallReasons]time.Duration{0, ms(40), 0}},
		{"a begin during a stall is the same stall, of its first reason", []step{{0, "begin", l0Full}, {5, "begin", memtablesFull}, {20, "end", ""}}, 20,
			[stallReasons]uint64{0, 1, 0}, [stallReasons]time.Duration{0, ms(20), 0}},
		{"an end without a begin is ignored", []step{{5, "end", ""}, {10, "begin", memtablesFull}, {15, "end", ""}, {40, "end", ""}}, 50,
			[stallReasons]uint64{1, 0, 0}, [stallReasons]time.Duration{ms(5), 0, 0}},
		{"two of two reasons", []step{{0, "begin", memtablesFull}, {10, "end", ""}, {20, "begin", l0Full}, {25, "end", ""}}, 30,
			[stallReasons]uint64{1, 1, 0}, [stallReasons]time.Duration{ms(10), ms(5), 0}},
		{"a reason Pebble adds later", []step{{0, "begin", "flushes paused"}, {7, "end", ""}}, 30, [stallReasons]uint64{0, 0, 1}, [stallReasons]time.Duration{0, 0, ms(7)}},
		{"a clock that steps back adds nothing", []step{{10, "begin", memtablesFull}, {5, "end", ""}}, 20, [stallReasons]uint64{1, 0, 0}, [stallReasons]time.Duration{}},
	}
	t0 := time.Unix(1000, 0)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var now time.Time
			st := Stalls{now: func() time.Time { return now }}
			for _, s := range tt.steps {
				now = t0.Add(ms(s.at))
				if s.op == "begin" {
					st.begin(s.reason)
				} else {
					st.end()
				}
			}
			now = t0.Add(ms(tt.readAt))
			if n, d := st.read(); n != tt.wantCount || d != tt.wantTime {
				t.Errorf("read = %v stalls, %v; want %v, %v (memtables, l0, other)", n, d, tt.wantCount, tt.wantTime)
			}
		})
	}
}

// The clock is read under the lock: else a scrape that took the lock
// between a stall's end reading the clock and recording it would report
// more time stalled than the scrapes after it, which Prometheus reads as a
// counter reset. The clock here fails the test when it is read with the
// lock free, and the time stalled never goes back.
func TestStallsNeverGoBack(t *testing.T) {
	var (
		now time.Time
		st  Stalls
	)
	st.now = func() time.Time {
		if st.mu.TryLock() {
			st.mu.Unlock()
			t.Error("the clock was read with the lock free")
		}
		return now
	}
	t0 := time.Unix(1000, 0)
	now = t0
	st.begin(l0Full)
	now = t0.Add(30 * time.Millisecond)
	_, first := st.read()
	now = t0.Add(40 * time.Millisecond)
	st.end()
	if _, second := st.read(); second[stallL0] < first[stallL0] {
		t.Errorf("time stalled went back from %v to %v", first, second)
	}
}
