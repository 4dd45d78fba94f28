package rollup

import (
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/sluicehq/sluice/internal/model"
)

var t0 = time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC) // a minute boundary

func ms(d time.Duration) int64 { return t0.Add(d).UnixMilli() }

// step is one action against an Aggregator: add rows at a time, or advance.
type step struct {
	at     time.Duration // since t0
	device string
	rows   []model.ReadingRow
	flush  bool
	want   []Row // rows emitted by Advance (or Flush) at this step; Version and Part ignored
}

func row(metric string, ts time.Duration, v float64) model.ReadingRow {
	return model.ReadingRow{TS: ms(ts), Metric: metric, Value: v}
}

func agg(device, metric string, minute time.Duration, count uint64, sum, mn, mx float64, first, last time.Duration, fv, lv float64) Row {
	return Row{Key: Key{Tenant: "t", Device: device, Metric: metric, Minute: ms(minute)}, Count: count, Sum: sum, Min: mn, Max: mx,
		FirstTS: ms(first), FirstValue: fv, LastTS: ms(last), LastValue: lv}
}

func TestAggregator(t *testing.T) {
	cfg := Config{AllowedLateness: 30 * time.Second, KeepClosed: 2 * time.Minute, MaxWindows: 1000, Writer: 3}
	tests := []struct {
		name  string
		cfg   Config
		steps []step
	}{
		{
			name: "window emitted once it closes, not before",
			steps: []step{
				{at: 10 * time.Second, device: "d", rows: []model.ReadingRow{row("temp", 0, 1), row("temp", 20*time.Second, 4), row("temp", 40*time.Second, 2.5)}},
				{at: 75 * time.Second},
				{at: 90 * time.Second, want: []Row{agg("d", "temp", 0, 3, 7.5, 1, 4, 0, 40*time.Second, 1, 2.5)}},
				{at: 200 * time.Second},
			},
		},
		{
			name: "a retried row is counted once, out-of-order rows sorted",
			steps: []step{
				{at: time.Second, device: "d", rows: []model.ReadingRow{row("p", 30*time.Second, 5), row("p", 10*time.Second, -1)}},
				{at: 2 * time.Second, device: "d", rows: []model.ReadingRow{row("p", 30*time.Second, 5), row("p", 10*time.Second, -1)}},
				{at: 95 * time.Second, want: []Row{agg("d", "p", 0, 2, 4, -1, 5, 10*time.Second, 30*time.Second, -1, 5)}},
			},
		},
		{
			name: "a late row re-emits the whole window",
			steps: []step{
				{at: time.Second, device: "d", rows: []model.ReadingRow{row("p", 0, 1), row("p", time.Second, 2)}},
				{at: 95 * time.Second, want: []Row{agg("d", "p", 0, 2, 3, 1, 2, 0, time.Second, 1, 2)}},
				{at: 100 * time.Second, device: "d", rows: []model.ReadingRow{row("p", 59*time.Second, 10)}},
				{at: 101 * time.Second, want: []Row{agg("d", "p", 0, 3, 13, 1, 10, 0, 59*time.Second, 1, 10)}},
				{at: 102 * time.Second},
			},
		},
		{
			name: "a changed value replaces the old one",
			steps: []step{
				{at: time.Second, device: "d", rows: []model.ReadingRow{row("p", 0, 1), row("p", 5*time.Second, 2)}},
				{at: 2 * time.Second, device: "d", rows: []model.ReadingRow{row("p", 0, 7)}},
				{at: 91 * time.Second, want: []Row{agg("d", "p", 0, 2, 9, 2, 7, 0, 5*time.Second, 7, 2)}},
			},
		},
		{
			name: "metrics and devices are separate windows",
			steps: []step{
				{at: time.Second, device: "a", rows: []model.ReadingRow{row("x", 0, 1), row("y", 0, 2), row("x", 61*time.Second, 3)}},
				{at: 2 * time.Second, device: "b", rows: []model.ReadingRow{row("x", 0, 4)}},
				{at: 91 * time.Second, want: []Row{
					agg("a", "x", 0, 1, 1, 1, 1, 0, 0, 1, 1),
					agg("a", "y", 0, 1, 2, 2, 2, 0, 0, 2, 2),
					agg("b", "x", 0, 1, 4, 4, 4, 0, 0, 4, 4),
				}},
				{at: 151 * time.Second, want: []Row{agg("a", "x", time.Minute, 1, 3, 3, 3, 61*time.Second, 61*time.Second, 3, 3)}},
			},
		},
		{
			name: "a row later than keep_closed starts a new part with only that row",
			steps: []step{
				{at: time.Second, device: "d", rows: []model.ReadingRow{row("p", 0, 1)}},
				{at: 91 * time.Second, want: []Row{agg("d", "p", 0, 1, 1, 1, 1, 0, 0, 1, 1)}},
				{at: 300 * time.Second},
				{at: 301 * time.Second, device: "d", rows: []model.ReadingRow{row("p", 2*time.Second, 8)}},
				{at: 302 * time.Second, want: []Row{agg("d", "p", 0, 1, 8, 8, 8, 2*time.Second, 2*time.Second, 8, 8)}},
			},
		},
		{
			name: "flush emits open windows",
			steps: []step{
				{at: time.Second, device: "d", rows: []model.ReadingRow{row("p", 0, 1)}},
				{at: 2 * time.Second, flush: true, want: []Row{agg("d", "p", 0, 1, 1, 1, 1, 0, 0, 1, 1)}},
				{at: 3 * time.Second, flush: true},
			},
		},
		{
			name: "over max_windows the oldest open window is emitted early and dropped",
			cfg:  Config{AllowedLateness: time.Minute, KeepClosed: time.Minute, MaxWindows: 1, Writer: 3},
			steps: []step{
				{at: time.Second, device: "d", rows: []model.ReadingRow{row("p", 0, 1), row("p", 61*time.Second, 2)}},
				{at: 2 * time.Second, want: []Row{agg("d", "p", 0, 1, 1, 1, 1, 0, 0, 1, 1)}},
				{at: 3 * time.Second},
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := cfg
			if tc.cfg.MaxWindows != 0 {
				c = tc.cfg
			}
			a := New(c, t0)
			var lastVer uint64
			for i, s := range tc.steps {
				now := t0.Add(s.at)
				var got []Row
				switch {
				case s.rows != nil:
					a.Add(now, "t", s.device, s.rows)
					continue
				case s.flush:
					got = a.Flush(now)
				default:
					got = a.Advance(now)
				}
				stepMax := lastVer
				for _, r := range got {
					if r.Version <= lastVer {
						t.Errorf("step %d: version %d not above the previous step's %d", i, r.Version, lastVer)
					}
					stepMax = max(stepMax, r.Version)
					if r.Writer != 3 {
						t.Errorf("step %d: writer %d, want 3", i, r.Writer)
					}
				}
				lastVer = stepMax
				if diff := cmp.Diff(s.want, got, cmpopts.IgnoreFields(Row{}, "Version", "Part", "Writer"), cmpopts.EquateEmpty()); diff != "" {
					t.Errorf("step %d (at %s): emitted rows (-want +got):\n%s", i, s.at, diff)
				}
			}
		})
	}
}

