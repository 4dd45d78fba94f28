package buckets_test

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/sluicehq/sluice/internal/buckets"
	"github.com/sluicehq/sluice/internal/model"
)

// unit is what one Assign places: the cells of one reading, or one event.
type unit struct {
	ts    int64
	rows  int64
	bytes int64
}

// placement records where the planner put a unit.
type placement struct {
	u  unit
	pk model.PartitionKey
}

var sdA = model.SeriesDay{Kind: model.KindReadings, Tenant: "t", Series: "dev-a", Day: 20_000}

// testConfig is small enough to split often. It is below the production
// minimum for MaxBytes, which New does not check.
func testConfig() buckets.Config {
	return buckets.Config{MaxRows: 10, MaxBytes: 1000, Writer: 3, MaxSeriesDays: 100}
}

func assign(t *testing.T, p *buckets.Planner, sd model.SeriesDay, u unit) model.PartitionKey {
	t.Helper()
	pk, err := p.Assign(sd, u.ts, u.rows, u.bytes)
	if err != nil {
		t.Fatalf("Assign(%v, ts %d, %d rows, %d bytes): %v", sd, u.ts, u.rows, u.bytes, err)
	}
	return pk
}

// run loads an empty catalogue for sd and assigns every unit.
func run(t *testing.T, cfg buckets.Config, sd model.SeriesDay, units []unit) ([]placement, []model.PartitionInfo) {
	t.Helper()
	p := buckets.New(cfg)
	p.Load(sd, nil)
	var log []placement
	for _, u := range units {
		log = append(log, placement{u, assign(t, p, sd, u)})
	}
	return log, sortedBySub(p.TakeDirty())
}

func sortedBySub(parts []model.PartitionInfo) []model.PartitionInfo {
	out := slices.Clone(parts)
	slices.SortFunc(out, func(a, b model.PartitionInfo) int {
		switch {
		case a.Key.Sub < b.Key.Sub:
			return -1
		case a.Key.Sub > b.Key.Sub:
			return 1
		}
		return 0
	})
	return out
}

func uniform(n int, rows, bytes int64) []unit {
	us := make([]unit, n)
	for i := range us {
		us[i] = unit{ts: sdA.Day.Start() + int64(i)*1000, rows: rows, bytes: bytes}
	}
	return us
}

func ceilDiv(a, b int64) int64 { return (a + b - 1) / b }

// checkFill checks the invariants of sequential fill on a placement log of
// one writer and the catalogue it produced: entries match what was placed,
// every partition is within the bounds, partitions are filled one after
// another (sub-bucket 0 first, then this writer's splits in sequence), every
// one but the last is closed, and each was closed only because the next
// unit did not fit.
func checkFill(t *testing.T, cfg buckets.Config, sd model.SeriesDay, log []placement, cat []model.PartitionInfo) {
	t.Helper()
	// Expected catalogue, from the log, in the order partitions were opened.
	var order []model.PartitionKey
	want := make(map[model.PartitionKey]*model.PartitionInfo)
	firstUnit := make(map[model.PartitionKey]unit)
	for i, pl := range log {
		pi, ok := want[pl.pk]
		if !ok {
			order = append(order, pl.pk)
			pi = &model.PartitionInfo{Key: pl.pk, MinTS: pl.u.ts, MaxTS: pl.u.ts}
			want[pl.pk] = pi
			firstUnit[pl.pk] = pl.u
		} else if order[len(order)-1] != pl.pk {
			t.Fatalf("unit %d went back to partition %v after it was left", i, pl.pk)
		}
		pi.Rows += pl.u.rows
		pi.Bytes += pl.u.bytes
		pi.MinTS = min(pi.MinTS, pl.u.ts)
		pi.MaxTS = max(pi.MaxTS, pl.u.ts)
	}
	for i, pk := range order {
		if pk.SeriesDay() != sd {
			t.Errorf("partition %v is not of series-day %v", pk, sd)
		}
		wantSub, wantState := uint32(0), buckets.StateSingle
		if i > 0 {
			wantSub, wantState = buckets.SubID(uint8(cfg.Writer), i), buckets.StateSplit
		}
		if pk.Sub != wantSub {
			t.Errorf("partition %d opened has sub %#x, want %#x", i, pk.Sub, wantSub)
		}
		pi := want[pk]
		pi.State = wantState
		pi.Closed = i < len(order)-1
	}
	var wantCat []model.PartitionInfo
	for _, pk := range order {
		wantCat = append(wantCat, *want[pk])
	}
	if diff := cmp.Diff(sortedBySub(wantCat), cat); diff != "" {
		t.Errorf("catalogue mismatch (-want +got):\n%s", diff)
	}
	for i, pi := range wantCat {
		if pi.Rows > cfg.MaxRows || pi.Bytes > cfg.MaxBytes {
			t.Errorf("partition %v holds %d rows, %d bytes: over the bound (%d rows, %d bytes)", pi.Key, pi.Rows, pi.Bytes, cfg.MaxRows, cfg.MaxBytes)
		}
		if i+1 < len(wantCat) {
			next := firstUnit[wantCat[i+1].Key]
			if pi.Rows+next.rows <= cfg.MaxRows && pi.Bytes+next.bytes <= cfg.MaxBytes {
				t.Errorf("partition %v (%d rows, %d bytes) was closed though the next unit (%d rows, %d bytes) fit", pi.Key, pi.Rows, pi.Bytes, next.rows, next.bytes)
			}
		}
	}
}

