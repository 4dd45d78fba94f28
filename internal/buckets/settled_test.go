package buckets_test

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/sluicehq/sluice/internal/buckets"
	"github.com/sluicehq/sluice/internal/model"
)

// catalogueStore stands in for the store: the entries a planner handed out,
// as committed, and how many series-days it was asked to read.
type catalogueStore struct {
	entries map[model.PartitionKey]model.PartitionInfo
	reads   int
}

func (c *catalogueStore) catalogue(sd model.SeriesDay) []model.PartitionInfo {
	c.reads++
	var out []model.PartitionInfo
	for k, pi := range c.entries {
		if k.SeriesDay() == sd {
			out = append(out, pi)
		}
	}
	slices.SortFunc(out, func(a, b model.PartitionInfo) int { return int(a.Key.Sub) - int(b.Key.Sub) })
	return out
}

// writeRound writes one reading of each series-day of sds through p as the
// sink does (resolve, reading the store only when told to; place; take the
// entries; commit them; report them landed) and returns the round's
// entries, sorted.
func writeRound(t *testing.T, p *buckets.Planner, st *catalogueStore, sds []model.SeriesDay, ts int64) []model.PartitionInfo {
	t.Helper()
	for _, sd := range sds {
		s, read := p.Resolve(sd)
		if read {
			s = p.Load(sd, st.catalogue(sd))
		}
		if _, err := p.Place(s, ts, 1, 10); err != nil {
			t.Fatal(err)
		}
	}
	es := p.TakeEntries(nil)
	var out []model.PartitionInfo
	var parts []*buckets.Partition
	for _, e := range es {
		st.entries[e.Info.Key] = e.Info
		out = append(out, e.Info)
		parts = append(parts, e.Part)
	}
	p.Landed(parts)
	slices.SortFunc(out, func(a, b model.PartitionInfo) int { return strings.Compare(a.Key.String(), b.Key.String()) })
	return out
}

// TestSettledMatchesCatalogue runs one random workload (many devices, some
// writing often enough to split, a planner holding few series-days, two
// days) through a planner that remembers forgotten series-days and one
// that reads the catalogue every time: they must hand out the same entries
// at every round, and the first must read less.
func TestSettledMatchesCatalogue(t *testing.T) {
	// Room for every series-day, and for a few (the rest spill).
	// With room for a few, a device's first write of the day still reads
	// nothing.
	for _, tc := range []struct {
		bound    int
		maxShare float64 // of the reads without
	}{{1000, 0.6}, {5, 0.9}} {
		t.Run(fmt.Sprintf("max_settled=%d", tc.bound), func(t *testing.T) { settledMatchesCatalogue(t, tc.bound, tc.maxShare) })
	}
}

func settledMatchesCatalogue(t *testing.T, bound int, maxShare float64) {
	cfg := buckets.Config{MaxRows: 8, MaxBytes: 1000, MaxSeriesDays: 4}
	withCfg := cfg
	withCfg.MaxSettled = bound
	with, without := buckets.New(withCfg), buckets.New(cfg)
	stWith := &catalogueStore{entries: map[model.PartitionKey]model.PartitionInfo{}}
	stWithout := &catalogueStore{entries: map[model.PartitionKey]model.PartitionInfo{}}
	rng := rand.New(rand.NewPCG(1, 2))
	day := model.Day(20_000)
	for round := range 400 {
		if round == 200 {
			day++ // the next day begins; yesterday's late rows go on
		}
		var sds []model.SeriesDay
		seen := map[model.SeriesDay]bool{}
		for range 1 + rng.IntN(5) {
			d := day
			if round >= 200 && rng.IntN(4) == 0 {
				d = day - 1
			}
			dev := rng.IntN(30)
			if rng.IntN(3) == 0 {
				dev = rng.IntN(3) // hot devices, which split
			}
			sd := model.SeriesDay{Kind: model.KindReadings, Tenant: "t", Series: fmt.Sprintf("dev-%d", dev), Day: d}
			if !seen[sd] {
				seen[sd] = true
				sds = append(sds, sd)
			}
		}
		for _, sd := range sds {
			if with.DayUnknown(sd.Day) {
				with.SetDay(sd.Day, dayEmpty(stWith, sd.Day))
			}
		}
		ts := day.Start() + int64(round)*1000
		got := writeRound(t, with, stWith, sds, ts)
		want := writeRound(t, without, stWithout, sds, ts)
		if diff := cmp.Diff(want, got); diff != "" {
			t.Fatalf("round %d: entries differ (-read every time +remembered):\n%s", round, diff)
		}
	}
	// The hot devices' series-days split, and theirs are read each time
	// (about half the reads here); a quiet device's is read at most once.
	if float64(stWith.reads) >= maxShare*float64(stWithout.reads) {
		t.Errorf("catalogue reads: %d with forgotten series-days remembered, %d without", stWith.reads, stWithout.reads)
	}
	t.Logf("catalogue reads: %d remembered, %d not; %d remembered at the end", stWith.reads, stWithout.reads, with.Settled())
}

