package model_test

import (
	"errors"
	"math"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/internal/model"
)

func TestDayOf(t *testing.T) {
	const d = model.MillisPerDay
	tests := []struct {
		ts   int64
		want model.Day
	}{
		{0, 0},
		{1, 0},
		{d - 1, 0},
		{d, 1},
		{-1, -1},
		{-d, -1},
		{-d - 1, -2},
		{-2 * d, -2},
		{20_000*d + 5, 20_000},
	}
	for _, tc := range tests {
		got := model.DayOf(tc.ts)
		if got != tc.want {
			t.Errorf("DayOf(%d) = %d, want %d", tc.ts, got, tc.want)
		}
		if tc.ts < got.Start() || tc.ts >= got.End() {
			t.Errorf("ts %d is outside its day [%d, %d)", tc.ts, got.Start(), got.End())
		}
	}
}

func TestDayString(t *testing.T) {
	tests := []struct {
		day  model.Day
		want string
	}{
		{0, "1970-01-01"},
		{-1, "1969-12-31"},
		{20_000, "2024-10-04"},
	}
	for _, tc := range tests {
		if got := tc.day.String(); got != tc.want {
			t.Errorf("Day(%d).String() = %q, want %q", tc.day, got, tc.want)
		}
		back, err := model.ParseDay(tc.want)
		if err != nil || back != tc.day {
			t.Errorf("ParseDay(%q) = %d, %v; want %d", tc.want, back, err, tc.day)
		}
	}
	for _, bad := range []string{"", "2024-13-01", "2024-10-04T00:00:00Z", "04/10/2024"} {
		if _, err := model.ParseDay(bad); err == nil {
			t.Errorf("ParseDay(%q) succeeded, want an error", bad)
		}
	}
}

func TestKind(t *testing.T) {
	for _, k := range []model.Kind{model.KindReadings, model.KindAudit} {
		got, err := model.ParseKind(k.String())
		if err != nil || got != k {
			t.Errorf("ParseKind(%q) = %v, %v; want %v", k.String(), got, err, k)
		}
	}
	if _, err := model.ParseKind("metrics"); err == nil {
		t.Errorf("ParseKind(%q) succeeded, want an error", "metrics")
	}
}

func TestOverlaps(t *testing.T) {
	pi := model.PartitionInfo{Rows: 3, MinTS: 10, MaxTS: 20}
	tests := []struct {
		from, to int64
		want     bool
	}{
		{0, 10, false}, // to is exclusive
		{0, 11, true},
		{20, 30, true}, // MaxTS is inclusive
		{21, 30, false},
		{12, 13, true},
		{math.MinInt64, math.MaxInt64, true},
	}
	for _, tc := range tests {
		if got := pi.Overlaps(tc.from, tc.to); got != tc.want {
			t.Errorf("[%d, %d] overlaps [%d, %d) = %v, want %v", pi.MinTS, pi.MaxTS, tc.from, tc.to, got, tc.want)
		}
	}
	if (model.PartitionInfo{MinTS: 10, MaxTS: 20}).Overlaps(0, 100) {
		t.Errorf("an entry with no rows overlaps a range")
	}
}

func TestReadingRows(t *testing.T) {
	r := model.Reading{DeviceID: "d", TS: 5, Seq: 7, HasSeq: true, Metrics: []model.Metric{{Name: "a", Value: 1}, {Name: "bb", Value: 2}}}
	rows := model.ReadingRows(r)
	if len(rows) != 2 || rows[1] != (model.ReadingRow{TS: 5, Metric: "bb", Value: 2, Seq: 7, HasSeq: true}) {
		t.Errorf("ReadingRows = %+v", rows)
	}
	if got, want := rows[0].Size(), int64(8+1+9+8); got != want {
		t.Errorf("Size of a row with seq = %d, want %d", got, want)
	}
	rows[0].HasSeq = false
	if got, want := rows[0].Size(), int64(8+1+9); got != want {
		t.Errorf("Size of a row without seq = %d, want %d", got, want)
	}
}

