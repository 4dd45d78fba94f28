package rollupfeed

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/sluicehq/sluice/internal/buckets"
	"github.com/sluicehq/sluice/internal/model"
	"github.com/sluicehq/sluice/internal/outbox"
	"github.com/sluicehq/sluice/internal/rollup"
	"github.com/sluicehq/sluice/internal/rollupstore"
	"github.com/sluicehq/sluice/internal/sink"
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
	raw := openRaw(t, dir)
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
	cfg := testConfig()
	cfg.BatchRows = 50
	reg := prometheus.NewRegistry()
	feed := newFeed(t, cfg, raw, filepath.Join(dir, "marks"), ob, dst, reg)
	if n := testutil.CollectAndCount(feed.m.dropped); n != len(dropReasons) {
		t.Errorf("%d drop reason series at start, want %d", n, len(dropReasons))
	}
	sk := sink.New(sink.DefaultConfig(), buckets.DefaultConfig(), raw, quiet, reg, sink.WithCommitHook(feed))
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

// TestRollMetrics checks the roller's metrics: minutes recomputed, raw
// reads and readings read, rows emitted, and a retried or late reading
// recomputing its minute again.
func TestRollMetrics(t *testing.T) {
	emb, err := rollupstore.Open(filepath.Join(t.TempDir(), "rollups"), quiet)
	if err != nil {
		t.Fatal(err)
	}
	defer emb.Close()
	r := newRig(t, emb)
	m := r.feed.m
	write := func(readings ...model.Reading) {
		t.Helper()
		if err := r.sink.Write(context.Background(), &sink.Request{Tenant: "acme", Readings: readings}); err != nil {
			t.Fatal(err)
		}
	}
	at := func(sec int, v float64) model.Reading {
		return model.Reading{DeviceID: "pump-1", TS: base.Add(time.Duration(sec) * time.Second).UnixMilli(), Metrics: []model.Metric{{Name: "power", Value: v}}}
	}
	write(at(1, 1), at(2, 2), at(61, 3))
	eventually(t, "minutes 0 and 1 recomputed", func() bool {
		return testutil.ToFloat64(m.rolled) == 2 && testutil.ToFloat64(m.emitted) == 2
	})
	if got := testutil.ToFloat64(m.rawReads); got != 1 {
		t.Errorf("%v raw reads, want 1 (two adjacent minutes of one device)", got)
	}
	if got := testutil.ToFloat64(m.rawReadings); got != 3 {
		t.Errorf("%v readings read, want 3", got)
	}
	write(at(2, 2)) // a retry: the same row again
	write(at(3, 3)) // a late row for minute 0
	eventually(t, "minute 0 recomputed again", func() bool { return testutil.ToFloat64(m.rolled) >= 3 })
	eventually(t, "nothing pending", func() bool { return r.feed.lag() == 0 && pendingMinutes(r.feed) == 0 })
	rows, err := emb.Rows(context.Background(), rollup.Filter{Tenant: "acme", From: base.UnixMilli(), To: base.Add(time.Hour).UnixMilli()})
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 2 || rows[0].Count != 3 || rows[0].Sum != 6 || rows[1].Count != 1 {
		t.Errorf("rows after the retry and the late row: %+v, want minute 0 with 3 readings summing to 6 and minute 1 with 1", rows)
	}
}

func pendingMinutes(f *Feed) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.pending.minutes
}