func dayEmpty(st *catalogueStore, d model.Day) bool {
	for k := range st.entries {
		if k.Day == d {
			return false
		}
	}
	return true
}

func TestSettledResolve(t *testing.T) {
	day := model.Day(20_000)
	sd := func(dev string, d model.Day) model.SeriesDay {
		return model.SeriesDay{Kind: model.KindReadings, Tenant: "t", Series: dev, Day: d}
	}
	// forget writes a row of each series-day given and then enough others
	// that the planner (one series-day held) forgets them.
	forget := func(t *testing.T, p *buckets.Planner, st *catalogueStore, rows int, sds ...model.SeriesDay) {
		for range rows {
			writeRound(t, p, st, sds, day.Start()+1000)
		}
		for i := range 3 {
			writeRound(t, p, st, []model.SeriesDay{sd(fmt.Sprintf("other-%d", i), day)}, day.Start()+2000)
		}
	}
	// Each case forgets the devices of forgotten after rows rows each (on
	// a planner holding one series-day, remembering bound, on a day that
	// began empty), then does then, if set, and resolves resolve.
	a, b := sd("a", day), sd("b", day)
	cases := []struct {
		name      string
		bound     int
		perWriter bool
		rows      int
		forgotten []model.SeriesDay
		then      func(t *testing.T, p *buckets.Planner)
		resolve   model.SeriesDay
		wantRead  bool
	}{
		{name: "forgotten with one exact partition: restored", bound: 100, rows: 2, forgotten: []model.SeriesDay{a}, resolve: a},
		{name: "forgotten split: the catalogue is read", bound: 100, rows: 6, forgotten: []model.SeriesDay{a}, resolve: a, wantRead: true},
		{name: "never written on a day that began empty: nothing to read", bound: 100, rows: 1, forgotten: []model.SeriesDay{a}, resolve: sd("new", day)},
		{
			name: "day not known empty: the catalogue is read", bound: 100,
			then:    func(_ *testing.T, p *buckets.Planner) { p.SetDay(day+1, false) },
			resolve: sd("new", day+1), wantRead: true,
		},
		{
			name: "bound reached: what did not fit is read", bound: 1, rows: 1, forgotten: []model.SeriesDay{a, b},
			then: func(t *testing.T, p *buckets.Planner) {
				if n := p.Settled(); n != 1 {
					t.Errorf("%d series-days remembered, bound 1", n)
				}
			},
			resolve: b, wantRead: true,
		},
		{name: "bound reached: the day is still complete", bound: 1, rows: 1, forgotten: []model.SeriesDay{a, b}, resolve: sd("new", day)},
		{
			name: "unloaded: the catalogue is read", bound: 100, rows: 1, forgotten: []model.SeriesDay{a},
			then: func(_ *testing.T, p *buckets.Planner) {
				p.Load(sd("x", day), nil)
				p.Unload(sd("x", day))
			},
			resolve: sd("x", day), wantRead: true,
		},
		{
			name: "restored, then unloaded: the catalogue is read", bound: 100, rows: 1, forgotten: []model.SeriesDay{a},
			then: func(t *testing.T, p *buckets.Planner) {
				if _, read := p.Resolve(a); read {
					t.Fatal("not restored")
				}
				p.Unload(a)
			},
			resolve: a, wantRead: true,
		},
		{name: "several writers: nothing remembered", bound: 100, perWriter: true, rows: 2, forgotten: []model.SeriesDay{a}, resolve: a, wantRead: true},
		{
			name: "older than yesterday: forgotten for good", bound: 100, rows: 2, forgotten: []model.SeriesDay{a},
			then:    func(_ *testing.T, p *buckets.Planner) { p.SetDay(day+2, true) },
			resolve: a, wantRead: true,
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p := buckets.New(buckets.Config{MaxRows: 4, MaxBytes: 1000, MaxSeriesDays: 1, MaxSettled: tc.bound, PerWriterSingle: tc.perWriter})
			if p.DayUnknown(day) {
				p.SetDay(day, true)
			}
			st := &catalogueStore{entries: map[model.PartitionKey]model.PartitionInfo{}}
			if len(tc.forgotten) > 0 {
				forget(t, p, st, tc.rows, tc.forgotten...)
			}
			if tc.then != nil {
				tc.then(t, p)
			}
			resolve := tc.resolve
			if p.Lookup(resolve) != nil {
				t.Fatalf("%v is held: the case does not test what it says", resolve)
			}
			s, read := p.Resolve(resolve)
			if read != tc.wantRead {
				t.Fatalf("Resolve(%v): read %v, want %v", resolve, read, tc.wantRead)
			}
			if read {
				return
			}
			// The state restored places a row as one loaded from the
			// store would.
			ref := buckets.New(buckets.Config{MaxRows: 4, MaxBytes: 1000, MaxSeriesDays: 1})
			rs := ref.Load(resolve, st.catalogue(resolve))
			for _, c := range []struct {
				p *buckets.Planner
				s *buckets.Series
			}{{p, s}, {ref, rs}} {
				if _, err := c.p.Place(c.s, day.Start()+5000, 1, 10); err != nil {
					t.Fatal(err)
				}
			}
			got, want := p.TakeEntries(nil), ref.TakeEntries(nil)
			if len(got) != 1 || len(want) != 1 {
				t.Fatalf("entries: %d restored, %d loaded", len(got), len(want))
			}
			if diff := cmp.Diff(want[0].Info, got[0].Info); diff != "" {
				t.Errorf("entry (-loaded +restored):\n%s", diff)
			}
		})
	}
}