func TestQuietSeriesDay(t *testing.T) {
	cfg := testConfig()
	tests := []struct {
		name  string
		units []unit
	}{
		{"one row", []unit{{ts: sdA.Day.Start(), rows: 1, bytes: 30}}},
		{"one reading of many metrics", []unit{{ts: sdA.Day.End() - 1, rows: 10, bytes: 400}}},
		{"up to the row bound", uniform(10, 1, 30)},
		{"up to the byte bound", uniform(4, 1, 250)},
		{"out of order", []unit{{ts: sdA.Day.Start() + 500, rows: 2, bytes: 50}, {ts: sdA.Day.Start(), rows: 2, bytes: 50}, {ts: sdA.Day.End() - 1, rows: 2, bytes: 50}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			log, cat := run(t, cfg, sdA, tc.units)
			checkFill(t, cfg, sdA, log, cat)
			if len(cat) != 1 || cat[0].Key != sdA.Partition(0) || cat[0].State != buckets.StateSingle || cat[0].Closed {
				t.Errorf("catalogue = %+v, want one open single partition with sub 0", cat)
			}
		})
	}
}

func TestNoisySeriesDay(t *testing.T) {
	tests := []struct {
		name      string
		cfg       buckets.Config
		units     []unit
		wantParts int
	}{
		// Row bound binds, one-row units: every closed partition is full.
		{"rows, one-row units", buckets.Config{MaxRows: 10, MaxBytes: 1 << 20, Writer: 0, MaxSeriesDays: 10}, uniform(95, 1, 20), 10},
		{"rows, exact multiple", buckets.Config{MaxRows: 10, MaxBytes: 1 << 20, Writer: 1, MaxSeriesDays: 10}, uniform(100, 1, 20), 10},
		{"rows, one more than a multiple", buckets.Config{MaxRows: 10, MaxBytes: 1 << 20, Writer: 1, MaxSeriesDays: 10}, uniform(101, 1, 20), 11},
		// Readings of 3 cells are never split, so partitions hold 9 rows.
		{"rows, three-row readings", buckets.Config{MaxRows: 10, MaxBytes: 1 << 20, Writer: 2, MaxSeriesDays: 10}, uniform(30, 3, 60), 10},
		{"rows, bound a multiple of the reading", buckets.Config{MaxRows: 12, MaxBytes: 1 << 20, Writer: 2, MaxSeriesDays: 10}, uniform(30, 3, 60), 8},
		// Byte bound binds first.
		{"bytes, dividing unit", buckets.Config{MaxRows: 1000, MaxBytes: 1000, Writer: 255, MaxSeriesDays: 10}, uniform(95, 1, 100), 10},
		{"bytes, uneven unit", buckets.Config{MaxRows: 1000, MaxBytes: 1000, Writer: 7, MaxSeriesDays: 10}, uniform(100, 1, 30), 4},
		{"bytes before rows", buckets.Config{MaxRows: 20, MaxBytes: 1000, Writer: 7, MaxSeriesDays: 10}, uniform(60, 2, 200), 12},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			log, cat := run(t, tc.cfg, sdA, tc.units)
			checkFill(t, tc.cfg, sdA, log, cat)
			if len(cat) != tc.wantParts {
				t.Errorf("got %d partitions, want %d", len(cat), tc.wantParts)
			}
			var rows, bytes, unitRows, unitBytes int64
			for _, u := range tc.units {
				rows += u.rows
				bytes += u.bytes
				unitRows = max(unitRows, u.rows)
				unitBytes = max(unitBytes, u.bytes)
			}
			// The documented bound: every closed partition is within one
			// unit of full (valid as a max for units of one size).
			bound := max(ceilDiv(rows, tc.cfg.MaxRows-unitRows+1), ceilDiv(bytes, tc.cfg.MaxBytes-unitBytes+1))
			if int64(len(cat)) > bound {
				t.Errorf("%d partitions for %d rows, %d bytes: more than %d", len(cat), rows, bytes, bound)
			}
			if unitRows == 1 && tc.cfg.MaxBytes/unitBytes >= tc.cfg.MaxRows {
				if limit := ceilDiv(rows, tc.cfg.MaxRows); int64(len(cat)) > limit {
					t.Errorf("%d partitions for %d one-row units, want at most ceil(rows/MaxRows) = %d", len(cat), rows, limit)
				}
			}
			if tc.cfg.MaxBytes%unitBytes == 0 && tc.cfg.MaxRows*unitBytes >= tc.cfg.MaxBytes*unitRows {
				if limit := ceilDiv(bytes, tc.cfg.MaxBytes) + 1; int64(len(cat)) > limit {
					t.Errorf("%d partitions for %d bytes, want at most ceil(bytes/MaxBytes)+1 = %d", len(cat), bytes, limit)
				}
			}
		})
	}
}

