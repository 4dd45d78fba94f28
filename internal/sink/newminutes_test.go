package sink

import (
	"context"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/buckets"
	"github.com/sluicehq/sluice/internal/model"
	"github.com/sluicehq/sluice/internal/rollup"
	"github.com/sluicehq/sluice/internal/store"
)

// newFromHook records the NewFrom of every readings partition a batch
// writes, and when each batch's AfterCommit ran, by the device and
// timestamp of its first reading.
type newFromHook struct {
	mu     sync.Mutex
	froms  map[string][]int64 // device -> NewFrom of each batch writing it, in commit order
	events []string
}

func (h *newFromHook) BeforeCommit(b *store.Batch) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, pw := range b.Partitions {
		if pw.Key.Kind == model.KindReadings {
			h.froms[pw.Key.Series] = append(h.froms[pw.Key.Series], pw.NewFrom)
		}
	}
	h.events = append(h.events, "commit "+name(b))
	return nil
}

func (h *newFromHook) AfterCommit(b *store.Batch, _ error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.events = append(h.events, "after "+name(b))
}

func name(b *store.Batch) string {
	for _, pw := range b.Partitions {
		return pw.Key.Series
	}
	return ""
}

func TestNewFrom(t *testing.T) {
	minute := func(m int64) int64 { return base + m*rollup.MinuteMillis }
	tests := []struct {
		name  string
		batch [][]int64 // the timestamps of a device's readings, a request (and batch) each
		want  []int64   // the NewFrom of each
	}{
		{name: "first write", batch: [][]int64{{minute(5) + 10}}, want: []int64{math.MinInt64}},
		{name: "later minute", batch: [][]int64{{minute(5) + 10}, {minute(7)}}, want: []int64{math.MinInt64, minute(6)}},
		{name: "same minute again", batch: [][]int64{{minute(5) + 10}, {minute(5) + 20}}, want: []int64{math.MinInt64, minute(6)}},
		{name: "late reading", batch: [][]int64{{minute(9)}, {minute(3)}}, want: []int64{math.MinInt64, minute(10)}},
		{name: "several minutes", batch: [][]int64{{minute(1), minute(2) + 5, minute(2) + 7}, {minute(2) + 9, minute(4)}}, want: []int64{math.MinInt64, minute(3)}},
		// testBuckets closes a partition at 20 rows: a batch of 25 readings
		// writes two, neither of which holds all of its new minutes.
		{name: "split in the batch", batch: [][]int64{seq(minute(1), 25)}, want: []int64{0, 0}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := &newFromHook{froms: map[string][]int64{}}
			s := start(t, testConfig(), testBuckets(), tempStore(t), WithCommitHook(h), WithNewMinutes())
			for _, tss := range tt.batch {
				var rs []model.Reading
				for _, ts := range tss {
					rs = append(rs, reading("dev", ts, "a"))
				}
				if err := s.Write(context.Background(), &Request{Tenant: tenant, Readings: rs}); err != nil {
					t.Fatal(err)
				}
			}
			h.mu.Lock()
			defer h.mu.Unlock()
			if got := h.froms["dev"]; !slices.Equal(got, tt.want) {
				t.Errorf("NewFrom = %v, want %v", got, tt.want)
			}
		})
	}
}

func seq(from int64, n int) []int64 {
	out := make([]int64, n)
	for i := range out {
		out[i] = from + int64(i)
	}
	return out
}

// A batch that writes to a minute a batch in flight claimed as new is
// committed only once that batch's commit and AfterCommit returned, so
// that the hook's sums of the claimed minute never miss it; batches that
// write other series-days, or only new minutes of the same one, go on.
func TestNewMinutesClaimsOrderCommits(t *testing.T) {
	g := newGate()
	defer g.open()
	hs := &hookStore{Store: tempStore(t), hook: func(n int, _ *store.Batch) error {
		if n == 1 {
			g.wait()
		}
		return nil
	}}
	h := &newFromHook{froms: map[string][]int64{}}
	s := start(t, testConfig(), testBuckets(), hs, WithCommitHook(h), WithNewMinutes())
	minute := func(m int64) int64 { return base + m*rollup.MinuteMillis }
	write := func(rs ...model.Reading) error {
		return s.Write(context.Background(), &Request{Tenant: tenant, Readings: rs})
	}
	// These must not wait for the held commit: a minute is plenty.
	writeFree := func(rs ...model.Reading) error {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		return s.Write(ctx, &Request{Tenant: tenant, Readings: rs})
	}
	errs := make(chan error, 2)
	go func() { errs <- write(reading("a", minute(5), "t")) }() // claims a's minute 5, held in its commit
	waitFor(t, "the first commit", func() bool { return hs.commits.Load() == 1 })
	if err := writeFree(reading("c", minute(5), "t")); err != nil { // another series-day
		t.Fatal(err)
	}
	if err := writeFree(reading("y", minute(1), "t"), reading("a", minute(9), "t")); err != nil { // a new minute of a
		t.Fatal(err)
	}
	writeClaimedMinute(t, s, h, g, write, errs)
}