func TestTimeRangeEdges(t *testing.T) {
	const d = model.MillisPerDay
	tests := []struct {
		ts  int64
		ok  bool
		day string
	}{
		{math.MinInt64, false, ""},
		{math.MaxInt64, false, ""},
		{model.MinTime - 1, false, ""},
		{model.MinTime, true, "0000-01-01"},
		{model.MaxTime - 1, true, "9999-12-31"},
		{model.MaxTime, true, "10000-01-01"},
		{model.MaxTime + 1, false, ""},
		{int64(math.MaxInt32) * d, false, ""}, // 2^31 days: DayOf would wrap
		{int64(math.MinInt32) * d, false, ""},
		{0, true, "1970-01-01"},
	}
	for _, tc := range tests {
		day, err := model.CheckedDayOf(tc.ts)
		if (err == nil) != tc.ok {
			t.Errorf("CheckedDayOf(%d) error = %v, want ok %v", tc.ts, err, tc.ok)
			continue
		}
		if !tc.ok {
			if !errors.Is(err, model.ErrTimeRange) {
				t.Errorf("CheckedDayOf(%d) error = %v, want ErrTimeRange", tc.ts, err)
			}
			continue
		}
		if !day.Valid() || day.String() != tc.day || tc.ts < day.Start() || tc.ts >= day.End() {
			t.Errorf("CheckedDayOf(%d) = %s (valid %v), want %s holding it", tc.ts, day, day.Valid(), tc.day)
		}
	}
	if model.DayOf(model.MinTime) != model.MinDay || model.DayOf(model.MaxTime) != model.MaxDay {
		t.Errorf("MinDay, MaxDay = %d, %d; want %d, %d", model.MinDay, model.MaxDay, model.DayOf(model.MinTime), model.DayOf(model.MaxTime))
	}
	if (model.MinDay - 1).Valid() || (model.MaxDay + 1).Valid() {
		t.Error("days outside MinDay..MaxDay are valid")
	}
}

func TestSpanDays(t *testing.T) {
	const d = model.MillisPerDay
	tests := []struct {
		from, to int64
		want     int64 // 0: refused
	}{
		{0, 1, 1},
		{0, d, 1},
		{0, d + 1, 2},
		{-1, 1, 2},
		{model.MinTime, model.MaxTime, int64(model.MaxDay-model.MinDay) + 0},
		{math.MinInt64, math.MaxInt64, 0}, // to-from overflows int64
		{math.MinInt64, 0, 0},
		{0, math.MaxInt64, 0},
		{5, 5, 0},
		{6, 5, 0},
		{model.MinTime - 1, 0, 0},
		{0, model.MaxTime + 1, 0},
	}
	for _, tc := range tests {
		got, err := model.SpanDays(tc.from, tc.to)
		if tc.want == 0 {
			if err == nil {
				t.Errorf("SpanDays(%d, %d) = %d, want an error", tc.from, tc.to, got)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("SpanDays(%d, %d) = %d, %v; want %d", tc.from, tc.to, got, err, tc.want)
		}
	}
}

func TestParseDayEdges(t *testing.T) {
	tests := []struct {
		in   string
		want model.Day
		ok   bool
	}{
		{"0000-01-01", model.MinDay, true},
		{"9999-12-31", model.MaxDay - 1, true},
		{"1970-01-01", 0, true},
		{"10000-01-01", 0, false},
		{"-001-12-31", 0, false},
		{"2026-02-30", 0, false},
		{"2026-11-22" + strings.Repeat(" ", 1000), 0, false},
		{"", 0, false},
	}
	for _, tc := range tests {
		got, err := model.ParseDay(tc.in)
		if (err == nil) != tc.ok || got != tc.want {
			t.Errorf("ParseDay(%.20q) = %d, %v; want %d, ok %v", tc.in, got, err, tc.want, tc.ok)
		}
	}
}

func FuzzParseDay(f *testing.F) {
	for _, s := range []string{"2026-11-22", "0000-01-01", "9999-12-31", "10000-01-01", "-001-01-01", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		d, err := model.ParseDay(s)
		if err != nil {
			return
		}
		if !d.Valid() {
			t.Fatalf("ParseDay(%q) = %d, outside MinDay..MaxDay", s, d)
		}
		if back, err := model.ParseDay(d.String()); err != nil || back != d {
			t.Fatalf("ParseDay(%q) = %s, which does not parse back: %d, %v", s, d, back, err)
		}
	})
}