func TestLateRowsWidenRange(t *testing.T) {
	cfg := testConfig()
	start := sdA.Day.Start()
	tests := []struct {
		name  string
		units []unit
		want  [][2]int64 // [MinTS, MaxTS] per partition, in sub order
	}{
		{
			name:  "late row in the single partition",
			units: []unit{{start + 100, 1, 10}, {start + 200, 1, 10}, {start + 50, 1, 10}},
			want:  [][2]int64{{start + 50, start + 200}},
		},
		{
			name:  "early row widens the max",
			units: []unit{{start + 100, 1, 10}, {start + 900, 1, 10}, {start + 300, 1, 10}},
			want:  [][2]int64{{start + 100, start + 900}},
		},
		{
			name: "late row goes to the open split, not the closed partition of its time",
			units: append(uniform(10, 1, 10), // fills sub 0 with ts start..start+9000
				unit{start + 20_000, 1, 10}, // opens split 1
				unit{start + 500, 1, 10},    // late: lands in split 1
			),
			want: [][2]int64{{start, start + 9000}, {start + 500, start + 20_000}},
		},
		{
			name: "range of a closed partition never changes",
			units: append(uniform(10, 1, 10),
				unit{start + 5, 1, 10}, unit{sdA.Day.End() - 1, 1, 10}, unit{start, 1, 10}),
			want: [][2]int64{{start, start + 9000}, {start, sdA.Day.End() - 1}},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			log, cat := run(t, cfg, sdA, tc.units)
			checkFill(t, cfg, sdA, log, cat)
			var got [][2]int64
			for _, pi := range cat {
				got = append(got, [2]int64{pi.MinTS, pi.MaxTS})
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("partition ranges mismatch (-want +got):\n%s", diff)
			}
			for _, pl := range log {
				i := slices.IndexFunc(cat, func(pi model.PartitionInfo) bool { return pi.Key == pl.pk })
				if !cat[i].Overlaps(pl.u.ts, pl.u.ts+1) {
					t.Errorf("row at %d is in %v, whose range [%d, %d] a reader would skip", pl.u.ts, pl.pk, cat[i].MinTS, cat[i].MaxTS)
				}
			}
		})
	}
}

func TestSubID(t *testing.T) {
	if _, _, ok := buckets.SplitSeq(0); ok {
		t.Errorf("SplitSeq(0) reports a split partition")
	}
	seen := map[uint32]string{0: "single"}
	for _, w := range []uint8{0, 1, 2, 128, 255} {
		for _, n := range []int{1, 2, 3, 255, 256, 65534, 65535} {
			sub := buckets.SubID(w, n)
			gw, gn, ok := buckets.SplitSeq(sub)
			if !ok || gw != w || gn != n {
				t.Errorf("SplitSeq(SubID(%d, %d) = %#x) = %d, %d, %v; want %d, %d, true", w, n, sub, gw, gn, ok, w, n)
			}
			name := fmt.Sprintf("writer %d split %d", w, n)
			if other, dup := seen[sub]; dup {
				t.Errorf("SubID of %s = %#x, same as %s", name, sub, other)
			}
			seen[sub] = name
		}
	}
}

