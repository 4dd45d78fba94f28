package rollup

import (
	"encoding/hex"
	"math"
	"math/big"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/sluicehq/sluice/internal/model"
)

func at(d time.Duration, ms ...model.Metric) model.Reading {
	return model.Reading{TS: ms0(d), Metrics: ms}
}

func ms0(d time.Duration) int64 { return ms(d) }

func i128(s string) Int128 {
	b, ok := new(big.Int).SetString(s, 10)
	if !ok {
		panic(s)
	}
	lo := new(big.Int).And(b, new(big.Int).SetUint64(math.MaxUint64)).Uint64()
	hi := new(big.Int).Rsh(b, 64).Int64()
	return Int128{Hi: hi, Lo: lo}
}

func TestInt128(t *testing.T) {
	tests := []struct {
		name string
		vals []int64
		want string
	}{
		{"empty", nil, "0"},
		{"small", []int64{1, -3, 5}, "3"},
		{"negative", []int64{-7}, "-7"},
		{"at MaxInt64", []int64{math.MaxInt64 - 1, 1}, "9223372036854775807"},
		{"past MaxInt64", []int64{math.MaxInt64, 1}, "9223372036854775808"},
		{"three MaxInt64", []int64{math.MaxInt64, math.MaxInt64, math.MaxInt64}, "27670116110564327421"},
		{"past MinInt64", []int64{math.MinInt64, -1}, "-9223372036854775809"},
		{"over and back", []int64{math.MaxInt64, math.MaxInt64, math.MinInt64, math.MinInt64}, "-2"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var s Int128
			for _, v := range tc.vals {
				s = s.Add(Int128Of(v))
			}
			if got := s.String(); got != tc.want {
				t.Errorf("sum = %s, want %s", got, tc.want)
			}
			if s != i128(tc.want) {
				t.Errorf("sum = %+v, want %+v", s, i128(tc.want))
			}
			v, fits := s.Int64()
			wantFits := s.Big().IsInt64()
			if fits != wantFits || fits && v != s.Big().Int64() {
				t.Errorf("Int64 = %d, %t", v, fits)
			}
			lo, hi := s.Split()
			if JoinInt128(lo, hi) != s {
				t.Errorf("Split %d, %d does not join back to %+v", lo, hi, s)
			}
			if fits && (hi != 0 || lo != v) {
				t.Errorf("Split of a sum that fits = %d, %d; want %d, 0", lo, hi, v)
			}
			f, _ := new(big.Float).SetInt(s.Big()).Float64()
			if s.Float64() != f {
				t.Errorf("Float64 = %g, want %g", s.Float64(), f)
			}
		})
	}
}

