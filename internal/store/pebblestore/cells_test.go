package pebblestore

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/sluicehq/sluice/internal/model"
	"github.com/sluicehq/sluice/internal/store"
)

// The writes of one timestamp combine cell by cell, the newer cell of a
// metric winning, before and after a flush and a full compaction (where
// Pebble merges the operands on disk) and across a reopen.
func TestReadingKeysMergeCells(t *testing.T) {
	dir := t.TempDir()
	st, err := Open(dir, Options{}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	pk := model.SeriesDay{Kind: model.KindReadings, Tenant: "acme", Series: "door-3", Day: 20_000}.Partition(0)
	t0 := model.Day(20_000).Start()
	commits := [][]model.ReadingRow{
		{{TS: t0, Metric: "b", Value: 1}, {TS: t0, Metric: "d", Value: 1}},
		{{TS: t0, Metric: "a", Type: model.TypeBool, Int: 1}, {TS: t0, Metric: "d", Type: model.TypeString, Str: "two", Seq: 2, HasSeq: true}},
		// Two readings of one timestamp in one batch, out of name order:
		// the later row of c wins.
		{{TS: t0, Metric: "c", Value: 1}, {TS: t0 + 1, Metric: "a", Value: 5}, {TS: t0, Metric: "c", Value: 3}, {TS: t0, Metric: "b", Type: model.TypeInt, Int: -7}},
	}
	want := []model.ReadingRow{
		{TS: t0, Metric: "a", Type: model.TypeBool, Int: 1},
		{TS: t0, Metric: "b", Type: model.TypeInt, Int: -7},
		{TS: t0, Metric: "c", Value: 3},
		{TS: t0, Metric: "d", Type: model.TypeString, Str: "two", Seq: 2, HasSeq: true},
		{TS: t0 + 1, Metric: "a", Value: 5},
	}
	for _, rows := range commits {
		if err := st.Commit(ctx, &store.Batch{Partitions: []store.PartitionWrite{{Key: pk, Readings: rows}}}); err != nil {
			t.Fatal(err)
		}
	}
	check := func(when string) {
		t.Helper()
		got, err := st.ScanReadings(ctx, pk, store.Range{From: t0, To: t0 + 10}, 100)
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("%s (-want +got):\n%s", when, diff)
		}
	}
	check("in the memtable")
	if err := st.db.Flush(); err != nil {
		t.Fatal(err)
	}
	check("after a flush")
	if err := st.db.Compact(ctx, []byte{tabReadings}, []byte{tabReadings + 1}, true); err != nil {
		t.Fatal(err)
	}
	check("after a full compaction")
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	if st, err = Open(dir, Options{}, slog.New(slog.DiscardHandler)); err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	check("after a reopen")
}