// TestWritersDisjoint has two writers split the same series-day, as two
// gateways would, each starting from the catalogue after sub-bucket 0 closed.
func TestWritersDisjoint(t *testing.T) {
	closed := []model.PartitionInfo{{Key: sdA.Partition(0), Rows: 10, Bytes: 100, MinTS: sdA.Day.Start(), MaxTS: sdA.Day.Start(), State: buckets.StateSingle, Closed: true}}
	subs := make(map[uint32]int)
	for _, w := range []int{0, 1, 200} {
		cfg := testConfig()
		cfg.Writer = w
		p := buckets.New(cfg)
		p.Load(sdA, closed)
		for _, u := range uniform(45, 1, 10) {
			pk := assign(t, p, sdA, u)
			gw, _, ok := buckets.SplitSeq(pk.Sub)
			if !ok || int(gw) != w {
				t.Fatalf("writer %d placed a row in %v (sub %#x), not one of its splits", w, pk, pk.Sub)
			}
		}
		for _, pi := range p.TakeDirty() {
			if pi.Key.Sub != 0 {
				subs[pi.Key.Sub]++
			}
		}
	}
	if len(subs) != 15 {
		t.Errorf("3 writers opened %d distinct splits, want 15: %v", len(subs), subs)
	}
}

func TestLoad(t *testing.T) {
	cfg := testConfig()
	w := uint8(cfg.Writer)
	other := uint8(9)
	day := sdA.Day.Start()
	entry := func(sub uint32, rows int64, closed bool) model.PartitionInfo {
		state := buckets.StateSplit
		if sub == 0 {
			state = buckets.StateSingle
		}
		return model.PartitionInfo{Key: sdA.Partition(sub), Rows: rows, Bytes: rows * 10, MinTS: day, MaxTS: day + rows, State: state, Closed: closed}
	}
	tests := []struct {
		name      string
		cat       []model.PartitionInfo
		wantFirst uint32 // partition of the next row
		wantNext  uint32 // partition opened when that one fills
	}{
		{"empty", nil, 0, buckets.SubID(w, 1)},
		{"single open", []model.PartitionInfo{entry(0, 3, false)}, 0, buckets.SubID(w, 1)},
		{"single full but open", []model.PartitionInfo{entry(0, 10, false)}, buckets.SubID(w, 1), buckets.SubID(w, 2)},
		{"single closed", []model.PartitionInfo{entry(0, 9, true)}, buckets.SubID(w, 1), buckets.SubID(w, 2)},
		{
			"newest own split",
			[]model.PartitionInfo{entry(0, 10, true), entry(buckets.SubID(w, 1), 10, true), entry(buckets.SubID(w, 2), 4, false)},
			buckets.SubID(w, 2), buckets.SubID(w, 3),
		},
		{
			"closed newest split is never reused",
			[]model.PartitionInfo{entry(0, 10, true), entry(buckets.SubID(w, 1), 4, false), entry(buckets.SubID(w, 2), 10, true)},
			buckets.SubID(w, 1), buckets.SubID(w, 3),
		},
		{
			"every own split closed",
			[]model.PartitionInfo{entry(0, 10, true), entry(buckets.SubID(w, 1), 10, true), entry(buckets.SubID(w, 5), 10, true)},
			buckets.SubID(w, 6), buckets.SubID(w, 7),
		},
		{
			"other writer's open split is not ours",
			[]model.PartitionInfo{entry(0, 10, true), entry(buckets.SubID(other, 1), 2, false)},
			buckets.SubID(w, 1), buckets.SubID(w, 2),
		},
		{
			"other writer's higher seq does not move ours",
			[]model.PartitionInfo{entry(0, 10, true), entry(buckets.SubID(w, 2), 10, true), entry(buckets.SubID(other, 40), 2, false)},
			buckets.SubID(w, 3), buckets.SubID(w, 4),
		},
		{
			"own split preferred to an open single",
			[]model.PartitionInfo{entry(0, 5, false), entry(buckets.SubID(w, 1), 5, false)},
			buckets.SubID(w, 1), buckets.SubID(w, 2),
		},
		{
			"other writer's open split with a higher id",
			[]model.PartitionInfo{entry(0, 10, true), entry(buckets.SubID(255, 3), 1, false)},
			buckets.SubID(w, 1), buckets.SubID(w, 2),
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := buckets.New(cfg)
			p.Load(sdA, tc.cat)
			if !p.Known(sdA) {
				t.Fatalf("Known after Load = false")
			}
			first := assign(t, p, sdA, unit{day + 1, 1, 10})
			if first.Sub != tc.wantFirst {
				t.Errorf("first row went to sub %#x, want %#x", first.Sub, tc.wantFirst)
			}
			// Fill until the planner moves on.
			var next model.PartitionKey
			for range cfg.MaxRows + 1 {
				if next = assign(t, p, sdA, unit{day + 2, 1, 10}); next != first {
					break
				}
			}
			if next.Sub != tc.wantNext {
				t.Errorf("after the first partition filled, rows went to sub %#x, want %#x", next.Sub, tc.wantNext)
			}
			// The entries handed back for the loaded partitions start from
			// the loaded counts.
			for _, pi := range p.TakeDirty() {
				i := slices.IndexFunc(tc.cat, func(c model.PartitionInfo) bool { return c.Key == pi.Key })
				if i >= 0 && pi.Rows < tc.cat[i].Rows {
					t.Errorf("entry %v has %d rows, fewer than the %d loaded", pi.Key, pi.Rows, tc.cat[i].Rows)
				}
				if i >= 0 && tc.cat[i].Closed {
					t.Errorf("closed partition %v changed", pi.Key)
				}
			}
		})
	}
}

