package rollupfeed

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/sluicehq/sluice/internal/model"
	"github.com/sluicehq/sluice/internal/outbox"
	"github.com/sluicehq/sluice/internal/rollup"
	"github.com/sluicehq/sluice/internal/rollupstore"
	"github.com/sluicehq/sluice/internal/store"
)

// gatedStore is the real embedded rollup store whose inserts wait for gate
// to close, saying on entered when one starts: an aggregator that fell
// behind.
type gatedStore struct {
	*rollupstore.Store
	entered chan struct{}
	gate    chan struct{}
}

func (s *gatedStore) Insert(ctx context.Context, rows []rollup.Row) error {
	select {
	case s.entered <- struct{}{}:
	default:
	}
	<-s.gate
	return s.Store.Insert(ctx, rows)
}

// openLocal opens an embedded rollup store, closed when the test ends, and
// an outbox, which the caller closes.
func openLocal(t *testing.T) (*rollupstore.Store, *outbox.Outbox) {
	t.Helper()
	dir := t.TempDir()
	emb, err := rollupstore.Open(filepath.Join(dir, "rollups"), quiet)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = emb.Close() })
	ob, err := outbox.Open(filepath.Join(dir, "outbox"), 64<<20, quiet)
	if err != nil {
		t.Fatal(err)
	}
	return emb, ob
}

// A full queue makes Observe wait for the aggregator instead of dropping
// the batch's rows from the rollups: every committed reading is counted,
// none dropped, none of their days marked dirty, and the wait is counted.
func TestObserveWaitsWhenQueueFull(t *testing.T) {
	emb, ob := openLocal(t)
	defer ob.Close()
	dst := &gatedStore{Store: emb, entered: make(chan struct{}, 1), gate: make(chan struct{})}
	cfg := DefaultConfig()
	cfg.AllowedLateness, cfg.FlushInterval, cfg.QueueBatches = 0, 10*time.Millisecond, 1
	feed := New(cfg, 0, ob, dst, time.Now, testLogger(), prometheus.NewRegistry(), WithLocalBackend())

	batch := func(i int) *store.Batch {
		ts := base.Add(time.Duration(i) * time.Minute).UnixMilli()
		key := model.SeriesDay{Kind: model.KindReadings, Tenant: "acme", Series: "d", Day: model.DayOf(ts)}.Partition(0)
		return &store.Batch{Partitions: []store.PartitionWrite{{Key: key, Readings: []model.ReadingRow{{TS: ts, Metric: "m", Value: 1}}}}}
	}
	feed.Observe(batch(0))
	<-dst.entered // the aggregator is stuck inserting batch 0's row
	const n = 5
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := 1; i <= n; i++ {
			feed.Observe(batch(i))
		}
	}()
	select {
	case <-done:
		t.Fatal("Observe returned every batch while the aggregator was stuck with a queue of one")
	case <-time.After(200 * time.Millisecond):
	}
	close(dst.gate)
	<-done
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := feed.Close(ctx); err != nil {
		t.Fatal(err)
	}

	rows, err := emb.Rows(ctx, rollup.Filter{Tenant: "acme", From: base.UnixMilli(), To: base.Add(time.Hour).UnixMilli()})
	if err != nil {
		t.Fatal(err)
	}
	var counted uint64
	for _, r := range rows {
		counted += r.Count
	}
	if counted != n+1 {
		t.Errorf("the rollups count %d readings, %d were committed", counted, n+1)
	}
	if got := testutil.ToFloat64(feed.m.dropped.WithLabelValues("queue_full")); got != 0 {
		t.Errorf("dropped{reason=queue_full} = %v, want 0", got)
	}
	if dirty, err := ob.Dirty(); err != nil || len(dirty) != 0 {
		t.Errorf("dirty days %v (%v), want none", dirty, err)
	}
	if got := testutil.ToFloat64(feed.m.queueWait); got <= 0 {
		t.Errorf("sluice_rollup_queue_wait_seconds_total = %v, want the wait counted", got)
	}
}

// A batch committed after Close began (a sink still draining when the
// rollups stop) is left out of the rollups and counted, without touching
// the outbox, which may be closed by then.
func TestObserveAfterClose(t *testing.T) {
	emb, ob := openLocal(t)
	feed := New(DefaultConfig(), 0, ob, emb, time.Now, testLogger(), prometheus.NewRegistry(), WithLocalBackend())
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := feed.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if err := ob.Close(); err != nil {
		t.Fatal(err)
	}
	ts := base.UnixMilli()
	key := model.SeriesDay{Kind: model.KindReadings, Tenant: "acme", Series: "d", Day: model.DayOf(ts)}.Partition(0)
	feed.Observe(&store.Batch{Partitions: []store.PartitionWrite{{Key: key, Readings: []model.ReadingRow{{TS: ts, Metric: "m", Value: 1}, {TS: ts + 1, Metric: "m", Value: 2}}}}})
	if got := testutil.ToFloat64(feed.m.dropped.WithLabelValues("queue_full")); got != 2 {
		t.Errorf("dropped{reason=queue_full} = %v, want 2", got)
	}
}
