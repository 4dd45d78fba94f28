package lograte

import (
	"testing"
	"time"
)

func TestAllow(t *testing.T) {
	t0 := time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC)
	tests := []struct {
		at      time.Duration // after t0
		ok      bool
		dropped int
	}{
		{0, true, 0},
		{100 * time.Millisecond, false, 0},
		{900 * time.Millisecond, false, 0},
		{time.Second, true, 2},
		{1500 * time.Millisecond, false, 0},
		{5 * time.Second, true, 1},
		{6 * time.Second, true, 0},
	}
	l := &Limiter{Every: time.Second}
	for _, tt := range tests {
		ok, dropped := l.Allow(t0.Add(tt.at))
		if ok != tt.ok || dropped != tt.dropped {
			t.Errorf("Allow(t0+%s) = %v, %d; want %v, %d", tt.at, ok, dropped, tt.ok, tt.dropped)
		}
	}
}