func TestSplitsExhausted(t *testing.T) {
	cfg := testConfig()
	w := uint8(cfg.Writer)
	cat := []model.PartitionInfo{
		{Key: sdA.Partition(0), Rows: 10, Closed: true, State: buckets.StateSingle},
		{Key: sdA.Partition(buckets.SubID(w, 65535)), Rows: 10, Closed: true, State: buckets.StateSplit},
	}
	p := buckets.New(cfg)
	p.Load(sdA, cat)
	_, err := p.Assign(sdA, sdA.Day.Start(), 1, 10)
	if !errors.Is(err, buckets.ErrSplitsExhausted) {
		t.Errorf("Assign with every split id used = %v, want ErrSplitsExhausted", err)
	}
}

func TestAssignUnloaded(t *testing.T) {
	p := buckets.New(testConfig())
	if _, err := p.Assign(sdA, sdA.Day.Start(), 1, 10); err == nil {
		t.Errorf("Assign to a series-day never loaded succeeded")
	}
}

func TestTakeDirty(t *testing.T) {
	cfg := testConfig()
	start := sdA.Day.Start()
	sdB := model.SeriesDay{Kind: model.KindAudit, Tenant: "t", Series: "dev-a", Day: sdA.Day}
	type step struct {
		sd    model.SeriesDay
		units int
	}
	tests := []struct {
		name  string
		steps []step
		want  []model.PartitionInfo
	}{
		{"nothing assigned", nil, nil},
		{
			"one entry however many rows",
			[]step{{sdA, 7}},
			[]model.PartitionInfo{{Key: sdA.Partition(0), Rows: 7, Bytes: 70, MinTS: start, MaxTS: start + 6, State: buckets.StateSingle}},
		},
		{
			"closed entry and the split it opened",
			[]step{{sdA, 13}},
			[]model.PartitionInfo{
				{Key: sdA.Partition(0), Rows: 10, Bytes: 100, MinTS: start, MaxTS: start + 9, State: buckets.StateSingle, Closed: true},
				{Key: sdA.Partition(buckets.SubID(3, 1)), Rows: 3, Bytes: 30, MinTS: start + 10, MaxTS: start + 12, State: buckets.StateSplit},
			},
		},
		{
			"partition filled exactly is not closed yet",
			[]step{{sdA, 10}},
			[]model.PartitionInfo{{Key: sdA.Partition(0), Rows: 10, Bytes: 100, MinTS: start, MaxTS: start + 9, State: buckets.StateSingle}},
		},
		{
			"two series-days",
			[]step{{sdA, 2}, {sdB, 1}, {sdA, 1}},
			[]model.PartitionInfo{
				{Key: sdA.Partition(0), Rows: 3, Bytes: 30, MinTS: start, MaxTS: start + 3, State: buckets.StateSingle},
				{Key: sdB.Partition(0), Rows: 1, Bytes: 10, MinTS: start + 2, MaxTS: start + 2, State: buckets.StateSingle},
			},
		},
	}
	less := func(a, b model.PartitionInfo) int { return strings.Compare(a.Key.String(), b.Key.String()) }
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := buckets.New(cfg)
			p.Load(sdA, nil)
			p.Load(sdB, nil)
			ts := start
			for _, s := range tc.steps {
				for range s.units {
					assign(t, p, s.sd, unit{ts, 1, 10})
					ts++
				}
			}
			got := p.TakeDirty()
			slices.SortFunc(got, less)
			want := slices.Clone(tc.want)
			slices.SortFunc(want, less)
			if diff := cmp.Diff(want, got, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("TakeDirty mismatch (-want +got):\n%s", diff)
			}
			if again := p.TakeDirty(); len(again) != 0 {
				t.Errorf("second TakeDirty = %v, want nothing", again)
			}
			if len(got) == 0 {
				return
			}
			// The entries are copies: changing them changes nothing.
			before := make(map[model.PartitionKey]int64)
			for i := range got {
				before[got[i].Key] = got[i].Rows
				got[i].Rows = -1
			}
			pk := assign(t, p, got[len(got)-1].Key.SeriesDay(), unit{ts, 1, 10})
			for _, pi := range p.TakeDirty() {
				want, ok := before[pi.Key]
				if pi.Key == pk {
					want++
				}
				if ok && pi.Rows != want {
					t.Errorf("entry %v has %d rows after its copy was changed, want %d", pi.Key, pi.Rows, want)
				}
			}
		})
	}
}

