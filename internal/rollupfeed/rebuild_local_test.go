package rollupfeed

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/sluicehq/sluice/internal/model"
	"github.com/sluicehq/sluice/internal/rollup"
	"github.com/sluicehq/sluice/internal/rollupstore"
	"github.com/sluicehq/sluice/internal/store"
	"github.com/sluicehq/sluice/internal/store/pebblestore"
)

// A minute that has no readings any more loses every rollup row on
// rebuild: a live gateway's row and the row of an earlier rebuild alike.
func TestRebuildRetractsMinutesWithoutReadings(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	raw, err := pebblestore.Open(filepath.Join(dir, "raw"), pebblestore.Options{}, quiet)
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	dst, err := rollupstore.Open(filepath.Join(dir, "rollups"), quiet)
	if err != nil {
		t.Fatal(err)
	}
	defer dst.Close()

	day := model.DayOf(base.UnixMilli())
	m1, m2 := base.UnixMilli(), base.UnixMilli()+rollup.MinuteMillis
	pk := model.SeriesDay{Kind: model.KindReadings, Tenant: "acme", Series: "d", Day: day}.Partition(0)
	if err := raw.Commit(ctx, &store.Batch{
		Partitions: []store.PartitionWrite{{Key: pk, Readings: []model.ReadingRow{{TS: m1, Metric: "x", Value: 1}}}},
		Catalogue:  []model.PartitionInfo{{Key: pk, Rows: 1, Bytes: 30, MinTS: m1, MaxTS: m1, State: "single"}},
		Version:    1,
	}); err != nil {
		t.Fatal(err)
	}
	k2 := rollup.Key{Tenant: "acme", Device: "d", Metric: "x", Minute: m2}
	if err := dst.Insert(ctx, []rollup.Row{
		{Key: k2, Writer: 1, Part: 5, Count: 3, Sum: 3, Min: 1, Max: 1, Version: 1},           // a gateway's
		{Key: k2, Writer: rollup.RebuildWriter, Count: 2, Sum: 2, Min: 1, Max: 1, Version: 1}, // an earlier rebuild's
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := Rebuild(ctx, raw, dst, "acme", "", day.Start(), day.End(), 2, nil); err != nil {
		t.Fatal(err)
	}
	rows, err := dst.Rows(ctx, rollup.Filter{Tenant: "acme", Device: "d", From: day.Start(), To: day.End()})
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 1 || rows[0].Minute != m1 || rows[0].Count != 1 {
		t.Fatalf("rows after the rebuild: %+v, want only minute %d with count 1", rows, m1)
	}
}
