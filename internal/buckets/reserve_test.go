package buckets_test

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/sluicehq/sluice/internal/buckets"
	"github.com/sluicehq/sluice/internal/model"
)

func reserveConfig() buckets.Config {
	c := testConfig()
	c.MaxRows, c.MaxBytes = 100, 10_000
	c.Reserve = buckets.Reserve{Rows: 10, Bytes: 100, Span: 1000}
	return c
}

// takeOne returns the one entry the round hands out, and fails if it hands
// out another number.
func takeOne(t *testing.T, p *buckets.Planner) model.PartitionInfo {
	t.Helper()
	got := p.TakeDirty()
	if len(got) != 1 {
		t.Fatalf("round handed out %+v, want one entry", got)
	}
	return got[0]
}

// settlesNothing fails if Settle(all) hands out an entry; when says when.
func settlesNothing(t *testing.T, p *buckets.Planner, all bool, when string) {
	t.Helper()
	if got := p.Settle(all); len(got) != 0 {
		t.Fatalf("Settle(%v) %s settled %d entries, the first %+v", all, when, len(got), got[0].Info)
	}
}

// devDay is the series-day of device dev-i on sdA's day.
func devDay(i int) model.SeriesDay {
	return model.SeriesDay{Kind: model.KindReadings, Tenant: "t", Series: fmt.Sprint("dev-", i), Day: sdA.Day}
}

// TestReserveEntries follows which assignments need a new entry. The first
// entry a partition gets after it is opened is exact (a quiet device's
// partition is then evictable without a settle); every case starts with
// that one and then follows the entries that claim ahead.
func TestReserveEntries(t *testing.T) {
	start := sdA.Day.Start() + 10_000
	end := sdA.Day.End() - 1 // a claim runs to the end of the day
	tests := []struct {
		name  string
		ts    []int64 // one row of 10 bytes each, one round each
		wants []bool  // whether that round hands out an entry
		last  model.PartitionInfo
	}{
		{
			"rows within the reserve need none",
			[]int64{start, start + 1, start + 2},
			[]bool{true, false, false},
			model.PartitionInfo{Rows: 12, Bytes: 120, MinTS: start - 1000, MaxTS: end},
		},
		{
			// A device reporting every few hours claims once.
			"later rows need none, however far apart",
			[]int64{start, start + 3_600_000, start + 7_200_000, sdA.Day.End() - 1},
			[]bool{true, false, false, false},
			model.PartitionInfo{Rows: 12, Bytes: 120, MinTS: start - 1000, MaxTS: end},
		},
		{
			"a row past the row reserve needs one",
			[]int64{start, start + 1, start + 2, start + 3, start + 4, start + 5, start + 6, start + 7, start + 8, start + 9, start + 10, start + 11},
			[]bool{true, false, false, false, false, false, false, false, false, false, false, true},
			model.PartitionInfo{Rows: 23, Bytes: 230, MinTS: start - 1000, MaxTS: end},
		},
		{
			"a late row past the span needs one",
			[]int64{start, start - 1001},
			[]bool{true, true},
			model.PartitionInfo{Rows: 13, Bytes: 130, MinTS: start - 2001, MaxTS: end},
		},
		{
			"the range stays within the day",
			[]int64{sdA.Day.Start() + 5, sdA.Day.Start() + 4},
			[]bool{true, false},
			model.PartitionInfo{Rows: 12, Bytes: 120, MinTS: sdA.Day.Start(), MaxTS: end},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := buckets.New(reserveConfig())
			p.Load(sdA, nil)
			assign(t, p, sdA, unit{tc.ts[0], 1, 10})
			exact := model.PartitionInfo{Key: sdA.Partition(0), Rows: 1, Bytes: 10, MinTS: tc.ts[0], MaxTS: tc.ts[0], State: buckets.StateSingle}
			if first := takeOne(t, p); first != exact {
				t.Fatalf("first entry %+v, want the exact %+v", first, exact)
			}
			var last model.PartitionInfo
			for i, ts := range tc.ts {
				assign(t, p, sdA, unit{ts, 1, 10})
				got := p.TakeDirty()
				if (len(got) > 0) != tc.wants[i] {
					t.Fatalf("round %d handed out %v, want an entry: %v", i, got, tc.wants[i])
				}
				if len(got) > 0 {
					last = got[0]
				}
			}
			want := tc.last
			want.Key, want.State, want.Ahead = sdA.Partition(0), buckets.StateSingle, true
			if last != want {
				t.Errorf("last entry %+v, want %+v", last, want)
			}
		})
	}
}

