package rollup

import (
	stdcmp "cmp"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/sluicehq/sluice/internal/model"
)

var t0 = time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC) // a minute boundary

func ms(d time.Duration) int64 { return t0.Add(d).UnixMilli() }

func agg(device, metric string, minute time.Duration, count uint64, sum, mn, mx float64, first, last time.Duration, fv, lv float64) Row {
	return Row{Key: Key{Tenant: "t", Device: device, Metric: metric, Minute: ms(minute)}, Count: count, Sum: sum, Min: mn, Max: mx,
		FirstTS: ms(first), FirstValue: fv, LastTS: ms(last), LastValue: lv}
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
	typed := Compute("t", "d", []model.Reading{{TS: 5, Metrics: []model.Metric{model.IntMetric("i", -3), model.BoolMetric("b", true), model.StringMetric("s", "x")}}}, 7)
	f.Add(EncodeRows(nil, typed))
	f.Add(EncodeValue(nil, &typed[0]))
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

// Compute equals the plain definition — group the points of each (metric,
// minute), sort them by time, aggregate — on random readings given in any
// order.
func TestComputeMatchesDefinition(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for round := range 200 {
		var readings []model.Reading
		seen := map[int64]bool{}
		for range rng.IntN(40) {
			ts := ms(time.Duration(rng.IntN(5*60_000)-60_000) * time.Millisecond)
			if seen[ts] {
				continue
			}
			seen[ts] = true
			r := model.Reading{TS: ts}
			for _, name := range []string{"a", "b", "c"} {
				if rng.IntN(2) == 0 {
					r.Metrics = append(r.Metrics, model.Metric{Name: name, Value: float64(rng.IntN(100)) / 4})
				}
			}
			readings = append(readings, r)
		}
		groups := map[Key][]Point{}
		for _, r := range readings {
			for _, m := range r.Metrics {
				k := Key{Tenant: "t", Device: "d", Metric: m.Name, Minute: MinuteOf(r.TS)}
				groups[k] = append(groups[k], Point{TS: r.TS, Value: m.Value})
			}
		}
		var want []Row
		for k, pts := range groups {
			slices.SortFunc(pts, func(a, b Point) int { return stdcmp.Compare(a.TS, b.TS) })
			row := Aggregate(k, pts)
			row.Writer, row.Version = RebuildWriter, 7
			want = append(want, row)
		}
		slices.SortFunc(want, func(x, y Row) int {
			if c := stdcmp.Compare(x.Minute, y.Minute); c != 0 {
				return c
			}
			return strings.Compare(x.Metric, y.Metric)
		})
		got := Compute("t", "d", readings, 7)
		if diff := cmp.Diff(want, got, cmpopts.EquateEmpty()); diff != "" {
			t.Fatalf("round %d (-want +got):\n%s", round, diff)
		}
		// Appended after another device's rows of the same metrics and
		// minutes, the rows are the same and the other device's untouched.
		other := Compute("t", "p", readings, 7)
		both := AppendCompute(slices.Clone(other), "t", "d", readings, 7)
		if diff := cmp.Diff(other, both[:len(other)], cmpopts.EquateEmpty()); diff != "" {
			t.Fatalf("round %d: AppendCompute changed the rows before it (-want +got):\n%s", round, diff)
		}
		if diff := cmp.Diff(want, both[len(other):], cmpopts.EquateEmpty()); diff != "" {
			t.Fatalf("round %d: AppendCompute (-want +got):\n%s", round, diff)
		}
	}
}

// Point is one distinct reading of a minute (the reference definition
// that Compute is checked against).
type Point struct {
	TS    int64
	Value float64
}

// Aggregate computes the aggregate of points sorted by TS with distinct TS.
// Count is 0 for no points.
func Aggregate(key Key, points []Point) Row {
	r := Row{Key: key}
	if len(points) == 0 {
		return r
	}
	r.Count = uint64(len(points))
	r.Min, r.Max = math.Inf(1), math.Inf(-1)
	for _, p := range points {
		r.Sum += p.Value
		r.Min = min(r.Min, p.Value)
		r.Max = max(r.Max, p.Value)
	}
	r.FirstTS, r.FirstValue = points[0].TS, points[0].Value
	last := points[len(points)-1]
	r.LastTS, r.LastValue = last.TS, last.Value
	return r
}