func TestPartsDifferAcrossInstances(t *testing.T) {
	a := New(Config{AllowedLateness: 0, KeepClosed: 0, MaxWindows: 10}, t0)
	a.Add(t0.Add(time.Second), "t", "d", []model.ReadingRow{row("p", 0, 1)})
	first := a.Advance(t0.Add(2 * time.Minute))
	a.Add(t0.Add(3*time.Minute), "t", "d", []model.ReadingRow{row("p", time.Second, 1)})
	second := a.Advance(t0.Add(4 * time.Minute))
	if len(first) != 1 || len(second) != 1 {
		t.Fatalf("emitted %d then %d rows, want 1 and 1", len(first), len(second))
	}
	if first[0].Part == second[0].Part {
		t.Errorf("both instances of the window have part %d", first[0].Part)
	}
	if st := a.Stats(); st.Late != 1 || st.Points != 2 {
		t.Errorf("stats %+v, want 1 late and 2 points", st)
	}
	// A restarted aggregator (later start) never reuses a part.
	b := New(Config{MaxWindows: 10}, t0.Add(time.Second))
	b.Add(t0.Add(5*time.Minute), "t", "d", []model.ReadingRow{row("p", 0, 1)})
	if r := b.Flush(t0.Add(5 * time.Minute)); r[0].Part <= second[0].Part {
		t.Errorf("restart part %d not above %d", r[0].Part, second[0].Part)
	}
}