// TestLoadNeverEvictsTheRound loads more series-days than MaxSeriesDays in
// one round, as the sink does for a batch, and assigns to all of them.
func TestLoadNeverEvictsTheRound(t *testing.T) {
	cfg := testConfig()
	cfg.MaxSeriesDays = 2
	p := buckets.New(cfg)
	var sds []model.SeriesDay
	for i := range 7 {
		sd := model.SeriesDay{Kind: model.KindReadings, Tenant: "t", Series: fmt.Sprintf("dev-%d", i), Day: sdA.Day}
		sds = append(sds, sd)
		p.Load(sd, nil)
	}
	for _, sd := range sds {
		for range 12 {
			assign(t, p, sd, unit{sd.Day.Start(), 1, 10})
		}
	}
	es := p.TakeEntries(nil)
	if len(es) != 2*len(sds) {
		t.Errorf("TakeEntries returned %d entries, want %d", len(es), 2*len(sds))
	}
	if p.Len() != len(sds) {
		t.Errorf("with their entries in flight, the planner holds %d series-days, want all %d", p.Len(), len(sds))
	}
	rows := make(map[model.SeriesDay]int64)
	var landed []*buckets.Partition
	for _, e := range es {
		rows[e.Info.Key.SeriesDay()] += e.Info.Rows
		landed = append(landed, e.Part)
	}
	p.Landed(landed)
	for _, sd := range sds {
		if rows[sd] != 12 {
			t.Errorf("entries of %v hold %d rows, want 12", sd, rows[sd])
		}
	}
	if p.Len() > cfg.MaxSeriesDays {
		t.Errorf("after Landed the planner holds %d series-days, more than MaxSeriesDays %d", p.Len(), cfg.MaxSeriesDays)
	}
}

// TestEvictionKeepsDirtyEntries forgets and evicts series-days whose entries
// were not yet taken; the entries must still be handed back, and a
// series-day reloaded from them resumes where it was.
func TestEvictionKeepsDirtyEntries(t *testing.T) {
	cfg := testConfig()
	cfg.MaxSeriesDays = 3
	p := buckets.New(cfg)
	catalogue := make(map[model.SeriesDay][]model.PartitionInfo)
	sd := func(i int) model.SeriesDay {
		return model.SeriesDay{Kind: model.KindReadings, Tenant: "t", Series: fmt.Sprintf("dev-%d", i), Day: sdA.Day}
	}
	persist := func() {
		es := p.TakeEntries(nil)
		defer func() {
			for _, e := range es {
				p.Landed([]*buckets.Partition{e.Part})
			}
		}()
		for _, e := range es {
			pi := e.Info
			k := pi.Key.SeriesDay()
			i := slices.IndexFunc(catalogue[k], func(c model.PartitionInfo) bool { return c.Key == pi.Key })
			if i < 0 {
				catalogue[k] = append(catalogue[k], pi)
			} else {
				catalogue[k][i] = pi
			}
		}
	}
	written := make(map[model.SeriesDay]int64)
	for round := range 6 {
		for i := range 5 {
			s := sd((round + i) % 8)
			if !p.Known(s) {
				p.Load(s, sortedBySub(catalogue[s]))
			}
			for range 7 {
				assign(t, p, s, unit{s.Day.Start() + int64(round), 1, 10})
				written[s]++
			}
			if i == 2 {
				p.Forget(s) // dirty, then dropped before TakeDirty
			}
		}
		persist()
		if p.Len() > cfg.MaxSeriesDays {
			t.Errorf("round %d: planner holds %d series-days, more than %d", round, p.Len(), cfg.MaxSeriesDays)
		}
	}
	for s, n := range written {
		var rows int64
		opened := make(map[uint32]bool)
		for _, pi := range catalogue[s] {
			rows += pi.Rows
			if pi.Rows > cfg.MaxRows {
				t.Errorf("%v holds %d rows, over the bound", pi.Key, pi.Rows)
			}
			opened[pi.Key.Sub] = true
		}
		if rows != n {
			t.Errorf("catalogue of %v counts %d rows, %d were assigned", s, rows, n)
		}
		if want := int(ceilDiv(n, cfg.MaxRows)); len(opened) != want {
			t.Errorf("%v has %d partitions for %d rows, want %d", s, len(opened), n, want)
		}
	}
}

