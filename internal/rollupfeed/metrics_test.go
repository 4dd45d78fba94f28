package rollupfeed

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/sluicehq/sluice/internal/buckets"
	"github.com/sluicehq/sluice/internal/outbox"
	"github.com/sluicehq/sluice/internal/rollupstore"
	"github.com/sluicehq/sluice/internal/sink"
	"github.com/sluicehq/sluice/internal/store/pebblestore"
)

// gathered returns the value of the unlabelled metric name on reg.
func gathered(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fams {
		if f.GetName() == name && len(f.GetMetric()) == 1 {
			m := f.GetMetric()[0]
			return m.GetGauge().GetValue() + m.GetCounter().GetValue()
		}
	}
	t.Fatalf("metric %s not gathered", name)
	return 0
}

// TestOutboxAndShipMetrics fails every insert into the rollup backend:
// the ship errors count, the outbox depth gauges rise; once the backend
// heals, the outbox drains and the gauges fall to 0. Every drop reason is
// exported at 0 from the start, so that an alert on increase() sees the
// first drop.
func TestOutboxAndShipMetrics(t *testing.T) {
	dir := t.TempDir()
	raw, err := pebblestore.Open(filepath.Join(dir, "raw"), pebblestore.Options{NoSync: true}, quiet)
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	emb, err := rollupstore.Open(filepath.Join(dir, "rollups"), quiet)
	if err != nil {
		t.Fatal(err)
	}
	defer emb.Close()
	ob, err := outbox.Open(filepath.Join(dir, "outbox"), 64<<20, quiet)
	if err != nil {
		t.Fatal(err)
	}
	defer ob.Close()
	dst := &failingStore{Store: emb, fail: -1}
	cfg := DefaultConfig()
	cfg.AllowedLateness, cfg.KeepClosed, cfg.FlushInterval, cfg.BatchRows = 0, time.Minute, 20*time.Millisecond, 50
	reg := prometheus.NewRegistry()
	feed := New(cfg, 0, ob, dst, time.Now, testLogger(), reg)
	if n := testutil.CollectAndCount(feed.m.dropped); n != len(dropReasons) {
		t.Errorf("%d drop reason series at start, want %d", n, len(dropReasons))
	}
	sk := sink.New(sink.DefaultConfig(), buckets.DefaultConfig(), raw, quiet, reg, sink.WithOnCommit(feed.Observe))
	r := &rig{raw: raw, sink: sk}
	r.write(t, "acme", []string{"a", "b"}, base, 0, 150)

	eventually(t, "ship errors counted and rows waiting in the outbox", func() bool {
		return testutil.ToFloat64(feed.m.shipErrors) > 0 && gathered(t, reg, "sluice_rollup_outbox_rows") > 0 &&
			gathered(t, reg, "sluice_rollup_outbox_bytes") > 0
	})
	waiting := gathered(t, reg, "sluice_rollup_outbox_rows")
	if shipped := testutil.ToFloat64(feed.m.shipped); shipped != 0 {
		t.Errorf("%v rows shipped while every insert fails", shipped)
	}

	dst.mu.Lock()
	dst.fail = 0
	dst.mu.Unlock()
	eventually(t, "outbox drained", func() bool {
		return gathered(t, reg, "sluice_rollup_outbox_rows") == 0 && gathered(t, reg, "sluice_rollup_outbox_bytes") == 0
	})
	if shipped := testutil.ToFloat64(feed.m.shipped); shipped < waiting {
		t.Errorf("%v rows shipped after the backend healed, want at least the %v that waited", shipped, waiting)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := sk.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if err := feed.Close(ctx); err != nil {
		t.Fatal(err)
	}
}
