package rollupfeed

import (
	"context"
	"path/filepath"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"

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
	raw, dst := openRawAndRollups(t)

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

// A rebuild of two days lists each day's devices from the raw store's
// catalogue and from the rollups (a device with rollups and no readings
// has them retracted), and its progress counts every device-day of the
// range from the first step on.
func TestRebuildEveryDeviceOfEachDay(t *testing.T) {
	ctx := t.Context()
	raw, dst := openRawAndRollups(t)

	day1 := model.DayOf(base.UnixMilli())
	day2 := day1 + 1
	write := func(day model.Day, device string, n int) {
		t.Helper()
		pk := model.SeriesDay{Kind: model.KindReadings, Tenant: "acme", Series: device, Day: day}.Partition(0)
		var rows []model.ReadingRow
		for i := range n {
			rows = append(rows, model.ReadingRow{TS: day.Start() + int64(i)*1000, Metric: "x", Value: float64(i)})
		}
		if err := raw.Commit(ctx, &store.Batch{
			Partitions: []store.PartitionWrite{{Key: pk, Readings: rows}},
			Catalogue:  []model.PartitionInfo{{Key: pk, Rows: int64(n), Bytes: int64(30 * n), MinTS: rows[0].TS, MaxTS: rows[n-1].TS, State: "single"}},
			Version:    1,
		}); err != nil {
			t.Fatal(err)
		}
	}
	write(day1, "b", 3)
	write(day1, "a", 2)
	write(day2, "c", 4)
	write(day2, "b", 1)
	ghost := rollup.Key{Tenant: "acme", Device: "z", Metric: "x", Minute: day2.Start()}
	if err := dst.Insert(ctx, []rollup.Row{{Key: ghost, Writer: 1, Count: 2, Sum: 2, Min: 1, Max: 1, Version: 1}}); err != nil {
		t.Fatal(err)
	}
	v, err := Verify(ctx, raw, dst, "acme", day2)
	if err != nil {
		t.Fatal(err)
	}
	want := []Mismatch{
		{Device: "b", Metric: "x", Raw: 1, Diffs: []string{"count: raw 1, rollup 0", "float_count: raw 1, rollup 0"}},
		{Device: "c", Metric: "x", Raw: 4, Diffs: []string{"count: raw 4, rollup 0", "float_count: raw 4, rollup 0"}},
		{Device: "z", Metric: "x", Rollup: 2, Diffs: []string{"count: raw 0, rollup 2", "float_count: raw 0, rollup 2"}},
	}
	if v.Devices != 3 || v.RawRows != 5 || v.RollupRows != 2 || !cmp.Equal(v.Mismatches, want) {
		t.Errorf("verify of day 2 before the rebuild: %+v, want 3 devices, 5 raw, 2 counted by rollups, mismatches %+v", v, want)
	}

	var steps []Progress
	res, err := Rebuild(ctx, raw, dst, "acme", "", day1.Start(), day2.End(), 2, func(p Progress) { steps = append(steps, p) })
	if err != nil {
		t.Fatal(err)
	}
	wantSteps := []Progress{
		{Done: 1, Total: 5, Device: "a", Day: day1},
		{Done: 2, Total: 5, Device: "b", Day: day1},
		{Done: 3, Total: 5, Device: "b", Day: day2},
		{Done: 4, Total: 5, Device: "c", Day: day2},
		{Done: 5, Total: 5, Device: "z", Day: day2},
	}
	if !slices.Equal(steps, wantSteps) {
		t.Errorf("progress %+v, wantSteps %+v", steps, wantSteps)
	}
	if res.DeviceDays != 5 || res.Readings != 10 || res.Retracted != 1 {
		t.Errorf("rebuild result %+v, want 5 device-days, 10 readings, 1 row retracted", res)
	}
	for _, day := range []model.Day{day1, day2} {
		v, err := Verify(ctx, raw, dst, "acme", day)
		if err != nil {
			t.Fatal(err)
		}
		if v.Devices != 2 || v.RawRows != v.RollupRows || len(v.Mismatches) != 0 {
			t.Errorf("verify of %s after the rebuild: %+v, want 2 devices and no mismatch", day, v)
		}
	}
}

// openRawAndRollups opens an embedded raw store and rollup store, closed
// when the test ends.
func openRawAndRollups(t *testing.T) (*pebblestore.Store, *rollupstore.Store) {
	t.Helper()
	raw := openRaw(t, t.TempDir())
	dst, err := rollupstore.Open(filepath.Join(t.TempDir(), "rollups"), quiet)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = dst.Close() })
	return raw, dst
}
