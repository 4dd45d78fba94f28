package readiness

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

func TestState(t *testing.T) {
	fail := func(msg string) func() error { return func() error { return errors.New(msg) } }
	ok := func() error { return nil }
	tests := []struct {
		name   string
		checks []Check
		stop   bool
		want   string // "" for ready
	}{
		{"no checks", nil, false, ""},
		{"all pass", []Check{{"store", ok}, {"mqtt", ok}}, false, ""},
		{"one fails", []Check{{"store", ok}, {"mqtt", fail("not connected")}}, false, "mqtt: not connected"},
		{"all fail", []Check{{"store", fail("down")}, {"mqtt", fail("not connected")}}, false, "store: down; mqtt: not connected"},
		{"stopping wins", []Check{{"store", ok}}, true, "shutting down"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := New(tt.checks...)
			if tt.stop {
				s.Stop()
			}
			err := s.Ready()
			if got := ""; err != nil {
				got = err.Error()
				if got != tt.want {
					t.Fatalf("Ready() = %q, want %q", got, tt.want)
				}
			} else if tt.want != "" {
				t.Fatalf("Ready() = nil, want %q", tt.want)
			}
		})
	}
}

type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time      { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) add(d time.Duration) { c.mu.Lock(); c.t = c.t.Add(d); c.mu.Unlock() }

// TestProbeCaches checks that the probe runs at most once per TTL and that
// its answer follows the store.
func TestProbeCaches(t *testing.T) {
	c := &clock{t: time.Unix(1e9, 0)}
	var runs atomic.Int32
	var down atomic.Bool
	p := NewProbe(func(context.Context) error {
		runs.Add(1)
		if down.Load() {
			return errors.New("down")
		}
		return nil
	}, time.Second, time.Second, c.now)
	for range 100 {
		if err := p.Check(); err != nil {
			t.Fatal(err)
		}
	}
	if n := runs.Load(); n != 1 {
		t.Fatalf("100 checks within the TTL ran the probe %d times, want 1", n)
	}
	down.Store(true)
	if err := p.Check(); err != nil {
		t.Fatalf("cached answer = %v, want nil", err)
	}
	c.add(time.Second)
	if err := p.Check(); err == nil || err.Error() != "down" {
		t.Fatalf("after the TTL = %v, want down", err)
	}
	if n := runs.Load(); n != 2 {
		t.Fatalf("probe ran %d times, want 2", n)
	}
}

// TestProbeHung checks that a probe that never returns is reported within
// its timeout, and that no second probe is started beside it.
func TestProbeHung(t *testing.T) {
	release := make(chan struct{})
	var runs atomic.Int32
	p := NewProbe(func(ctx context.Context) error {
		runs.Add(1)
		<-release // ignores ctx, as a write that cannot be interrupted
		return nil
	}, time.Millisecond, 50*time.Millisecond, time.Now)
	for range 3 {
		start := time.Now()
		err := p.Check()
		if err == nil || !strings.Contains(err.Error(), "no answer") {
			t.Fatalf("hung probe = %v, want no answer", err)
		}
		if d := time.Since(start); d > 2*time.Second {
			t.Fatalf("hung probe answered after %v", d)
		}
	}
	if n := runs.Load(); n != 1 {
		t.Fatalf("%d probes started while one hung, want 1", n)
	}
	close(release)
	deadline := time.Now().Add(5 * time.Second)
	for p.Check() != nil {
		if time.Now().After(deadline) {
			t.Fatal("probe still failing after it returned")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestProbeTimeoutError checks that a probe that honours its context and
// runs out of time says so.
func TestProbeTimeoutError(t *testing.T) {
	p := NewProbe(func(ctx context.Context) error {
		<-ctx.Done()
		return ctx.Err()
	}, time.Second, 10*time.Millisecond, time.Now)
	if err := p.Check(); err == nil || !strings.Contains(err.Error(), "no answer") {
		t.Fatalf("Check() = %v, want no answer", err)
	}
}