// openPump opens a store, closed when the test ends, and returns it with
// the first partition of pump-1's day 20,000 and that day's start.
func openPump(t *testing.T) (*Store, model.PartitionKey, int64) {
	t.Helper()
	st, err := Open(t.TempDir(), Options{}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	pk := model.SeriesDay{Kind: model.KindReadings, Tenant: "acme", Series: "pump-1", Day: 20_000}.Partition(0)
	return st, pk, model.Day(20_000).Start()
}

// A store written before reading keys holds a key per metric. Reads merge
// both forms at a timestamp, the reading key's cell winning, and cursors
// and limits cut through a mixed timestamp exactly.
func TestLegacyMetricKeysRead(t *testing.T) {
	st, pk, t0 := openPump(t)
	ctx := context.Background()
	legacy := []model.ReadingRow{
		{TS: t0, Metric: "rpm", Value: 1000, Seq: 1, HasSeq: true},
		{TS: t0, Metric: "temp_c", Value: 20, Seq: 1, HasSeq: true},
		{TS: t0 + 1, Metric: "a", Value: 1},
		{TS: t0 + 1, Metric: "m", Value: 2},
		{TS: t0 + 1, Metric: "z", Value: 3},
		{TS: t0 + 2, Metric: "rpm", Value: 1002},
	}
	pb := st.db.NewBatch()
	for _, r := range legacy { // the format of 10a3f17 and before
		key := append(appendTS(partitionPrefix(nil, pk), r.TS), r.Metric...)
		if err := pb.Set(key, encodeReading(nil, r), nil); err != nil {
			t.Fatal(err)
		}
	}
	if err := pb.Commit(nil); err != nil {
		t.Fatal(err)
	}
	newer := []model.ReadingRow{
		{TS: t0 + 1, Metric: "b", Type: model.TypeString, Str: "new"},
		{TS: t0 + 1, Metric: "m", Value: 20}, // wins over the per-metric key
		{TS: t0 + 3, Metric: "rpm", Value: 1003},
	}
	if err := st.Commit(ctx, &store.Batch{Partitions: []store.PartitionWrite{{Key: pk, Readings: newer}}}); err != nil {
		t.Fatal(err)
	}
	all := []model.ReadingRow{legacy[0], legacy[1], legacy[2], newer[0], newer[1], legacy[4], legacy[5], newer[2]}
	got, err := st.ScanReadings(ctx, pk, store.Range{From: t0, To: t0 + 10}, 100)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(all, got); diff != "" {
		t.Fatalf("mixed partition (-want +got):\n%s", diff)
	}
	// Every cursor position and limit gives the rows that follow it.
	for i := range all {
		for limit := 1; limit <= 3; limit++ {
			r := store.Range{From: t0, To: t0 + 10, After: &store.Pos{TS: all[i].TS, Key: all[i].Metric}}
			got, err := st.ScanReadings(ctx, pk, r, limit)
			if err != nil {
				t.Fatal(err)
			}
			want := all[i+1 : min(i+1+limit, len(all))]
			if diff := cmp.Diff(want, got, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("after %v, limit %d (-want +got):\n%s", *r.After, limit, diff)
			}
		}
	}
	// From and To cut by timestamp.
	got, err = st.ScanReadings(ctx, pk, store.Range{From: t0 + 1, To: t0 + 2}, 100)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(all[2:6], got); diff != "" {
		t.Errorf("[t0+1, t0+2) (-want +got):\n%s", diff)
	}
}

func TestCorruptCellsRefused(t *testing.T) {
	ok := appendCell(nil, model.ReadingRow{Metric: "rpm", Value: 1, Seq: 3, HasSeq: true})
	bad := map[string][]byte{
		"empty name":      append([]byte{0}, ok[4:]...),
		"name past end":   {9, 'r'},
		"cut value":       ok[:len(ok)-3],
		"cut seq":         ok[:len(ok)-1],
		"unknown flags":   append(append([]byte{}, ok[:4]...), append([]byte{0x10}, ok[5:]...)...),
		"string too long": {1, 'a', 0x06, 0x7f, 'x'},
	}
	for name, v := range bad {
		err := eachCell(v, func(_, cell []byte) error {
			var r model.ReadingRow
			return decodeReading(cell, &r)
		})
		if !errors.Is(err, errCorrupt) {
			t.Errorf("%s (%x): %v, want a corrupt value", name, v, err)
		}
		// Merged, a corrupt operand is left out (it must not fail a
		// flush); alone, it is kept for reads to report.
		if got := mergeCells([][]byte{ok, v}); !bytes.Equal(got, ok) {
			t.Errorf("%s: merged with a good operand: %x, want the good one %x", name, got, ok)
		}
		if got := mergeCells([][]byte{v, v}); !bytes.Equal(got, v) {
			t.Errorf("%s: merged with itself: %x, want it as it is", name, got)
		}
	}
}

// A corrupt operand of a reading key never fails a flush or a compaction:
// Pebble retries a failed flush for ever, and a memtable that cannot
// flush stops every write of the store. It is left out of the merge; a
// key with no operand left reads as corrupt.
func TestCorruptOperandDoesNotWedgeTheStore(t *testing.T) {
	st, err := Open(t.TempDir(), Options{}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	ctx := context.Background()
	pk := model.SeriesDay{Kind: model.KindReadings, Tenant: "acme", Series: "d", Day: 20_000}.Partition(0)
	t0 := model.Day(20_000).Start()
	good := model.ReadingRow{TS: t0, Metric: "a", Value: 1}
	if err := st.db.Merge(appendTS(partitionPrefix(nil, pk), t0), appendCell(nil, good), nil); err != nil {
		t.Fatal(err)
	}
	for _, ts := range []int64{t0, t0 + 1} {
		if err := st.db.Merge(appendTS(partitionPrefix(nil, pk), ts), []byte{9, 'x'}, nil); err != nil {
			t.Fatal(err)
		}
	}
	done := make(chan error, 1)
	go func() {
		if err := st.db.Flush(); err != nil {
			done <- err
			return
		}
		done <- st.db.Compact(ctx, []byte{tabReadings}, []byte{tabReadings + 1}, true)
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("flush and compaction: %v", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("flush and compaction of a corrupt operand still not done after 20s")
	}
	got, err := st.ScanReadings(ctx, pk, store.Range{From: t0, To: t0 + 1}, 10)
	if err != nil || len(got) != 1 || got[0] != good {
		t.Errorf("key with a good and a corrupt operand: %+v, %v; want the good cell", got, err)
	}
	if _, err := st.ScanReadings(ctx, pk, store.Range{From: t0 + 1, To: t0 + 2}, 10); !errors.Is(err, errCorrupt) {
		t.Errorf("key with a corrupt operand only: %v, want a corrupt value", err)
	}
}

// TestCellMergeOperandOrder feeds one key's operands to the merger in every
// way Pebble may (each older or newer than those before): the result is
// the merge of the operands oldest first.
func TestCellMergeOperandOrder(t *testing.T) {
	const n = 7
	ops := make([][]byte, n) // oldest first; metric m%3 written by ops m, m+3, ...
	for i := range ops {
		ops[i] = appendCell(nil, model.ReadingRow{Metric: fmt.Sprintf("m%d", i%3), Value: float64(i)})
	}
	want := mergeCells(ops)
	for first := range n { // the operand Merge starts with; older ones come by MergeOlder, newer by MergeNewer
		for _, olderFirst := range []bool{false, true} {
			vm, err := storeMerger.Merge([]byte{tabReadings}, ops[first])
			if err != nil {
				t.Fatal(err)
			}
			older := func() {
				for i := first - 1; i >= 0; i-- {
					if err := vm.MergeOlder(ops[i]); err != nil {
						t.Fatal(err)
					}
				}
			}
			newer := func() {
				for i := first + 1; i < n; i++ {
					if err := vm.MergeNewer(ops[i]); err != nil {
						t.Fatal(err)
					}
				}
			}
			if olderFirst {
				older()
				newer()
			} else {
				newer()
				older()
			}
			got, _, err := vm.Finish(true)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, want) {
				t.Errorf("start %d, older first %v: got %x, want %x", first, olderFirst, got, want)
			}
		}
	}
}

// BenchmarkCellMergeOlder merges a key written 10,000 times, handed over
// newest first: linear now, quadratic when each older operand was inserted
// at the front.
func BenchmarkCellMergeOlder(b *testing.B) {
	ops := make([][]byte, 10_000)
	for i := range ops {
		ops[i] = appendCell(nil, model.ReadingRow{Metric: "m", Value: float64(i)})
	}
	for b.Loop() {
		vm, err := storeMerger.Merge([]byte{tabReadings}, ops[len(ops)-1])
		if err != nil {
			b.Fatal(err)
		}
		for i := len(ops) - 2; i >= 0; i-- {
			_ = vm.MergeOlder(ops[i])
		}
		if _, _, err := vm.Finish(true); err != nil {
			b.Fatal(err)
		}
	}
}

// The mergers of reading keys are recycled once Pebble closes the value
// they returned: reads of many keys, some of one operand and some of
// several, by readers at once, see every key's own cells, in the memtable,
// in level 0 and after a compaction.
func TestRecycledCellMergers(t *testing.T) {
	st, err := Open(t.TempDir(), Options{}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	ctx := context.Background()
	pk := model.SeriesDay{Kind: model.KindReadings, Tenant: "acme", Series: "door-3", Day: 20_000}.Partition(0)
	t0 := model.Day(20_000).Start()
	const n = 2_000
	var want []model.ReadingRow
	commits := make([][]model.ReadingRow, 3)
	for i := range int64(n) {
		for c := range int64(3) {
			// Every key gets its first commit's cell; every second and
			// third key one more, in another commit.
			if c > 0 && i%(c+1) != 0 {
				continue
			}
			r := model.ReadingRow{TS: t0 + i, Metric: fmt.Sprintf("m%d", c), Value: float64(i*10 + c)}
			if c == 2 {
				r.Type, r.Value, r.Str = model.TypeString, 0, fmt.Sprintf("value of %d, long enough to need its own bytes", i)
			}
			commits[c] = append(commits[c], r)
			want = append(want, r)
		}
	}
	for _, rows := range commits {
		if err := st.Commit(ctx, &store.Batch{Partitions: []store.PartitionWrite{{Key: pk, Readings: rows}}}); err != nil {
			t.Fatal(err)
		}
	}
	want = store.LastOfEachCell(want) // in (ts, metric) order
	check := func(when string) {
		t.Helper()
		errs := make(chan error, 4)
		for range 4 {
			go func() {
				got, err := st.ScanReadings(ctx, pk, store.Range{From: t0, To: t0 + n}, 10*n)
				if err == nil && !cmp.Equal(want, got) {
					err = fmt.Errorf("%s", cmp.Diff(want, got))
				}
				errs <- err
			}()
		}
		for range 4 {
			if err := <-errs; err != nil {
				t.Errorf("%s: %v", when, err)
			}
		}
	}
	check("in the memtable")
	if err := st.db.Flush(); err != nil {
		t.Fatal(err)
	}
	check("in level 0")
	if err := st.db.Compact(ctx, []byte{tabReadings}, []byte{tabReadings + 1}, true); err != nil {
		t.Fatal(err)
	}
	check("after a full compaction")
}