func TestCompute(t *testing.T) {
	readings := []model.Reading{
		{TS: ms(0), Metrics: []model.Metric{{Name: "a", Value: 1}, {Name: "b", Value: 10}}},
		{TS: ms(30 * time.Second), Metrics: []model.Metric{{Name: "a", Value: 3}}},
		{TS: ms(60 * time.Second), Metrics: []model.Metric{{Name: "a", Value: 5}}},
	}
	got := Compute("t", "d", readings, 42)
	want := []Row{
		agg("d", "a", 0, 2, 4, 1, 3, 0, 30*time.Second, 1, 3),
		agg("d", "b", 0, 1, 10, 10, 10, 0, 0, 10, 10),
		agg("d", "a", time.Minute, 1, 5, 5, 5, time.Minute, time.Minute, 5, 5),
	}
	for i := range want {
		want[i].Writer, want[i].Version = RebuildWriter, 42
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Compute (-want +got):\n%s", diff)
	}
}

func TestCombineAndTop(t *testing.T) {
	r := func(device string, minute time.Duration, part uint64, ver uint64, count uint64, sum, mn, mx float64, first, last time.Duration, fv, lv float64) Row {
		x := agg(device, "m", minute, count, sum, mn, mx, first, last, fv, lv)
		x.Part, x.Version = part, ver
		return x
	}
	rows := Latest([]Row{
		r("a", 0, 1, 1, 2, 3, 1, 2, 0, time.Second, 1, 2),
		r("a", 0, 1, 2, 3, 6, 1, 3, 0, 2*time.Second, 1, 3), // a newer version of the same part
		r("a", 0, 2, 1, 1, 10, 10, 10, 30*time.Second, 30*time.Second, 10, 10),
		r("a", time.Minute, 1, 1, 1, -4, -4, -4, time.Minute, time.Minute, -4, -4),
		r("a", 2*time.Hour, 1, 5, 0, 0, 0, 0, 0, 0, 0, 0), // tombstone
		r("b", 0, 1, 1, 10, 20, 2, 2, 0, 9*time.Second, 2, 2),
	})
	if len(rows) != 5 {
		t.Fatalf("Latest kept %d rows, want 5", len(rows))
	}
	var aRows []Row
	for _, x := range rows {
		if x.Device == "a" {
			aRows = append(aRows, x)
		}
	}
	tests := []struct {
		step Step
		want []Bucket
	}{
		{StepMinute, []Bucket{
			{Start: ms(0), Count: 4, Sum: 16, Min: 1, Max: 10, FirstTS: ms(0), FirstValue: 1, LastTS: ms(30 * time.Second), LastValue: 10},
			{Start: ms(time.Minute), Count: 1, Sum: -4, Min: -4, Max: -4, FirstTS: ms(time.Minute), FirstValue: -4, LastTS: ms(time.Minute), LastValue: -4},
		}},
		{StepHour, []Bucket{
			{Start: ms(0), Count: 5, Sum: 12, Min: -4, Max: 10, FirstTS: ms(0), FirstValue: 1, LastTS: ms(time.Minute), LastValue: -4},
		}},
	}
	for _, tc := range tests {
		if diff := cmp.Diff(tc.want, Combine(aRows, tc.step)); diff != "" {
			t.Errorf("Combine step %s (-want +got):\n%s", tc.step, diff)
		}
	}
	tops := []struct {
		by   By
		want []string
		val  []float64
	}{
		{ByCount, []string{"b", "a"}, []float64{10, 5}},
		{ByMax, []string{"a", "b"}, []float64{10, 2}},
		{ByMean, []string{"a", "b"}, []float64{12.0 / 5, 2}},
	}
	for _, tc := range tops {
		got := Top(rows, tc.by, 10)
		var names []string
		var vals []float64
		for _, g := range got {
			names, vals = append(names, g.Device), append(vals, g.Value)
		}
		if !cmp.Equal(names, tc.want) || !cmp.Equal(vals, tc.val) {
			t.Errorf("Top by %s = %v %v, want %v %v", tc.by, names, vals, tc.want, tc.val)
		}
	}
	if got := Top(rows, ByCount, 1); len(got) != 1 {
		t.Errorf("Top limit 1 returned %d", len(got))
	}
}

func TestParse(t *testing.T) {
	for _, s := range []string{"1m", "1h", "1d"} {
		st, err := ParseStep(s)
		if err != nil || st.String() != s {
			t.Errorf("ParseStep(%q) = %v, %v", s, st, err)
		}
	}
	for _, s := range []string{"", "5m", "1w"} {
		if _, err := ParseStep(s); err == nil {
			t.Errorf("ParseStep(%q) accepted", s)
		}
	}
	if _, err := ParseBy("median"); err == nil {
		t.Error("ParseBy(median) accepted")
	}
	if MinuteOf(-1) != -MinuteMillis || MinuteOf(MinuteMillis+5) != MinuteMillis {
		t.Error("MinuteOf wrong around zero")
	}
}

