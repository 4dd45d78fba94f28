package partcount_test

import (
	"context"
	"fmt"
	"log/slog"
	"testing"

	"github.com/sluicehq/sluice/internal/model"
	"github.com/sluicehq/sluice/internal/partcount"
	"github.com/sluicehq/sluice/internal/store"
	"github.com/sluicehq/sluice/internal/store/pebblestore"
)

// TestRecountBounded: a recount reads at most limit+1 rows, in pages.
func TestRecountBounded(t *testing.T) {
	st, err := pebblestore.Open(t.TempDir(), pebblestore.Options{}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	const tenant, base = "t", int64(1_763_800_000_000)
	reading := func(dev string, ts int64, metric string) model.Reading {
		return model.Reading{DeviceID: dev, TS: ts, Metrics: []model.Metric{{Name: metric, Value: 1}}}
	}
	pk := model.SeriesDay{Kind: model.KindReadings, Tenant: tenant, Series: "dev", Day: model.DayOf(base)}.Partition(0)
	var rows []model.ReadingRow
	for i := range 12_000 {
		rows = model.AppendReadingRows(rows, reading("dev", base+int64(i), fmt.Sprint("m", i%3)))
	}
	if err := st.Commit(context.Background(), &store.Batch{Partitions: []store.PartitionWrite{{Key: pk, Readings: rows}}}); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		limit    int64
		wantRows int64
		over     bool
	}{
		{20_000, 12_000, false},
		{12_000, 12_000, false},
		{11_999, 12_000, true},
		{100, 101, true},
	}
	for _, tc := range tests {
		pi, over, err := partcount.Recount(context.Background(), st, pk, tc.limit)
		if err != nil {
			t.Fatal(err)
		}
		if pi.Rows != tc.wantRows || over != tc.over {
			t.Errorf("Recount(limit %d) = %d rows, over %v; want %d, %v", tc.limit, pi.Rows, over, tc.wantRows, tc.over)
		}
		if !tc.over && (pi.MinTS != base || pi.MaxTS != base+11_999) {
			t.Errorf("Recount range [%d, %d], want [%d, %d]", pi.MinTS, pi.MaxTS, base, base+11_999)
		}
	}
}
