package sink

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/sluicehq/sluice/internal/model"
	"github.com/sluicehq/sluice/internal/store"
)

// The flusher waits for more requests only when, at the recent rate, at
// least CommitSiblings of them are due within CommitDelay.
func TestGroupCommitWaits(t *testing.T) {
	start := time.Unix(1_700_000_000, 0)
	tests := []struct {
		name     string
		every    time.Duration // between arrivals of one request
		n        int           // arrivals
		idle     time.Duration // after the last, before the decision
		wait     bool
		expected int // about
	}{
		{"a lone client, 1,000 a second", time.Millisecond, 200, 0, false, 1},
		{"8,000 a second", 125 * time.Microsecond, 2000, 0, false, 8},
		{"20,000 a second", 50 * time.Microsecond, 5000, 0, true, 20},
		{"20,000 a second, then a second of quiet", 50 * time.Microsecond, 5000, time.Second, false, 0},
		{"one burst of 100", 0, 100, 0, false, 2},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			g := groupCommit{delay: time.Millisecond, siblings: 16}
			now := start
			for range tc.n {
				now = now.Add(tc.every)
				g.arrived(now, 1)
			}
			g.arrived(now.Add(tc.idle), 0)
			if got := g.wait(); got != tc.wait {
				t.Errorf("wait() = %v at %.0f requests a second, want %v", got, g.rate, tc.wait)
			}
			if got := g.expected(); got < tc.expected*9/10 || got > tc.expected*11/10+1 {
				t.Errorf("expected() = %d, want about %d", got, tc.expected)
			}
		})
	}
	if (&groupCommit{siblings: 1, rate: 1e9}).wait() {
		t.Errorf("a zero delay waits")
	}
}

// Requests that arrive one after another while a commit is in flight,
// faster than the group-commit delay, share commits; a lone client's
// sequential requests are never held.
func TestGroupCommitShares(t *testing.T) {
	cfg := testConfig()
	cfg.Linger = 0
	cfg.CommitDelay, cfg.CommitSiblings = time.Second, 2

	t.Run("staggered writers", func(t *testing.T) {
		// The first commit is held until every writer has sent: the
		// others arrive while a commit is in flight.
		g := newGate()
		hs := &hookStore{Store: tempStore(t), hook: func(n int, _ *store.Batch) error {
			if n == 1 {
				g.wait()
			}
			return nil
		}}
		s := start(t, cfg, testBuckets(), hs)
		const writers = 20
		var wg sync.WaitGroup
		for i := range writers {
			wg.Go(func() {
				r := &Request{Tenant: tenant, Readings: []model.Reading{reading(fmt.Sprint("dev-", i), base, "a")}}
				if err := s.Write(context.Background(), r); err != nil {
					t.Errorf("write %d: %v", i, err)
				}
			})
			time.Sleep(5 * time.Millisecond) // far less than the delay's gap (250 ms)
		}
		g.open()
		wg.Wait()
		if n := hs.commits.Load(); n > 3 {
			t.Errorf("%d requests arriving 5 ms apart took %d commits, want at most 3", writers, n)
		}
		if testutil.ToFloat64(s.m.commitDelays) == 0 {
			t.Errorf("no batch was held for more requests")
		}
	})
	t.Run("a lone client", func(t *testing.T) {
		hs := &hookStore{Store: tempStore(t)}
		s := start(t, cfg, testBuckets(), hs)
		for i := range 20 {
			if err := s.Write(context.Background(), &Request{Tenant: tenant, Readings: []model.Reading{reading("dev", base+int64(i), "a")}}); err != nil {
				t.Fatal(err)
			}
		}
		if n := testutil.ToFloat64(s.m.commitDelays); n != 0 {
			t.Errorf("a lone client's requests were held %v times", n)
		}
	})
}
