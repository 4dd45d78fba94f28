package store

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/sluicehq/sluice/internal/model"
)

func TestLastOfEachCell(t *testing.T) {
	r := func(ts int64, metric string, v float64) model.ReadingRow {
		return model.ReadingRow{TS: ts, Metric: metric, Value: v}
	}
	tests := []struct {
		name     string
		rows     []model.ReadingRow
		want     []model.ReadingRow
		sameBack bool // returned without a copy
	}{
		{name: "empty", rows: nil, want: nil, sameBack: true},
		{name: "in order", rows: []model.ReadingRow{r(1, "a", 1), r(1, "b", 2), r(2, "a", 3)}, want: []model.ReadingRow{r(1, "a", 1), r(1, "b", 2), r(2, "a", 3)}, sameBack: true},
		{name: "timestamps out of order", rows: []model.ReadingRow{r(2, "a", 3), r(1, "a", 1), r(1, "b", 2)}, want: []model.ReadingRow{r(1, "a", 1), r(1, "b", 2), r(2, "a", 3)}},
		{name: "a cell twice, apart: the later wins", rows: []model.ReadingRow{r(1, "b", 5), r(1, "c", 1), r(2, "a", 1), r(1, "b", 2)}, want: []model.ReadingRow{r(1, "b", 2), r(1, "c", 1), r(2, "a", 1)}},
		{name: "a cell twice, adjacent", rows: []model.ReadingRow{r(1, "a", 9), r(1, "a", -1)}, want: []model.ReadingRow{r(1, "a", -1)}},
		{name: "a run out of name order", rows: []model.ReadingRow{r(1, "c", 1), r(1, "a", 2), r(1, "b", 3)}, want: []model.ReadingRow{r(1, "a", 2), r(1, "b", 3), r(1, "c", 1)}},
	}
	for _, tt := range tests {
		got := LastOfEachCell(tt.rows)
		if diff := cmp.Diff(tt.want, got); diff != "" {
			t.Errorf("%s (-want +got):\n%s", tt.name, diff)
		}
		if tt.sameBack && len(got) > 0 && &got[0] != &tt.rows[0] {
			t.Errorf("%s: rows in order were copied", tt.name)
		}
		if !tt.sameBack && len(tt.rows) > 0 && &got[0] == &tt.rows[0] {
			t.Errorf("%s: the caller's rows were reordered in place", tt.name)
		}
	}
}