// Compute keeps each type apart; the old Compute added every typed
// value's zero Value as a float.
func TestComputeTyped(t *testing.T) {
	row := func(metric string, count uint64, set func(r *Row)) Row {
		r := Row{Key: Key{Tenant: "t", Device: "d", Metric: metric, Minute: ms(0)}, Writer: RebuildWriter, Count: count, Version: 1}
		set(&r)
		return r
	}
	tests := []struct {
		name     string
		readings []model.Reading
		want     Row
	}{
		{
			name:     "ints near MaxInt64, sum past it exact",
			readings: []model.Reading{at(0, model.IntMetric("n", math.MaxInt64)), at(time.Second, model.IntMetric("n", math.MaxInt64)), at(2*time.Second, model.IntMetric("n", -1))},
			want: row("n", 3, func(r *Row) {
				r.IntCount, r.IntSum, r.IntMin, r.IntMax = 3, i128("18446744073709551613"), -1, math.MaxInt64
				r.IntFirstTS, r.IntFirst, r.IntLastTS, r.IntLast = ms(0), math.MaxInt64, ms(2*time.Second), -1
			}),
		},
		{
			name:     "bools",
			readings: []model.Reading{at(0, model.BoolMetric("on", false)), at(time.Second, model.BoolMetric("on", true)), at(2*time.Second, model.BoolMetric("on", true))},
			want: row("on", 3, func(r *Row) {
				r.BoolCount, r.TrueCount, r.BoolFirstTS, r.BoolFirst, r.BoolLastTS, r.BoolLast = 3, 2, ms(0), false, ms(2*time.Second), true
			}),
		},
		{
			name:     "strings",
			readings: []model.Reading{at(5*time.Second, model.StringMetric("s", "b")), at(time.Second, model.StringMetric("s", "a")), at(9*time.Second, model.StringMetric("s", "c"))},
			want: row("s", 3, func(r *Row) {
				r.StrCount, r.StrFirstTS, r.StrFirst, r.StrLastTS, r.StrLast = 3, ms(time.Second), "a", ms(9*time.Second), "c"
			}),
		},
		{
			name: "a type that changes within the minute",
			readings: []model.Reading{
				at(0, model.IntMetric("m", 4)), at(time.Second, model.Metric{Name: "m", Value: -2.5}), at(2*time.Second, model.BoolMetric("m", true)),
				at(3*time.Second, model.StringMetric("m", "x")), at(4*time.Second, model.Metric{Name: "m", Value: 7}), at(5*time.Second, model.IntMetric("m", 6)),
			},
			want: row("m", 6, func(r *Row) {
				r.Sum, r.Min, r.Max, r.FirstTS, r.FirstValue, r.LastTS, r.LastValue = 4.5, -2.5, 7, ms(time.Second), -2.5, ms(4*time.Second), 7
				r.IntCount, r.IntSum, r.IntMin, r.IntMax, r.IntFirstTS, r.IntFirst, r.IntLastTS, r.IntLast = 2, Int128Of(10), 4, 6, ms(0), 4, ms(5*time.Second), 6
				r.BoolCount, r.TrueCount, r.BoolFirstTS, r.BoolFirst, r.BoolLastTS, r.BoolLast = 1, 1, ms(2*time.Second), true, ms(2*time.Second), true
				r.StrCount, r.StrFirstTS, r.StrFirst, r.StrLastTS, r.StrLast = 1, ms(3*time.Second), "x", ms(3*time.Second), "x"
			}),
		},
		{
			name:     "floats only, as before",
			readings: []model.Reading{at(0, model.Metric{Name: "f", Value: 2}), at(time.Second, model.Metric{Name: "f", Value: -1})},
			want: row("f", 2, func(r *Row) {
				r.Sum, r.Min, r.Max, r.FirstTS, r.FirstValue, r.LastTS, r.LastValue = 1, -1, 2, ms(0), 2, ms(time.Second), -1
			}),
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := Compute("t", "d", tc.readings, 1)
			if diff := cmp.Diff([]Row{tc.want}, got); diff != "" {
				t.Errorf("Compute (-want +got):\n%s", diff)
			}
			if fc := got[0].FloatCount(); fc != tc.want.Count-tc.want.IntCount-tc.want.BoolCount-tc.want.StrCount {
				t.Errorf("FloatCount = %d", fc)
			}
		})
	}
}