// A series-day loaded from the store while it is remembered (not expected:
// the sink restores what is remembered instead of reading it) drops its
// record, which no longer speaks for it, and forgetting it again records
// it once.
func TestSettledLoadDropsRecord(t *testing.T) {
	day := model.Day(20_000)
	p := buckets.New(buckets.Config{MaxRows: 4, MaxBytes: 1000, MaxSeriesDays: 1, MaxSettled: 100})
	p.SetDay(day, true)
	st := &catalogueStore{entries: map[model.PartitionKey]model.PartitionInfo{}}
	a := model.SeriesDay{Kind: model.KindReadings, Tenant: "t", Series: "a", Day: day}
	others := func(from int) {
		for i := from; i < from+3; i++ {
			writeRound(t, p, st, []model.SeriesDay{{Kind: model.KindReadings, Tenant: "t", Series: fmt.Sprintf("o-%d", i), Day: day}}, day.Start()+2000)
		}
	}
	writeRound(t, p, st, []model.SeriesDay{a}, day.Start()+1000)
	others(0)
	n := p.Settled()
	p.Load(a, st.catalogue(a))
	if got := p.Settled(); got != n-1 {
		t.Fatalf("remembered %d after loading a remembered series-day, want %d", got, n-1)
	}
	others(3)
	if p.Lookup(a) != nil {
		t.Fatal("a is still held")
	}
	if got := p.Settled(); got != n+3 {
		t.Errorf("remembered %d, want %d: a once, and the three others forgotten since", got, n+3)
	}
}