// TestReserveCovers checks on random streams that the entries handed out
// (applied in order, as the store keeps them) always cover what each
// partition holds, never pass the bounds, that a planner reloaded from them
// keeps every partition within the bound, and that Settle makes them exact.
func TestReserveCovers(t *testing.T) {
	cfg := reserveConfig()
	rng := rand.New(rand.NewPCG(1, 2))
	for run := range 20 {
		p := buckets.New(cfg)
		p.Load(sdA, nil)
		stored := make(map[model.PartitionKey]model.PartitionInfo)
		exact := make(map[model.PartitionKey]model.PartitionInfo)
		apply := func(es []model.PartitionInfo) {
			for _, e := range es {
				stored[e.Key] = e
			}
		}
		check := func(when string) {
			for k, x := range exact {
				e, ok := stored[k]
				switch {
				case !ok:
					t.Fatalf("run %d %s: no entry for %v", run, when, k)
				case e.Rows < x.Rows || e.Bytes < x.Bytes || e.MinTS > x.MinTS || e.MaxTS < x.MaxTS:
					t.Fatalf("run %d %s: entry %+v does not cover %+v", run, when, e, x)
				case e.Rows > cfg.MaxRows || e.Bytes > cfg.MaxBytes:
					t.Fatalf("run %d %s: entry %+v over the bound", run, when, e)
				}
			}
		}
		for round := range 50 {
			for range rng.IntN(8) {
				u := unit{sdA.Day.Start() + rng.Int64N(model.MillisPerDay), 1 + rng.Int64N(3), 10 + rng.Int64N(200)}
				pk := assign(t, p, sdA, u)
				x, ok := exact[pk]
				if !ok {
					x = model.PartitionInfo{Key: pk, MinTS: u.ts, MaxTS: u.ts}
				}
				x.Rows += u.rows
				x.Bytes += u.bytes
				x.MinTS, x.MaxTS = min(x.MinTS, u.ts), max(x.MaxTS, u.ts)
				exact[pk] = x
			}
			apply(p.TakeDirty())
			check("after a round")
			if round%10 == 9 {
				for _, e := range p.Settle(rng.IntN(2) == 0) {
					apply([]model.PartitionInfo{e.Info})
				}
				check("after a settle")
			}
		}
		// A planner reloaded from the stored entries keeps the bound.
		q := buckets.New(cfg)
		var cat []model.PartitionInfo
		for _, e := range stored {
			cat = append(cat, e)
		}
		q.Load(sdA, sortedBySub(cat))
		added := make(map[model.PartitionKey]int64)
		for range 300 {
			pk := assign(t, q, sdA, unit{sdA.Day.Start(), 1, 10})
			added[pk]++
		}
		for k, n := range added {
			if got := exact[k].Rows + n; got > cfg.MaxRows {
				t.Fatalf("run %d: after a reload %v holds %d rows, over the bound %d", run, k, got, cfg.MaxRows)
			}
		}
		// Settle(true) makes every entry exact.
		for _, e := range p.Settle(true) {
			apply([]model.PartitionInfo{e.Info})
		}
		for k, x := range exact {
			e := stored[k]
			if e.Rows != x.Rows || e.Bytes != x.Bytes || e.MinTS != x.MinTS || e.MaxTS != x.MaxTS {
				t.Fatalf("run %d: settled entry %+v, want exact %+v", run, e, x)
			}
		}
	}
}