// Minutes combine into hours exactly, each type apart, in any order.
func TestCombineTyped(t *testing.T) {
	readings := []model.Reading{
		at(0, model.IntMetric("m", math.MaxInt64), model.BoolMetric("b", true)),
		at(10*time.Second, model.StringMetric("m", "first")),
		at(70*time.Second, model.IntMetric("m", math.MaxInt64), model.BoolMetric("b", false)),
		at(80*time.Second, model.Metric{Name: "m", Value: 1.5}),
		at(130*time.Second, model.IntMetric("m", 2), model.BoolMetric("b", false)),
		at(140*time.Second, model.StringMetric("m", "last")),
		at(150*time.Second, model.Metric{Name: "m", Value: -0.5}),
	}
	rows := Compute("t", "d", readings, 1)
	var m, b []Row
	for _, r := range rows {
		if r.Metric == "m" {
			m = append(m, r)
		} else {
			b = append(b, r)
		}
	}
	hour := Combine(m, StepHour)
	if len(hour) != 1 {
		t.Fatalf("hours = %+v", hour)
	}
	h := hour[0]
	want := Bucket{Start: ms(0), Count: 7, Sum: 1, Min: -0.5, Max: 1.5, FirstTS: ms(80 * time.Second), FirstValue: 1.5, LastTS: ms(150 * time.Second), LastValue: -0.5,
		Typed: Typed{IntCount: 3, IntSum: i128("18446744073709551616"), IntMin: 2, IntMax: math.MaxInt64, IntFirstTS: ms(0), IntFirst: math.MaxInt64, IntLastTS: ms(130 * time.Second), IntLast: 2,
			StrCount: 2, StrFirstTS: ms(10 * time.Second), StrFirst: "first", StrLastTS: ms(140 * time.Second), StrLast: "last"}}
	if diff := cmp.Diff(want, h); diff != "" {
		t.Errorf("hour of m (-want +got):\n%s", diff)
	}
	reversed := Combine([]Row{m[2], m[1], m[0]}, StepHour)
	if diff := cmp.Diff(hour, reversed); diff != "" {
		t.Errorf("combining in another order (-first +reversed):\n%s", diff)
	}
	if got, want := h.Mean(), (1+18446744073709551616.0)/5; got != want {
		t.Errorf("mean = %g, want %g", got, want)
	}
	if first, ts, _ := h.First(); first.Type != model.TypeInt || ts != ms(0) {
		t.Errorf("first = %+v at %d", first, ts)
	}
	if last, ts, _ := h.Last(); last.Type != model.TypeFloat || last.Value != -0.5 || ts != ms(150*time.Second) {
		t.Errorf("last = %+v at %d", last, ts)
	}
	bh := Combine(b, StepHour)[0]
	if bh.Count != 3 || bh.BoolCount != 3 || bh.TrueCount != 1 || !bh.BoolFirst || bh.BoolLast || bh.FloatCount() != 0 || !math.IsNaN(bh.Mean()) {
		t.Errorf("hour of b = %+v", bh)
	}
}

func TestTopTyped(t *testing.T) {
	r := func(device string, ms ...model.Metric) []Row {
		return Compute("t", device, []model.Reading{at(0, ms...)}, 1)
	}
	var rows []Row
	rows = append(rows, r("ints", model.IntMetric("m", 50))...)
	rows = append(rows, r("floats", model.Metric{Name: "m", Value: 40})...)
	rows = append(rows, Compute("t", "strings", []model.Reading{at(0, model.StringMetric("m", "a")), at(time.Second, model.StringMetric("m", "b")), at(2*time.Second, model.StringMetric("m", "c"))}, 1)...)
	rows = append(rows, r("bools", model.BoolMetric("m", true))...)
	names := func(rs []Rank) []string {
		var out []string
		for _, k := range rs {
			out = append(out, k.Device)
		}
		return out
	}
	if got := names(Top(rows, ByCount, 10)); !cmp.Equal(got, []string{"strings", "bools", "floats", "ints"}) {
		t.Errorf("by count: %v", got)
	}
	if got := names(Top(rows, ByMax, 10)); !cmp.Equal(got, []string{"ints", "floats"}) {
		t.Errorf("by max: %v (bools and strings have no max)", got)
	}
	if got := Top(rows, ByMean, 10); len(got) != 2 || got[0].Mean != 50 || got[1].Mean != 40 {
		t.Errorf("by mean: %+v", got)
	}
}