func TestCodecRoundTrip(t *testing.T) {
	rows := []Row{
		{Key: Key{Tenant: "t", Device: "dev-1", Metric: "temp", Minute: ms(0)}, Writer: 7, Part: 1 << 60, Count: 3, Sum: 1.5,
			Min: -2, Max: math.Inf(1), FirstTS: -5, FirstValue: 0.25, LastTS: ms(59 * time.Second), LastValue: 1e300, Version: 99},
		{Key: Key{Tenant: "", Device: "x", Metric: "", Minute: -MinuteMillis}},
	}
	got, err := DecodeRows(EncodeRows(nil, rows))
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(rows, got); diff != "" {
		t.Errorf("round trip (-want +got):\n%s", diff)
	}
	for _, bad := range [][]byte{nil, {9}, {1, 5}, EncodeRows(nil, rows)[:20], append(EncodeRows(nil, rows), 0)} {
		if _, err := DecodeRows(bad); err == nil {
			t.Errorf("DecodeRows(%x) accepted", bad)
		}
	}
}

func TestDecodeRowAndVersion(t *testing.T) {
	r := Row{Key: Key{Tenant: "acme", Device: "pump-7", Metric: "temp", Minute: ms(time.Minute)}, Writer: 2, Part: 77, Count: 6,
		Sum: 12.5, Min: 1, Max: 4, FirstTS: ms(time.Minute), FirstValue: 1, LastTS: ms(110 * time.Second), LastValue: 4, Version: 1 << 62}
	one := EncodeRow(nil, &r)
	two := EncodeRows(nil, []Row{r, r})
	tests := []struct {
		name    string
		b       []byte
		wantErr bool
	}{
		{name: "one row", b: one},
		{name: "same bytes as a list of one", b: EncodeRows(nil, []Row{r})},
		{name: "two rows", b: two, wantErr: true},
		{name: "no rows", b: EncodeRows(nil, nil), wantErr: true},
		{name: "empty", b: nil, wantErr: true},
		{name: "bad version byte", b: append([]byte{9}, one[1:]...), wantErr: true},
		{name: "truncated in the key", b: one[:6], wantErr: true},
		{name: "truncated in the version", b: one[:len(one)-1], wantErr: true},
		{name: "trailing byte", b: append(append([]byte(nil), one...), 0), wantErr: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := DecodeRow(tc.b)
			ver, verr := RowVersion(tc.b)
			if tc.wantErr {
				if err == nil || verr == nil {
					t.Fatalf("DecodeRow err %v, RowVersion err %v: want both to fail", err, verr)
				}
				return
			}
			if err != nil || verr != nil {
				t.Fatalf("DecodeRow err %v, RowVersion err %v", err, verr)
			}
			if diff := cmp.Diff(r, got); diff != "" {
				t.Errorf("DecodeRow (-want +got):\n%s", diff)
			}
			if ver != r.Version {
				t.Errorf("RowVersion = %d, want %d", ver, r.Version)
			}
		})
	}
}

func FuzzDecodeRows(f *testing.F) {
	f.Add(EncodeRows(nil, []Row{{Key: Key{Tenant: "t", Device: "d", Metric: "m"}, Count: 1}}))
	f.Add([]byte{1, 0})
	f.Add(EncodeValue(nil, &Row{Count: 2, Sum: 3, Min: 1, Max: 2, FirstTS: 5, LastTS: 9, Version: 7}))
	f.Add(EncodeValue(nil, &Row{Count: 1, Sum: 3, Min: 3, Max: 3, FirstValue: 3, LastValue: 3, FirstTS: 5, LastTS: 5, Version: 7}))
	f.Fuzz(func(t *testing.T, b []byte) {
		if IsValue(b) {
			// A stored aggregate without its key: RowVersion accepts
			// exactly what DecodeValue does, and it re-encodes to itself.
			var r Row
			err := DecodeValue(b, &r)
			ver, verErr := RowVersion(b)
			if (err == nil) != (verErr == nil) || err == nil && ver != r.Version {
				t.Fatalf("DecodeValue %+v, %v; RowVersion %d, %v", r, err, ver, verErr)
			}
			if _, rowsErr := DecodeRows(b); rowsErr == nil {
				t.Fatal("DecodeRows accepted a value")
			}
			if err == nil {
				var again Row
				if err := DecodeValue(EncodeValue(nil, &r), &again); err != nil || !cmp.Equal(again, r, cmpopts.EquateNaNs()) {
					t.Fatalf("re-encoding %+v gave %+v, %v", r, again, err)
				}
			}
			return
		}
		rows, err := DecodeRows(b)
		// DecodeRow and RowVersion accept exactly the lists of one row.
		one, oneErr := DecodeRow(b)
		ver, verErr := RowVersion(b)
		if single := err == nil && len(rows) == 1; single != (oneErr == nil) || single != (verErr == nil) {
			t.Fatalf("DecodeRows: %d rows, err %v; DecodeRow err %v; RowVersion err %v", len(rows), err, oneErr, verErr)
		} else if single && (!cmp.Equal(one, rows[0], cmpopts.EquateNaNs()) || ver != rows[0].Version) {
			t.Fatalf("DecodeRow %+v, RowVersion %d; DecodeRows %+v", one, ver, rows[0])
		}
		if err != nil {
			return
		}
		again, err := DecodeRows(EncodeRows(nil, rows))
		if err != nil || len(again) != len(rows) {
			t.Fatalf("re-encoding %d rows failed: %v", len(rows), err)
		}
	})
}

