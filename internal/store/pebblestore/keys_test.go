package pebblestore

import (
	"bytes"
	"context"
	"log/slog"
	"testing"

	"github.com/cockroachdb/pebble/v2"

	"github.com/sluicehq/sluice/internal/model"
	"github.com/sluicehq/sluice/internal/store"
)

// AppendReading gives exactly the keys and values Commit writes: the
// benchmarks' limits rely on it to write the gateway's rows.
func TestAppendReadingMatchesCommit(t *testing.T) {
	s, err := Open(t.TempDir(), Options{}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	pk := model.SeriesDay{Kind: model.KindReadings, Tenant: "acme", Series: "pump-7", Day: 20_000}.Partition(3)
	rows := []model.ReadingRow{
		{TS: model.Day(20_000).Start() + 5, Metric: "rpm", Value: 1180, Seq: 9, HasSeq: true},
		{TS: model.Day(20_000).Start() + 6, Metric: "temp_c", Value: -2.5},
	}
	if err := s.Commit(context.Background(), &store.Batch{Partitions: []store.PartitionWrite{{Key: pk, Readings: rows}}}); err != nil {
		t.Fatal(err)
	}
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: []byte{tabReadings}, UpperBound: []byte{tabReadings + 1}})
	if err != nil {
		t.Fatal(err)
	}
	defer it.Close()
	i := 0
	for ok := it.First(); ok; ok = it.Next() {
		if i >= len(rows) {
			t.Fatalf("Commit wrote more than %d reading keys", len(rows))
		}
		key, val := AppendReading(nil, nil, pk, rows[i])
		if !bytes.Equal(it.Key(), key) || !bytes.Equal(it.Value(), val) {
			t.Errorf("row %d: Commit wrote %x = %x, AppendReading gives %x = %x", i, it.Key(), it.Value(), key, val)
		}
		i++
	}
	if i != len(rows) {
		t.Errorf("Commit wrote %d reading keys, want %d", i, len(rows))
	}
}
