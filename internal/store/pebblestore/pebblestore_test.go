package pebblestore_test

import (
	"log/slog"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/sluicehq/sluice/internal/model"
	"github.com/sluicehq/sluice/internal/store"
	"github.com/sluicehq/sluice/internal/store/pebblestore"
	"github.com/sluicehq/sluice/internal/store/storetest"
)

var discard = slog.New(slog.DiscardHandler)

func open(t *testing.T, dir string) *pebblestore.Store {
	t.Helper()
	st, err := pebblestore.Open(dir, pebblestore.Options{CacheBytes: 1 << 20}, discard)
	if err != nil {
		t.Fatalf("Open(%q): %v", dir, err)
	}
	return st
}

func TestConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) storetest.Backend {
		st := open(t, t.TempDir())
		t.Cleanup(func() {
			if err := st.Close(); err != nil {
				t.Errorf("Close: %v", err)
			}
		})
		return st
	})
}

// TestReopen checks that every committed batch survives closing and
// reopening the store.
func TestReopen(t *testing.T) {
	dir := t.TempDir()
	const ts = 20_000*model.MillisPerDay + 1234
	rpk := model.PartitionKey{Kind: model.KindReadings, Tenant: "t", Series: "dev", Day: model.DayOf(ts)}
	apk := model.PartitionKey{Kind: model.KindAudit, Tenant: "t", Series: "s", Day: model.DayOf(ts), Sub: 1<<24 | 3}
	batches := []store.Batch{
		{
			Partitions: []store.PartitionWrite{{Key: rpk, Readings: []model.ReadingRow{
				{TS: ts, Metric: "a", Value: 1, Seq: 4, HasSeq: true},
				{TS: ts, Metric: "b", Value: 2, Seq: 4, HasSeq: true},
			}}},
			Catalogue: []model.PartitionInfo{{Key: rpk, Rows: 2, Bytes: 60, MinTS: ts, MaxTS: ts, State: "single"}},
		},
		{
			Partitions: []store.PartitionWrite{
				{Key: rpk, Readings: []model.ReadingRow{{TS: ts + 1, Metric: "a", Value: 3}}},
				{Key: apk, Events: []model.AuditEvent{{EventID: "e1", Stream: "s", TS: ts, Actor: "u", Attributes: []byte(`{"a":1}`)}}},
			},
			Catalogue: []model.PartitionInfo{
				{Key: rpk, Rows: 3, Bytes: 80, MinTS: ts, MaxTS: ts + 1, State: "single", Closed: true},
				{Key: apk, Rows: 1, Bytes: 30, MinTS: ts, MaxTS: ts, State: "split"},
			},
		},
	}
	st := open(t, dir)
	for i := range batches {
		if err := st.Commit(t.Context(), &batches[i]); err != nil {
			t.Fatalf("Commit batch %d: %v", i, err)
		}
	}
	if err := st.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}

	st = open(t, dir)
	defer st.Close()
	rng := store.Range{From: rpk.Day.Start(), To: rpk.Day.End()}
	rows, err := st.ScanReadings(t.Context(), rpk, rng, 100)
	if err != nil {
		t.Fatalf("ScanReadings: %v", err)
	}
	wantRows := append(append([]model.ReadingRow(nil), batches[0].Partitions[0].Readings...), batches[1].Partitions[0].Readings...)
	if diff := cmp.Diff(wantRows, rows); diff != "" {
		t.Errorf("readings after reopen mismatch (-want +got):\n%s", diff)
	}
	events, err := st.ScanAudit(t.Context(), apk, rng, 100)
	if err != nil {
		t.Fatalf("ScanAudit: %v", err)
	}
	if diff := cmp.Diff(batches[1].Partitions[1].Events, events); diff != "" {
		t.Errorf("events after reopen mismatch (-want +got):\n%s", diff)
	}
	for _, want := range batches[1].Catalogue {
		got, err := st.Catalogue(t.Context(), want.Key.SeriesDay())
		if err != nil {
			t.Fatalf("Catalogue: %v", err)
		}
		if diff := cmp.Diff([]model.PartitionInfo{want}, got); diff != "" {
			t.Errorf("catalogue of %v after reopen mismatch (-want +got):\n%s", want.Key, diff)
		}
	}
	seen, err := st.AuditSeen(t.Context(), []store.AuditID{{Tenant: "t", Day: model.DayOf(ts), EventID: "e1"}})
	if err != nil {
		t.Fatalf("AuditSeen: %v", err)
	}
	if !seen[0] {
		t.Errorf("AuditSeen after reopen does not find event e1")
	}
}