// Settle(false) settles only partitions idle since the previous call; an
// entry lost with a failed commit (Unsave) is written again.
func TestSettleIdleAndUnsave(t *testing.T) {
	p := buckets.New(reserveConfig())
	s := p.Load(sdA, nil)
	pt, err := p.Place(s, sdA.Day.Start()+5, 1, 10)
	if err != nil {
		t.Fatal(err)
	}
	if e := takeOne(t, p); e.Rows != 1 || e.Ahead {
		t.Fatalf("first entry %+v, want the exact one", e)
	}
	settlesNothing(t, p, true, "after an exact entry")
	assign(t, p, sdA, unit{sdA.Day.Start() + 5, 1, 10})
	if e := takeOne(t, p); e.Rows != 12 {
		t.Fatalf("second entry %+v, want one claiming 12 rows", e)
	}
	settlesNothing(t, p, false, "right after a write")
	got := p.Settle(false)
	if len(got) != 1 || got[0].Part != pt || got[0].Info.Rows != 2 {
		t.Fatalf("Settle after an idle interval = %+v, want the exact entry", got)
	}
	settlesNothing(t, p, true, "of a settled partition")
	// Within its settled entry, no new row is free any more: the next
	// entry is exact, as after a load (a claim would need a settle again)...
	assign(t, p, sdA, unit{sdA.Day.Start() + 5, 1, 10})
	if e := takeOne(t, p); e.Rows != 3 || e.Ahead {
		t.Fatalf("entry after settling %+v, want the exact one of 3 rows", e)
	}
	// ...the one after that claims again...
	assign(t, p, sdA, unit{sdA.Day.Start() + 6, 1, 10})
	if e := takeOne(t, p); e.Rows != 14 || !e.Ahead {
		t.Fatalf("second entry after settling %+v, want one claiming 14 rows", e)
	}
	// ...and a lost entry is handed out again.
	p.Unsave([]*buckets.Partition{pt})
	if got := p.Settle(true); len(got) != 1 || got[0].Info.Rows != 4 {
		t.Fatalf("Settle after Unsave = %+v, want the exact entry of 4 rows", got)
	}
}

// Unsave leaves alone a partition whose series-day was forgotten: an entry
// written from that stale state could replace a newer one.
func TestUnsaveForgotten(t *testing.T) {
	p, pt := placedOnce(t)
	p.Settle(true)
	p.Forget(sdA)
	p.Load(sdA, nil) // reloaded, as the sink does on the next write
	p.Unsave([]*buckets.Partition{pt})
	settlesNothing(t, p, true, "for a forgotten partition")
}

// A series-day whose entry is still in a commit is not forgotten, so a
// failure of that commit (Unsave) can still be repaired from its state.
// The entries are each partition's first, so exact: only their commits in
// flight hold the series-days.
func TestEvictionWaitsForLanded(t *testing.T) {
	cfg := reserveConfig()
	cfg.MaxSeriesDays = 1
	p := buckets.New(cfg)
	var inflight []*buckets.Partition
	for i := range 3 {
		s := p.Load(devDay(i), nil)
		if _, err := p.Place(s, sdA.Day.Start(), 1, 10); err != nil {
			t.Fatal(err)
		}
		for _, e := range p.TakeEntries(nil) {
			if e.Info.Ahead {
				t.Fatalf("first entry of %v runs ahead: %+v", devDay(i), e.Info)
			}
			inflight = append(inflight, e.Part)
		}
	}
	if p.Len() != 3 {
		t.Fatalf("with entries in flight the planner holds %d series-days, want 3", p.Len())
	}
	// The first commit failed: its partition is still held, so its entry is
	// written again, and only it: the other two are stored exactly.
	p.Unsave(inflight[:1])
	settled := p.Settle(true)
	if len(settled) != 1 || settled[0].Part != inflight[0] {
		t.Fatalf("Settle after a failed commit = %+v, want the lost entry only", settled)
	}
	p.Landed(inflight)
	if p.Lookup(devDay(0)) == nil {
		t.Fatalf("with its settle commit in flight %v was forgotten", devDay(0))
	}
	if p.Len() > cfg.MaxSeriesDays {
		t.Errorf("with only devDay(0)'s commit in flight the planner holds %d series-days, more than %d", p.Len(), cfg.MaxSeriesDays)
	}
	p.Landed([]*buckets.Partition{settled[0].Part})
	if p.Len() > cfg.MaxSeriesDays {
		t.Errorf("after every commit landed the planner holds %d series-days, more than %d", p.Len(), cfg.MaxSeriesDays)
	}
}

