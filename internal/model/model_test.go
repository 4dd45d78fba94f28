package model_test

import (
	"math"
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
