package pebblestore

import (
	"errors"
	"fmt"
	"testing"

	"github.com/cockroachdb/pebble/v2"

	"github.com/sluicehq/sluice/internal/model"
	"github.com/sluicehq/sluice/internal/store"
)

// Reads in key order of neighbouring devices seek once, for the first:
// each later read finds its first key where the read before it left the
// iterator (span.seek). Catalogues present and absent, and partitions.
func TestReadsInKeyOrderSeekOnce(t *testing.T) {
	st, _, t0 := openPump(t)
	ctx := t.Context()
	const devices = 40
	var b store.Batch
	var present, absent []model.SeriesDay
	for i := range devices {
		sd := model.SeriesDay{Kind: model.KindReadings, Tenant: "acme", Series: fmt.Sprintf("dev-%03d", i), Day: 20_000}
		pk := sd.Partition(0)
		b.Partitions = append(b.Partitions, store.PartitionWrite{Key: pk, Readings: []model.ReadingRow{{TS: t0 + int64(i), Metric: "m", Value: 1}}})
		b.Catalogue = append(b.Catalogue, model.PartitionInfo{Key: pk, Rows: 1, State: "single"})
		present = append(present, sd)
		sd.Tenant = "other"
		absent = append(absent, sd)
	}
	rs := ReadsAfter(t, st, &b)
	seeks := func(it *pebble.Iterator) int { return it.Stats().ForwardSeekCount[pebble.InterfaceCall] }

	before := seeks(rs.cat)
	for _, sd := range present {
		if parts, err := rs.Catalogue(ctx, sd); err != nil || len(parts) != 1 {
			t.Fatalf("%s: %d entries, %v", sd.Series, len(parts), err)
		}
	}
	if n := seeks(rs.cat) - before; n != 1 {
		t.Errorf("%d catalogues of neighbours in key order: %d seeks, want 1", devices, n)
	}

	before = seeks(rs.rows)
	for _, sd := range present {
		rows := 0
		whole, err := rs.EachReading(ctx, sd.Partition(0), store.Range{From: t0, To: t0 + devices}, func([]byte, *model.ReadingRow) error { rows++; return nil })
		if err != nil || !whole || rows != 1 {
			t.Fatalf("%s: whole %t, %d rows, %v", sd.Series, whole, rows, err)
		}
	}
	if n := seeks(rs.rows) - before; n != 1 {
		t.Errorf("%d partitions of neighbours in key order: %d seeks, want 1", devices, n)
	}

	before = seeks(rs.cat)
	got, err := catalogues(ctx, rs, absent)
	if err != nil {
		t.Fatal(err)
	}
	for i, parts := range got {
		if len(parts) != 0 {
			t.Fatalf("%v: %d entries of an absent catalogue", absent[i], len(parts))
		}
	}
	if n := seeks(rs.cat) - before; n != 1 {
		t.Errorf("a batch of %d absent catalogues: %d seeks, want 1", devices, n)
	}
}

// A read that stops before its end (here its callback fails) leaves the
// iterator in the middle of its range: the next read must seek, even from
// a key the read before the stopped one had passed.
func TestReadAfterStoppedReadSeeks(t *testing.T) {
	st, _, t0 := openPump(t)
	ctx := t.Context()
	var b store.Batch
	var pks []model.PartitionKey
	for i := range 2 {
		pk := model.SeriesDay{Kind: model.KindReadings, Tenant: "acme", Series: fmt.Sprintf("dev-%d", i), Day: 20_000}.Partition(0)
		var rows []model.ReadingRow
		for s := range 10 {
			rows = append(rows, model.ReadingRow{TS: t0 + int64(s), Metric: "m", Value: float64(s)})
		}
		b.Partitions = append(b.Partitions, store.PartitionWrite{Key: pk, Readings: rows})
		pks = append(pks, pk)
	}
	rs := ReadsAfter(t, st, &b)
	all := store.Range{From: t0, To: t0 + 10}
	count := func(pk model.PartitionKey, stopAt int) (int, error) {
		n := 0
		_, err := rs.EachReading(ctx, pk, all, func([]byte, *model.ReadingRow) error {
			if n++; n == stopAt {
				return errors.New("stop")
			}
			return nil
		})
		return n, err
	}
	if n, err := count(pks[0], 0); err != nil || n != 10 {
		t.Fatalf("first partition: %d rows, %v", n, err)
	}
	if _, err := count(pks[1], 5); err == nil {
		t.Fatal("the stopped read did not stop")
	}
	if n, err := count(pks[1], 0); err != nil || n != 10 {
		t.Fatalf("the second partition read again after a stopped read: %d rows, %v; want 10", n, err)
	}
}