// A partition loaded with an exact stored entry gets an exact entry for
// its first rows, then claims ahead.
func TestFirstEntryAfterLoadIsExact(t *testing.T) {
	p := buckets.New(reserveConfig())
	start := sdA.Day.Start() + 10_000
	stored := model.PartitionInfo{Key: sdA.Partition(0), Rows: 5, Bytes: 50, MinTS: start, MaxTS: start + 4, State: buckets.StateSingle}
	s := p.Load(sdA, []model.PartitionInfo{stored})
	if _, err := p.Place(s, start+5, 1, 10); err != nil {
		t.Fatal(err)
	}
	want := stored
	want.Rows, want.Bytes, want.MaxTS = 6, 60, start+5
	if e := takeOne(t, p); e != want {
		t.Fatalf("first entry after the load = %+v, want the exact %+v", e, want)
	}
	if _, err := p.Place(s, start+6, 1, 10); err != nil {
		t.Fatal(err)
	}
	if e := takeOne(t, p); !e.Ahead || e.Rows != 17 {
		t.Fatalf("second entry = %+v, want a claim of 17 rows", e)
	}
}

// SettleSeries settles the named series-days only, idle or not.
func TestSettleSeries(t *testing.T) {
	p := buckets.New(reserveConfig())
	sdB := model.SeriesDay{Kind: model.KindReadings, Tenant: "t", Series: "dev-b", Day: sdA.Day}
	held := []*buckets.Series{p.Load(sdA, nil), p.Load(sdB, nil)}
	// Two rounds: the first entries are exact, the second ones run ahead.
	for range 2 {
		for _, s := range held {
			if _, err := p.Place(s, sdA.Day.Start()+5, 1, 10); err != nil {
				t.Fatal(err)
			}
		}
		p.TakeDirty()
	}
	got := p.SettleSeries([]model.SeriesDay{sdA})
	if len(got) != 1 || got[0].Info.Key.SeriesDay() != sdA || got[0].Info.Rows != 2 {
		t.Fatalf("SettleSeries(sdA) = %+v, want sdA's exact entry only", got)
	}
	if again := p.SettleSeries([]model.SeriesDay{sdA}); len(again) != 0 {
		t.Fatalf("second SettleSeries(sdA) = %+v, want nothing", again)
	}
	if rest := p.Settle(true); len(rest) != 1 || rest[0].Info.Key.SeriesDay() != sdB {
		t.Fatalf("Settle(true) after it = %+v, want sdB's entry", rest)
	}
}

// A series-day written once (a quiet device, or one of a fleet larger than
// MaxSeriesDays) gets an exact entry, so it can be forgotten as soon as its
// commit landed: the planner stays within MaxSeriesDays without waiting for
// a settle, and writes one entry per partition, not a claim and its settle.
func TestQuietSeriesDaysEvictWithoutSettle(t *testing.T) {
	cfg := reserveConfig()
	cfg.MaxSeriesDays = 10
	p := buckets.New(cfg)
	claimed := false
	for i := range 100 {
		sd := devDay(i)
		s := p.Load(sd, nil)
		if _, err := p.Place(s, sdA.Day.Start()+int64(i), 1, 10); err != nil {
			t.Fatal(err)
		}
		entries := p.TakeEntries(nil)
		if len(entries) != 1 {
			t.Fatalf("entries of %v = %+v, want one", sd, entries)
		}
		if e := entries[0].Info; (e.Ahead || e.Rows != 1) && !claimed {
			claimed = true
			t.Errorf("entry of %v = %+v, want it exact", sd, e)
		}
		p.Landed([]*buckets.Partition{entries[0].Part})
	}
	if p.Len() > cfg.MaxSeriesDays {
		t.Errorf("planner holds %d series-days after 100 quiet ones landed, more than %d", p.Len(), cfg.MaxSeriesDays)
	}
	settlesNothing(t, p, true, "after quiet series-days landed")
}

