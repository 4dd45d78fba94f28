package retention

import (
	"context"
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/sluicehq/sluice/internal/model"
	"github.com/sluicehq/sluice/internal/store"
)

// fakeStore holds expired buckets of two rows each; drops fail with fail.
type fakeStore struct {
	buckets []store.Bucket
	fail    error
}

func (f *fakeStore) Buckets(context.Context, model.Day) ([]store.Bucket, error) {
	return f.buckets, nil
}

func (f *fakeStore) Measure(context.Context, store.Bucket) (store.BucketSize, error) {
	return store.BucketSize{Partitions: 1, Rows: 2, Bytes: 40}, nil
}

func (f *fakeStore) DropData(context.Context, store.Bucket) (int, error) { return 1, f.fail }

func (f *fakeStore) DropCatalogue(context.Context, store.Bucket) (int, error) { return 1, nil }

// TestSweepMetrics checks that every sweep metric moves: results by kind
// (all exported at 0 from the start), buckets, rows and deletes dropped,
// and the time of the last success, which a failed sweep leaves alone.
func TestSweepMetrics(t *testing.T) {
	now := time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC)
	old := model.DayOf(now.AddDate(0, 0, -100).UnixMilli())
	st := &fakeStore{buckets: []store.Bucket{
		{Kind: store.BucketReadings, Tenant: "acme", Day: old},
		{Kind: store.BucketReadings, Tenant: "acme", Day: old + 1},
		{Kind: store.BucketDeadLetters, Tenant: "acme", Day: old},
	}}
	reg := prometheus.NewRegistry()
	s := New(DefaultConfig(), []Store{st}, func() time.Time { return now }, slog.New(slog.DiscardHandler), reg)
	if n := testutil.CollectAndCount(s.m.sweeps); n != len(sweepResults) {
		t.Errorf("%d sweep result series before any sweep, want %d (ok, error, dry_run at 0)", n, len(sweepResults))
	}

	if _, err := s.Sweep(t.Context(), Options{DryRun: true}); err != nil {
		t.Fatal(err)
	}
	if got := testutil.ToFloat64(s.m.sweeps.WithLabelValues("dry_run")); got != 1 {
		t.Errorf("dry_run sweeps %v, want 1", got)
	}
	if got := testutil.ToFloat64(s.m.buckets.WithLabelValues("readings")); got != 0 {
		t.Errorf("a dry run dropped %v buckets, want 0", got)
	}

	if _, err := s.Sweep(t.Context(), Options{}); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		what string
		c    prometheus.Collector
		want float64
	}{
		{"ok sweeps", s.m.sweeps.WithLabelValues("ok"), 1},
		{"readings buckets", s.m.buckets.WithLabelValues("readings"), 2},
		{"dead letter buckets", s.m.buckets.WithLabelValues("dead_letters"), 1},
		{"readings rows", s.m.rows.WithLabelValues("readings"), 4},
		{"readings deletes", s.m.deletes.WithLabelValues("readings"), 4},
		{"dead letter deletes", s.m.deletes.WithLabelValues("dead_letters"), 2},
		{"last success", s.m.lastSuccess, float64(now.Unix())},
	} {
		if got := testutil.ToFloat64(c.c); got != c.want {
			t.Errorf("%s: %v, want %v", c.what, got, c.want)
		}
	}

	st.fail = errors.New("disk on fire")
	now = now.Add(time.Hour)
	if _, err := s.Sweep(t.Context(), Options{}); err == nil {
		t.Fatal("sweep with failing drops: no error")
	}
	if got := testutil.ToFloat64(s.m.sweeps.WithLabelValues("error")); got != 1 {
		t.Errorf("error sweeps %v, want 1", got)
	}
	if got := testutil.ToFloat64(s.m.lastSuccess); got != float64(now.Add(-time.Hour).Unix()) {
		t.Errorf("last success %v moved on a failed sweep", got)
	}
}