func TestValidate(t *testing.T) {
	tests := []struct {
		name string
		edit func(*buckets.Config)
		want []string // substrings of the error; none means valid
	}{
		{"defaults", func(*buckets.Config) {}, nil},
		{"smallest", func(c *buckets.Config) { c.MaxRows, c.MaxBytes, c.Writer, c.MaxSeriesDays = 1, 64<<10, 255, 1 }, nil},
		{"zero rows", func(c *buckets.Config) { c.MaxRows = 0 }, []string{"buckets.max_rows", "got 0"}},
		{"small bytes", func(c *buckets.Config) { c.MaxBytes = 1000 }, []string{"buckets.max_bytes", "65536", "got 1000"}},
		{"negative writer", func(c *buckets.Config) { c.Writer = -1 }, []string{"buckets.writer_id", "0..255", "got -1"}},
		{"large writer", func(c *buckets.Config) { c.Writer = 256 }, []string{"buckets.writer_id", "got 256"}},
		{"zero series-days", func(c *buckets.Config) { c.MaxSeriesDays = 0 }, []string{"buckets.max_series_days", "got 0"}},
		{"remembering off", func(c *buckets.Config) { c.MaxSettled = -1 }, nil},
		{"remembered below -1", func(c *buckets.Config) { c.MaxSettled = -2 }, []string{"buckets.max_settled_series_days", "got -2"}},
		{
			"every error at once",
			func(c *buckets.Config) { *c = buckets.Config{Writer: 300} },
			[]string{"buckets.max_rows", "buckets.max_bytes", "buckets.writer_id", "buckets.max_series_days"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg := buckets.DefaultConfig()
			tc.edit(&cfg)
			err := cfg.Validate()
			if len(tc.want) == 0 {
				if err != nil {
					t.Errorf("Validate() = %v, want nil", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("Validate() = nil, want an error naming %q", tc.want)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("Validate() = %q, want it to mention %q", err, w)
				}
			}
		})
	}
}

// TestRandomStreams feeds random streams of units to a planner over several
// series-days, with rounds persisted to a catalogue and restarts that load
// from it (sometimes losing the round not yet persisted, as a crash before
// commit would), and checks the fill invariants on what was persisted.
func TestRandomStreams(t *testing.T) {
	for seed := range uint64(40) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, 0x5eed))
			cfg := buckets.Config{
				MaxRows:       int64(4 + rng.IntN(30)),
				MaxBytes:      int64(300 + rng.IntN(2000)),
				Writer:        rng.IntN(256),
				MaxSeriesDays: 1 + rng.IntN(3),
			}
			maxUnitRows := 1 + rng.Int64N(min(cfg.MaxRows, 5))
			maxUnitBytes := 20 + rng.Int64N(cfg.MaxBytes/4)
			var sds []model.SeriesDay
			for i := range 4 {
				sds = append(sds, model.SeriesDay{Kind: model.Kind(1 + i%2), Tenant: "t", Series: fmt.Sprint("s", i), Day: model.Day(rng.IntN(3) - 1)})
			}
			catalogue := make(map[model.PartitionKey]model.PartitionInfo)
			committed := make(map[model.SeriesDay][]placement)
			var pending []placement
			p := buckets.New(cfg)
			load := func(sd model.SeriesDay) {
				var parts []model.PartitionInfo
				for _, pi := range catalogue {
					if pi.Key.SeriesDay() == sd {
						parts = append(parts, pi)
					}
				}
				p.Load(sd, sortedBySub(parts))
			}
			persist := func() {
				for _, pi := range p.TakeDirty() {
					catalogue[pi.Key] = pi
				}
				for _, pl := range pending {
					sd := pl.pk.SeriesDay()
					committed[sd] = append(committed[sd], pl)
				}
				pending = pending[:0]
			}
			for range 600 {
				switch r := rng.IntN(100); {
				case r < 8:
					persist()
				case r < 10:
					persist()
					p = buckets.New(cfg)
				case r < 11:
					p.TakeDirty() // lost: a crash before the commit
					pending = pending[:0]
					p = buckets.New(cfg)
				default:
					sd := sds[rng.IntN(len(sds))]
					if !p.Known(sd) {
						load(sd)
					}
					u := unit{ts: sd.Day.Start() + rng.Int64N(model.MillisPerDay), rows: 1 + rng.Int64N(maxUnitRows), bytes: 1 + rng.Int64N(maxUnitBytes)}
					pending = append(pending, placement{u, assign(t, p, sd, u)})
				}
			}
			persist()
			for _, sd := range sds {
				log := committed[sd]
				var cat []model.PartitionInfo
				var rows, bytes int64
				for _, pi := range catalogue {
					if pi.Key.SeriesDay() == sd {
						cat = append(cat, pi)
					}
				}
				for _, pl := range log {
					rows += pl.u.rows
					bytes += pl.u.bytes
				}
				checkFill(t, cfg, sd, log, sortedBySub(cat))
				bound := ceilDiv(rows, cfg.MaxRows-maxUnitRows+1) + ceilDiv(bytes, cfg.MaxBytes-maxUnitBytes+1) + 1
				if int64(len(cat)) > bound {
					t.Errorf("%v: %d partitions for %d rows, %d bytes, more than %d", sd, len(cat), rows, bytes, bound)
				}
			}
		})
	}
}