func TestTypedCodec(t *testing.T) {
	typed := Compute("acme", "pump-1", []model.Reading{
		at(0, model.IntMetric("m", math.MaxInt64), model.BoolMetric("b", true), model.StringMetric("s", "héllo")),
		at(time.Second, model.IntMetric("m", math.MaxInt64), model.Metric{Name: "b", Value: 2.5}, model.StringMetric("s", "")),
		at(2*time.Second, model.BoolMetric("m", false)),
	}, 99)
	float := Compute("acme", "pump-1", []model.Reading{at(0, model.Metric{Name: "f", Value: 1})}, 99)
	all := append(append([]Row(nil), typed...), float...)
	got, err := DecodeRows(EncodeRows(nil, all))
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(all, got); diff != "" {
		t.Errorf("list round trip (-want +got):\n%s", diff)
	}
	if b := EncodeRows(nil, float); b[0] != codecVersion {
		t.Errorf("a list of float rows is written in format %d, want %d (as before typed values)", b[0], codecVersion)
	}
	for _, r := range all {
		one, err := DecodeRow(EncodeRow(nil, &r))
		if err != nil || !cmp.Equal(one, r) {
			t.Errorf("row round trip of %s: %+v, %v", r.Metric, one, err)
		}
		v := EncodeValue(nil, &r)
		if want := r.HasTyped(); (v[0] == typedValueVersion) != want {
			t.Errorf("value of %s in format %d", r.Metric, v[0])
		}
		got := Row{Key: r.Key, Writer: r.Writer, Part: r.Part, Typed: Typed{StrFirst: "stale"}}
		if err := DecodeValue(v, &got); err != nil || !cmp.Equal(got, r) {
			t.Errorf("value round trip of %s: %+v, %v", r.Metric, got, err)
		}
		if ver, err := RowVersion(v); err != nil || ver != 99 {
			t.Errorf("RowVersion = %d, %v", ver, err)
		}
		for i := 1; i < len(v); i++ {
			if err := DecodeValue(v[:i], &got); err == nil {
				t.Errorf("value of %s truncated to %d bytes decoded", r.Metric, i)
			}
		}
	}
	// Typed counts beyond the row's count are corrupt.
	bad := typed[0]
	bad.Count = 0
	if err := DecodeValue(EncodeValue(nil, &bad), &Row{}); err == nil {
		t.Error("a value with more typed values than values decoded")
	}
}

// Bytes written by the codec before typed values (commit eb966e3) decode
// to the float rows they were.
func TestLegacyBytesDecode(t *testing.T) {
	a := Row{Key: Key{Tenant: "acme", Device: "pump-1", Metric: "temp", Minute: 1740830400000}, Writer: 3, Part: 9, Count: 3,
		Sum: 61.5, Min: 19.5, Max: 22, FirstTS: 1740830401000, FirstValue: 20, LastTS: 1740830459000, LastValue: 22, Version: 1764000000000000000}
	b := Row{Key: Key{Tenant: "acme", Device: "pump-2", Metric: "rpm", Minute: 1740830460000}, Writer: 65535, Count: 1,
		Sum: 1180, Min: 1180, Max: 1180, FirstTS: 1740830461000, FirstValue: 1180, LastTS: 1740830461000, LastValue: 1180, Version: 7}
	const (
		list  = "01020461636d650670756d702d310474656d7080f89e99aa6500030903404ec000000000004033800000000000403600000000000040340000000000004036000000000000d0879f99aa65f091a699aa658080a8bef694bfbd180461636d650670756d702d320372706dc0a1a699aa65ffff00014092700000000000409270000000000040927000000000004092700000000000409270000000000090b1a699aa6590b1a699aa6507"
		value = "0203404ec000000000004033800000000000403600000000000040340000000000004036000000000000d0879f99aa65f091a699aa658080a8bef694bfbd18"
		point = "03409270000000000090b1a699aa6507"
	)
	unhex := func(s string) []byte {
		b, err := hex.DecodeString(s)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	rows, err := DecodeRows(unhex(list))
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]Row{a, b}, rows); diff != "" {
		t.Errorf("old list (-want +got):\n%s", diff)
	}
	for _, tc := range []struct {
		hex  string
		want Row
	}{{value, a}, {point, b}} {
		got := Row{Key: tc.want.Key, Writer: tc.want.Writer, Part: tc.want.Part}
		if err := DecodeValue(unhex(tc.hex), &got); err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(tc.want, got); diff != "" {
			t.Errorf("old value (-want +got):\n%s", diff)
		}
		if got.FloatCount() != got.Count || got.HasTyped() {
			t.Errorf("old value reads with typed values: %+v", got.Typed)
		}
	}
	// And float rows are still written with those bytes.
	if got := hex.EncodeToString(EncodeRows(nil, []Row{a, b})); got != list {
		t.Errorf("float rows now encode as %s", got)
	}
	if got := hex.EncodeToString(EncodeValue(nil, &b)); got != point {
		t.Errorf("a float point now encodes as %s", got)
	}
}