// A fleet that filled the bound yesterday still gets records today:
// yesterday's records go into yesterday's filter to make room, instead of
// holding the bound until tomorrow prunes yesterday.
func TestSettledTodayNotStarvedByYesterday(t *testing.T) {
	const devices = 20
	p := buckets.New(buckets.Config{MaxRows: 100, MaxBytes: 1 << 20, MaxSeriesDays: 2, MaxSettled: devices})
	st := &catalogueStore{entries: map[model.PartitionKey]model.PartitionInfo{}}
	day := model.Day(20_000)
	fleet := func(d model.Day) []model.SeriesDay {
		var out []model.SeriesDay
		for i := range devices {
			out = append(out, model.SeriesDay{Kind: model.KindReadings, Tenant: "t", Series: fmt.Sprintf("dev-%d", i), Day: d})
		}
		return out
	}
	var reads int
	for _, d := range []model.Day{day, day + 1} {
		if p.DayUnknown(d) {
			p.SetDay(d, dayEmpty(st, d))
		}
		for pass := range 3 {
			before := st.reads
			for _, sd := range fleet(d) {
				writeRound(t, p, st, []model.SeriesDay{sd}, d.Start()+int64(pass)*1000)
			}
			reads = st.reads - before
			t.Logf("day +%d, pass %d: %d catalogue reads, %d remembered", d-day, pass, reads, p.Settled())
		}
	}
	// The last pass of the second day: all but the series-days the planner
	// held when the pass began were restored.
	if reads > 2 {
		t.Errorf("the second day's third pass read %d of %d catalogues", reads, devices)
	}
	// Yesterday's series-days spilled: written again, they are read.
	before := st.reads
	writeRound(t, p, st, fleet(day)[5:6], day.Start()+9000)
	if st.reads != before+1 {
		t.Errorf("a series-day of yesterday, whose record made room: %d reads, want 1", st.reads-before)
	}
}

// Late rows of yesterday, after yesterday's records made room for
// today's, do not take slots back: each would have the next record of
// today sweep the whole table again.
func TestSettledLateRowsSweepOnce(t *testing.T) {
	const devices = 20
	p := buckets.New(buckets.Config{MaxRows: 100, MaxBytes: 1 << 20, MaxSeriesDays: 2, MaxSettled: devices})
	st := &catalogueStore{entries: map[model.PartitionKey]model.PartitionInfo{}}
	day := model.Day(20_000)
	sd := func(i int, d model.Day) model.SeriesDay {
		return model.SeriesDay{Kind: model.KindReadings, Tenant: "t", Series: fmt.Sprintf("dev-%d", i), Day: d}
	}
	for _, d := range []model.Day{day, day + 1} {
		p.SetDay(d, dayEmpty(st, d))
		for pass := range 2 {
			for i := range devices {
				writeRound(t, p, st, []model.SeriesDay{sd(i, d)}, d.Start()+int64(pass)*1000)
			}
		}
	}
	before := p.SettledSweeps()
	for i := range 10 {
		// A late row of yesterday between rows of today, which restore
		// records and forget others.
		writeRound(t, p, st, []model.SeriesDay{sd(i, day)}, day.Start()+5000)
		for j := range 3 {
			writeRound(t, p, st, []model.SeriesDay{sd((i+j)%devices, day+1)}, (day+1).Start()+5000)
		}
	}
	if n := p.SettledSweeps() - before; n > 1 {
		t.Errorf("%d sweeps of the remembered records for 10 late rows of yesterday, want at most 1", n)
	}
}
