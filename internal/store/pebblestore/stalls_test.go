package pebblestore

import (
	"testing"
	"time"
)

func TestStalls(t *testing.T) {
	t0 := time.Unix(1000, 0)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	tests := []struct {
		name      string
		events    func(st *stalls)
		now       time.Time
		wantCount uint64
		wantTime  time.Duration
	}{
		{"none", func(*stalls) {}, at(0), 0, 0},
		{"one ended", func(st *stalls) { st.begin(at(0)); st.end(at(30)) }, at(100), 1, 30 * time.Millisecond},
		{"one under way counts up to now", func(st *stalls) { st.begin(at(10)) }, at(50), 1, 40 * time.Millisecond},
		{"a begin during a stall is the same stall", func(st *stalls) { st.begin(at(0)); st.begin(at(5)); st.end(at(20)) }, at(20), 1, 20 * time.Millisecond},
		{"an end without a begin is ignored", func(st *stalls) { st.end(at(5)); st.begin(at(10)); st.end(at(15)); st.end(at(40)) }, at(50), 1, 5 * time.Millisecond},
		{"two", func(st *stalls) { st.begin(at(0)); st.end(at(10)); st.begin(at(20)); st.end(at(25)) }, at(30), 2, 15 * time.Millisecond},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var st stalls
			tt.events(&st)
			n, d := st.read(tt.now)
			if n != tt.wantCount || d != tt.wantTime {
				t.Errorf("read = %d stalls, %v; want %d, %v", n, d, tt.wantCount, tt.wantTime)
			}
		})
	}
}
