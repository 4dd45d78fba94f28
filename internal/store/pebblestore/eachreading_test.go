package pebblestore

import (
	"context"
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/sluicehq/sluice/internal/model"
	"github.com/sluicehq/sluice/internal/store"
)

// EachReading hands out exactly the rows ScanReadings returns, in the same
// order and with the same values, and says it cannot when the partition
// holds per-metric keys of an older store.
func TestEachReading(t *testing.T) {
	st, pk, t0 := openPump(t)
	ctx := context.Background()
	rows := []model.ReadingRow{
		{TS: t0, Metric: "rpm", Value: 1000, Seq: 1, HasSeq: true},
		{TS: t0, Metric: "temp_c", Value: -20.5},
		{TS: t0 + 1, Metric: "count", Type: model.TypeInt, Int: -7},
		{TS: t0 + 1, Metric: "on", Type: model.TypeBool, Int: 1},
		{TS: t0 + 1, Metric: "state", Type: model.TypeString, Str: "idle"},
		{TS: t0 + 5, Metric: "rpm", Value: 1005},
	}
	if err := st.Commit(ctx, &store.Batch{Partitions: []store.PartitionWrite{{Key: pk, Readings: rows}}}); err != nil {
		t.Fatal(err)
	}
	// A second write of t0+1 merges with the first, its cell winning.
	again := []model.ReadingRow{{TS: t0 + 1, Metric: "on", Type: model.TypeBool, Int: 0}, {TS: t0 + 1, Metric: "added", Value: 3}}
	rs := ReadsAfter(t, st, &store.Batch{Partitions: []store.PartitionWrite{{Key: pk, Readings: again}}})
	for _, rng := range []store.Range{{From: t0, To: t0 + 10}, {From: t0 + 1, To: t0 + 2}, {From: t0 + 2, To: t0 + 5}, {From: t0 + 5, To: t0}} {
		want, err := st.ScanReadings(ctx, pk, rng, 100)
		if err != nil {
			t.Fatal(err)
		}
		var got []model.ReadingRow
		whole, err := rs.EachReading(ctx, pk, rng, func(name []byte, row *model.ReadingRow) error {
			r := *row
			r.Metric = string(name)
			got = append(got, r)
			return nil
		})
		if err != nil || !whole {
			t.Fatalf("[%d, %d): whole %t, %v", rng.From-t0, rng.To-t0, whole, err)
		}
		if diff := cmp.Diff(want, got, cmpopts.EquateEmpty()); diff != "" {
			t.Errorf("[%d, %d) (-ScanReadings +EachReading):\n%s", rng.From-t0, rng.To-t0, diff)
		}
	}

	// A partition of one key a reading at t0, then a per-metric key at t0+3:
	// the first is handed out, then the stream gives up.
	old := model.SeriesDay{Kind: model.KindReadings, Tenant: "acme", Series: "pump-2", Day: 20_000}.Partition(0)
	if err := st.Commit(ctx, &store.Batch{Partitions: []store.PartitionWrite{{Key: old, Readings: rows[:2]}}}); err != nil {
		t.Fatal(err)
	}
	pb := st.db.NewBatch()
	r := model.ReadingRow{TS: t0 + 3, Metric: "rpm", Value: 1}
	if err := pb.Set(append(appendTS(partitionPrefix(nil, old), r.TS), r.Metric...), encodeReading(nil, r), nil); err != nil {
		t.Fatal(err)
	}
	if err := pb.Commit(nil); err != nil {
		t.Fatal(err)
	}
	rs2 := ReadsAfter(t, st, nil)
	seen := 0
	whole, err := rs2.EachReading(ctx, old, store.Range{From: t0, To: t0 + 10}, func([]byte, *model.ReadingRow) error { seen++; return nil })
	if err != nil || whole || seen != 2 {
		t.Errorf("a partition with a per-metric key after a reading of 2 metrics: whole %t, %d seen, %v; want false, 2 seen, nil", whole, seen, err)
	}

	// A long run stops once its context ends.
	long := model.SeriesDay{Kind: model.KindReadings, Tenant: "acme", Series: "pump-3", Day: 20_000}.Partition(0)
	var many []model.ReadingRow
	for i := range 3000 {
		many = append(many, model.ReadingRow{TS: t0 + int64(i), Metric: "rpm", Value: float64(i)})
	}
	rs3 := ReadsAfter(t, st, &store.Batch{Partitions: []store.PartitionWrite{{Key: long, Readings: many}}})
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	seen = 0
	_, err = rs3.EachReading(cctx, long, store.Range{From: t0, To: t0 + 3000}, func([]byte, *model.ReadingRow) error { seen++; return nil })
	if !errors.Is(err, context.Canceled) || seen >= 3000 {
		t.Errorf("a cancelled read of 3000 readings: %d seen, %v", seen, err)
	}
}