// SettleIdle settles a claim only once its partition had no row for the
// given number of calls; a row in between starts the count again.
func TestSettleIdleWaits(t *testing.T) {
	p := buckets.New(reserveConfig())
	s := p.Load(sdA, nil)
	ts := sdA.Day.Start() + 5
	for range 2 { // the exact entry, then a claim
		if _, err := p.Place(s, ts, 1, 10); err != nil {
			t.Fatal(err)
		}
		p.TakeDirty()
	}
	for call := range 3 {
		if got := p.SettleIdle(3); len(got) != 0 {
			t.Fatalf("call %d settled %+v before the partition was idle for 3 calls", call, got[0].Info)
		}
	}
	assign(t, p, sdA, unit{ts + 1, 1, 10}) // within the claim: no entry
	if got := p.TakeDirty(); len(got) != 0 {
		t.Fatalf("a row within the claim handed out %+v", got)
	}
	for call := range 3 {
		if got := p.SettleIdle(3); len(got) != 0 {
			t.Fatalf("call %d after a new row settled %+v", call, got[0].Info)
		}
	}
	got := p.SettleIdle(3)
	if len(got) != 1 || got[0].Info.Rows != 3 || got[0].Info.Ahead || got[0].Info.MaxTS != ts+1 {
		t.Fatalf("the fourth idle call settled %+v, want the exact entry of 3 rows", got)
	}
}

// What a device costs in catalogue entries, by how often it reports
// against the settling: one reporting more often than SettleIdle's wait
// claims once; one reporting less often pays at most an entry a row (an
// exact one), never a claim and its settle.
func TestEntriesByCadence(t *testing.T) {
	const rows, wait = 60, 3
	for _, tc := range []struct{ every, perRound int }{ // SettleIdle calls between rounds; rows a round
		{1, 1}, {2, 1}, {3, 1}, {4, 1}, {5, 1}, {10, 1}, {2, 2}, {5, 2}, {10, 3},
	} {
		every := tc.every
		t.Run(fmt.Sprintf("every=%d/rows=%d", every, tc.perRound), func(t *testing.T) {
			p := buckets.New(reserveConfig())
			s := p.Load(sdA, nil)
			entries := 0
			for i := range rows / tc.perRound {
				for j := range tc.perRound {
					ts := sdA.Day.Start() + int64(i)*60_000 + int64(j)
					if _, err := p.Place(s, ts, 1, 1); err != nil {
						t.Fatal(err)
					}
				}
				entries += len(p.TakeDirty())
				for range every {
					entries += len(p.SettleIdle(wait))
				}
			}
			// Rows of one byte: the claim's 10-row reserve binds.
			limit := 1 + (rows+9)/10
			if every > wait {
				limit = rows / tc.perRound // one a round
			}
			if entries > limit {
				t.Errorf("%d catalogue entries for %d rows, %d a round every %d settle calls; want at most %d", entries, rows, tc.perRound, every, limit)
			}
		})
	}
}

// An entry lost with a failed commit is written again by the next
// SettleIdle, however recently its partition was written.
func TestSettleIdleRewritesLost(t *testing.T) {
	p, pt := placedOnce(t)
	p.Unsave([]*buckets.Partition{pt})
	if got := p.SettleIdle(20); len(got) != 1 || got[0].Part != pt || got[0].Info.Rows != 1 {
		t.Fatalf("SettleIdle right after Unsave = %+v, want the lost entry", got)
	}
}

// placedOnce returns a planner with the reserve that placed one row in
// sdA and handed out its (exact) entry, and the row's partition.
func placedOnce(t *testing.T) (*buckets.Planner, *buckets.Partition) {
	t.Helper()
	p := buckets.New(reserveConfig())
	pt, err := p.Place(p.Load(sdA, nil), sdA.Day.Start()+5, 1, 10)
	if err != nil {
		t.Fatal(err)
	}
	p.TakeDirty()
	return p, pt
}
