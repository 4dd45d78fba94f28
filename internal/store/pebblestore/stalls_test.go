package pebblestore

import (
	"testing"
	"time"
)

func TestStalls(t *testing.T) {
	type step struct {
		at int    // milliseconds
		op string // "begin", "end"
	}
	tests := []struct {
		name      string
		steps     []step
		readAt    int
		wantCount uint64
		wantTime  time.Duration
	}{
		{"none", nil, 0, 0, 0},
		{"one ended", []step{{0, "begin"}, {30, "end"}}, 100, 1, 30 * time.Millisecond},
		{"one under way counts up to now", []step{{10, "begin"}}, 50, 1, 40 * time.Millisecond},
		{"a begin during a stall is the same stall", []step{{0, "begin"}, {5, "begin"}, {20, "end"}}, 20, 1, 20 * time.Millisecond},
		{"an end without a begin is ignored", []step{{5, "end"}, {10, "begin"}, {15, "end"}, {40, "end"}}, 50, 1, 5 * time.Millisecond},
		{"two", []step{{0, "begin"}, {10, "end"}, {20, "begin"}, {25, "end"}}, 30, 2, 15 * time.Millisecond},
		{"a clock that steps back adds nothing", []step{{10, "begin"}, {5, "end"}}, 20, 1, 0},
	}
	t0 := time.Unix(1000, 0)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var now time.Time
			st := stalls{now: func() time.Time { return now }}
			for _, s := range tt.steps {
				now = t0.Add(time.Duration(s.at) * time.Millisecond)
				if s.op == "begin" {
					st.begin()
				} else {
					st.end()
				}
			}
			now = t0.Add(time.Duration(tt.readAt) * time.Millisecond)
			if n, d := st.read(); n != tt.wantCount || d != tt.wantTime {
				t.Errorf("read = %d stalls, %v; want %d, %v", n, d, tt.wantCount, tt.wantTime)
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
		st  stalls
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
	st.begin()
	now = t0.Add(30 * time.Millisecond)
	_, first := st.read()
	now = t0.Add(40 * time.Millisecond)
	st.end()
	if _, second := st.read(); second < first {
		t.Errorf("time stalled went back from %v to %v", first, second)
	}
}
