package sink

import (
	"context"
	"errors"
	"testing"

	"github.com/sluicehq/sluice/internal/model"
	"github.com/sluicehq/sluice/internal/store"
)

// A series-day whose entry is in a commit still in flight is not
// forgotten, however far past buckets.max_series_days the planner is: its
// catalogue read again would miss that entry (load does not wait for
// commits in flight; WithInFlightCheck, set for the sink's tests, panics if
// it would have to), and the planner would count the partition from a
// stale entry.
func TestForgetsNoSeriesDayInFlight(t *testing.T) {
	g := newGate()
	defer g.open()
	hs := &hookStore{Store: tempStore(t), hook: func(n int, _ *store.Batch) error {
		if n == 1 { // a's first write, and its partition's first entry
			g.wait()
		}
		return nil
	}}
	bcfg := testBuckets()
	bcfg.MaxSeriesDays = 1
	s := start(t, testConfig(), bcfg, hs)
	ctx := context.Background()
	write := func(dev string, ts int64) error {
		return s.Write(ctx, &Request{Tenant: tenant, Readings: []model.Reading{reading(dev, ts, "t")}})
	}
	first, second := make(chan error, 1), make(chan error, 1)
	go func() { first <- write("a", base) }()
	waitFor(t, "a's commit", func() bool { return hs.commits.Load() == 1 })
	// Past the bound, series-days are forgotten at the start of each round.
	for _, dev := range []string{"b", "c", "d"} {
		if err := write(dev, base); err != nil {
			t.Fatal(err)
		}
	}
	go func() { second <- write("a", base+1) }()
	// Planned: in flight, or already committed (a store with versions
	// commits it before the first).
	var err2 error
	planned := false
	waitFor(t, "a's second write planned", func() bool {
		select {
		case err2 = <-second:
			planned = true
			return true
		default:
		}
		s.mu.Lock()
		defer s.mu.Unlock()
		n := 0
		for bt := range s.flight {
			if name(&bt.b) == "a" {
				n++
			}
		}
		return n == 2 // a's first write, held, and its second
	})
	g.open()
	if !planned {
		err2 = <-second
	}
	if err := errors.Join(<-first, err2); err != nil {
		t.Fatal(err)
	}
	sdA := model.SeriesDay{Kind: model.KindReadings, Tenant: tenant, Series: "a", Day: model.DayOf(base)}
	if err := s.Settle(ctx, sdA); err != nil {
		t.Fatal(err)
	}
	parts, err := hs.Catalogue(ctx, sdA)
	if err != nil {
		t.Fatal(err)
	}
	if len(parts) != 1 || parts[0].Rows != 2 {
		t.Errorf("a's catalogue %+v, want one partition of 2 rows", parts)
	}
}
