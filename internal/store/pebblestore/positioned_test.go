package pebblestore_test

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/sluicehq/sluice/internal/model"
	"github.com/sluicehq/sluice/internal/store"
	"github.com/sluicehq/sluice/internal/store/pebblestore"
)

// A read session that reads catalogues and partitions in key order skips
// the seek when its iterator already stands at the next read's first key;
// what it reads must not change: every device's catalogue and readings,
// devices neighbouring in the store or far apart, with or without
// catalogues and readings, in sorted runs broken by reads out of order
// and by reads of other kinds through the same iterators.
func TestReadsInKeyOrder(t *testing.T) {
	st := open(t, t.TempDir())
	t.Cleanup(func() { _ = st.Close() }) // after the read session's
	ctx := t.Context()
	day := model.DayOf(1_700_000_000_000)
	t0 := day.Start()
	rng := rand.New(rand.NewPCG(5, 6))
	const devices = 300
	sds := make([]model.SeriesDay, devices)
	var b store.Batch
	for i := range sds {
		sds[i] = model.SeriesDay{Kind: model.KindReadings, Tenant: "acme", Series: fmt.Sprintf("dev-%03d", i), Day: day}
		if rng.IntN(3) == 0 {
			continue // nothing written
		}
		pk := sds[i].Partition(0)
		var rows []model.ReadingRow
		for range 1 + rng.IntN(6) {
			ts := t0 + int64(rng.IntN(4))*60_000 + int64(rng.IntN(60_000))
			rows = append(rows, model.ReadingRow{TS: ts, Metric: "m", Value: float64(i)})
		}
		b.Partitions = append(b.Partitions, store.PartitionWrite{Key: pk, Readings: rows})
		b.Catalogue = append(b.Catalogue, model.PartitionInfo{Key: pk, Rows: int64(len(rows)), State: "single"})
	}
	rs := pebblestore.ReadsAfter(t, st, &b)
	read := 0
	for round := range 40 {
		var picks []int
		for range 1 + rng.IntN(60) {
			picks = append(picks, rng.IntN(devices))
		}
		if round%4 != 3 {
			slices.Sort(picks) // mostly in key order, as a roll reads
		}
		for _, i := range picks {
			if rng.IntN(10) == 0 { // another kind of read moves the rows iterator
				if _, err := rs.ScanReadings(ctx, sds[rng.IntN(devices)].Partition(0), store.Range{From: t0, To: t0 + 86_400_000}, 3); err != nil {
					t.Fatal(err)
				}
			}
			want, err := st.Catalogue(ctx, sds[i])
			if err != nil {
				t.Fatal(err)
			}
			got, err := rs.Catalogue(ctx, sds[i])
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(want, got, cmpopts.EquateEmpty()); diff != "" {
				t.Fatalf("round %d, %s: catalogue (-store +session):\n%s", round, sds[i].Series, diff)
			}
			from := t0 + int64(rng.IntN(4))*60_000
			rg := store.Range{From: from, To: from + int64(1+rng.IntN(2))*60_000}
			wantRows, err := st.ScanReadings(ctx, sds[i].Partition(0), rg, 100)
			if err != nil {
				t.Fatal(err)
			}
			var gotRows []model.ReadingRow
			whole, err := rs.EachReading(ctx, sds[i].Partition(0), rg, func(name []byte, row *model.ReadingRow) error {
				r := *row
				r.Metric = string(name)
				gotRows = append(gotRows, r)
				return nil
			})
			if err != nil || !whole {
				t.Fatalf("round %d, %s: whole %t, %v", round, sds[i].Series, whole, err)
			}
			if diff := cmp.Diff(wantRows, gotRows, cmpopts.EquateEmpty()); diff != "" {
				t.Fatalf("round %d, %s [%d, %d): readings (-store +session):\n%s", round, sds[i].Series, rg.From-t0, rg.To-t0, diff)
			}
			read += len(got) + len(gotRows)
		}
	}
	if read == 0 {
		t.Fatal("setup: nothing read")
	}
}