// TestEvictionLooksOnlyAtIdleSeriesDays holds a planner far above
// MaxSeriesDays with every entry in flight: rounds then cost nothing
// (eviction looks at no series-day until one is released), and once the
// entries land, eviction gets back under the bound, oldest first.
func TestEvictionLooksOnlyAtIdleSeriesDays(t *testing.T) {
	cfg := testConfig()
	cfg.MaxSeriesDays = 100
	p := buckets.New(cfg)
	const n = 5000
	for i := range n {
		sd := model.SeriesDay{Kind: model.KindReadings, Tenant: "t", Series: fmt.Sprintf("dev-%05d", i), Day: sdA.Day}
		p.Load(sd, nil)
		assign(t, p, sd, unit{sd.Day.Start(), 1, 10})
	}
	es := p.TakeEntries(nil) // every series-day has an entry in flight
	if p.Len() != n {
		t.Fatalf("the planner holds %d series-days, want all %d (their entries are in flight)", p.Len(), n)
	}
	before := p.EvictChecks()
	for range 100 {
		p.TakeEntries(nil)
		p.Landed(nil)
	}
	if got := p.EvictChecks() - before; got != 0 {
		t.Errorf("100 rounds with nothing released looked at %d series-days, want 0", got)
	}
	// The first half lands: those series-days go, and only those are looked
	// at.
	var half []*buckets.Partition
	for _, e := range es[:n/2] {
		half = append(half, e.Part)
	}
	p.Landed(half)
	if got := p.Len(); got != n/2 {
		t.Errorf("after half landed the planner holds %d series-days, want %d (the other half still in flight)", got, n/2)
	}
	if checks := p.EvictChecks() - before; checks > n/2 {
		t.Errorf("eviction looked at %d series-days to forget at most %d", checks, n/2)
	}
	if !p.Known(model.SeriesDay{Kind: model.KindReadings, Tenant: "t", Series: fmt.Sprintf("dev-%05d", n-1), Day: sdA.Day}) {
		t.Error("a series-day with its entry in flight was forgotten")
	}
	var rest []*buckets.Partition
	for _, e := range es[n/2:] {
		rest = append(rest, e.Part)
	}
	p.Landed(rest)
	if p.Len() > cfg.MaxSeriesDays {
		t.Errorf("once every entry landed the planner holds %d series-days, more than %d", p.Len(), cfg.MaxSeriesDays)
	}
}

// A series-day loaded again replaces its state; evicting the replaced
// state's place in the idle queue must not drop the new one, which holds
// an entry in flight.
func TestLoadAgainKeepsNewState(t *testing.T) {
	cfg := buckets.DefaultConfig()
	cfg.MaxSeriesDays = 1
	p := buckets.New(cfg)
	sd := model.SeriesDay{Kind: model.KindReadings, Tenant: "t", Series: "a", Day: 20_000}
	p.Load(sd, nil)
	s2 := p.Load(sd, nil)
	if p.Len() != 1 {
		t.Errorf("%d series-days held after loading one twice, want 1", p.Len())
	}
	if _, err := p.Place(s2, sd.Day.Start(), 1, 10); err != nil {
		t.Fatal(err)
	}
	p.Load(model.SeriesDay{Kind: model.KindReadings, Tenant: "t", Series: "b", Day: 20_000}, nil)
	if es := p.TakeEntries(nil); len(es) != 1 { // evicts, oldest first: the replaced state first
		t.Fatalf("%d entries, want s2's one", len(es))
	}
	if got := p.Lookup(sd); got != s2 {
		t.Fatalf("Lookup after eviction = %p, want the state with an entry in flight %p", got, s2)
	}
}