// A claim outlives the planner's state of its series-day: a batch that
// writes to the claimed minute after the series-day was forgotten and read
// again from the catalogue still waits for the claimer.
func TestNewMinutesClaimsSurviveEviction(t *testing.T) {
	g := newGate()
	defer g.open()
	var hold atomic.Int64 // the commit to hold, counted from 1
	hs := &hookStore{Store: tempStore(t), hook: func(n int, _ *store.Batch) error {
		if int64(n) == hold.Load() {
			g.wait()
		}
		return nil
	}}
	h := &newFromHook{froms: map[string][]int64{}}
	bcfg := testBuckets()
	bcfg.MaxSeriesDays, bcfg.MaxRows = 1, 6400
	bcfg.Reserve = buckets.DefaultReserve(bcfg) // entries ahead, as the gateway runs: 100 rows, 15 minutes
	s := start(t, testConfig(), bcfg, hs, WithCommitHook(h), WithNewMinutes())
	ctx := context.Background()
	minute := func(m int64) int64 { return base + m*rollup.MinuteMillis }
	write := func(rs ...model.Reading) error { return s.Write(ctx, &Request{Tenant: tenant, Readings: rs}) }
	for _, m := range []int64{1, 2} { // a's entry then claims 15 minutes ahead of its rows
		if err := write(reading("a", minute(m), "t")); err != nil {
			t.Fatal(err)
		}
	}
	hold.Store(hs.commits.Load() + 1)
	errs := make(chan error, 2)
	go func() { errs <- write(reading("a", minute(5), "t")) }() // claims minute 5 with no new entry
	waitFor(t, "the claiming commit", func() bool { return hs.commits.Load() == hold.Load() })
	sdA := model.SeriesDay{Kind: model.KindReadings, Tenant: tenant, Series: "a", Day: model.DayOf(base)}
	if err := s.Settle(ctx, sdA); err != nil { // exact, so that the planner may forget it
		t.Fatal(err)
	}
	// Past the bound: a is forgotten once the settle's entry landed, which
	// the planner hears of at the start of a round.
	for _, dev := range []string{"b", "c"} {
		if err := write(reading(dev, minute(1), "t")); err != nil {
			t.Fatal(err)
		}
	}
	writeClaimedMinute(t, s, h, g, write, errs)
}

// writeClaimedMinute writes, in a batch named z, a reading in a's minute
// 5, which a batch held at g claimed, and checks that it is held back
// until that batch's AfterCommit; errs gets both writes' results.
func writeClaimedMinute(t *testing.T, s *Sink, h *newFromHook, g *gate, write func(...model.Reading) error, errs chan error) {
	t.Helper()
	claimed := base + 5*rollup.MinuteMillis + 1
	go func() { errs <- write(reading("z", base+rollup.MinuteMillis, "t"), reading("a", claimed, "t")) }()
	waitHeldBack(t, s, "z")
	g.open()
	for range 2 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	h.committedAfter(t, "a", "z")
}

// waitHeldBack waits until the batch named first (see name) is planned
// and waits for a batch before it.
func waitHeldBack(t *testing.T, s *Sink, first string) {
	t.Helper()
	waitFor(t, "the batch writing the claimed minute planned", func() bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		for bt := range s.flight {
			if name(&bt.b) == first {
				return len(bt.after) > 0
			}
		}
		return false
	})
}

// committedAfter checks that the batch named second was committed after
// the last AfterCommit of a batch named claimer.
func (h *newFromHook) committedAfter(t *testing.T, claimer, second string) {
	t.Helper()
	h.mu.Lock()
	defer h.mu.Unlock()
	after, commit := -1, slices.Index(h.events, "commit "+second)
	for i, e := range h.events {
		if e == "after "+claimer {
			after = i
		}
	}
	if after < 0 || commit < after {
		t.Errorf("the batch writing %s's claimed minute was committed before the claimer's AfterCommit: %v", claimer, h.events)
	}
}