// Eviction frees what it drops: no dropped window stays in the kept list
// or the close queue, where it would be held (points, series and all)
// until it came due, so that max_windows would not bound memory.
func TestEvictionFreesWindows(t *testing.T) {
	const max = 20
	a := New(Config{AllowedLateness: time.Minute, KeepClosed: 10 * time.Minute, MaxWindows: max}, t0)
	now := t0.Add(time.Hour) // every minute below is long closed: a backfill
	for round := range 10 {
		for i := range 30 {
			dev := fmt.Sprint("d", i)
			a.Add(now, "t", dev, []model.ReadingRow{row("m", time.Duration(round)*time.Minute, 1)})
		}
		now = now.Add(time.Second)
		a.Advance(now)
		if a.Len() > max {
			t.Fatalf("round %d: %d windows held, more than %d", round, a.Len(), max)
		}
		kept := 0
		for w := a.kept.head; w != nil; w = w.next {
			if !w.held {
				t.Errorf("round %d: a dropped window is in the kept list", round)
			}
			kept++
		}
		if kept > a.Len() {
			t.Errorf("round %d: %d windows in the kept list for %d windows held", round, kept, a.Len())
		}
		for m, q := range a.closing {
			for _, w := range q {
				if !w.held {
					t.Errorf("round %d: a dropped window waits in the close queue of minute %d", round, m)
				}
			}
		}
	}
	if a.Stats().Evicted == 0 {
		t.Fatal("nothing was evicted: the test proves nothing")
	}
}

// EncodeValue and DecodeValue round-trip every aggregate, the one-point
// form only where it loses nothing.
func TestValueRoundTrip(t *testing.T) {
	point := func(v float64, ts int64) Row {
		return Row{Count: 1, Sum: v, Min: v, Max: v, FirstValue: v, LastValue: v, FirstTS: ts, LastTS: ts, Version: 9}
	}
	negZero := point(0, 5)
	negZero.Min = math.Copysign(0, -1)
	tests := []struct {
		name    string
		row     Row
		onePt   bool
		maxSize int
	}{
		{name: "one point", row: point(21.5, 1_700_000_000_123), onePt: true, maxSize: 20},
		{name: "one NaN point", row: point(math.NaN(), -3), onePt: true, maxSize: 20},
		{name: "one point, min of another sign", row: negZero},
		{name: "two points", row: Row{Count: 2, Sum: 3, Min: 1, Max: 2, FirstValue: 1, LastValue: 2, FirstTS: 10, LastTS: 20, Version: 1}},
		{name: "one point, two timestamps", row: Row{Count: 1, Sum: 1, Min: 1, Max: 1, FirstValue: 1, LastValue: 1, FirstTS: 10, LastTS: 20}},
		{name: "tombstone", row: Row{Version: 12}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			b := EncodeValue(nil, &tc.row)
			if got := b[0] == pointVersion; got != tc.onePt {
				t.Errorf("one-point form %t, want %t", got, tc.onePt)
			}
			if tc.maxSize > 0 && len(b) > tc.maxSize {
				t.Errorf("%d bytes, want at most %d", len(b), tc.maxSize)
			}
			var got Row
			if err := DecodeValue(b, &got); err != nil {
				t.Fatal(err)
			}
			if !cmp.Equal(got, tc.row, cmpopts.EquateNaNs()) || math.Signbit(got.Min) != math.Signbit(tc.row.Min) {
				t.Errorf("round trip: got %+v, want %+v", got, tc.row)
			}
			if v, err := RowVersion(b); err != nil || v != tc.row.Version {
				t.Errorf("RowVersion = %d, %v; want %d", v, err, tc.row.Version)
			}
		})
	}
}
