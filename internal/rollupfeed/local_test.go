package rollupfeed

import (
	"context"
	"errors"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/sluicehq/sluice/internal/buckets"
	"github.com/sluicehq/sluice/internal/model"
	"github.com/sluicehq/sluice/internal/outbox"
	"github.com/sluicehq/sluice/internal/rollup"
	"github.com/sluicehq/sluice/internal/rollupstore"
	"github.com/sluicehq/sluice/internal/sink"
	"github.com/sluicehq/sluice/internal/store/pebblestore"
)

// failingStore is the real embedded rollup store whose first fail inserts
// (all of them with fail < 0) return an error, as a full or broken disk
// would.
type failingStore struct {
	*rollupstore.Store
	mu    sync.Mutex
	fail  int
	calls int
}

func (s *failingStore) Insert(ctx context.Context, rows []rollup.Row) error {
	s.mu.Lock()
	s.calls++
	fail := s.fail < 0 || s.calls <= s.fail
	s.mu.Unlock()
	if fail {
		return errors.New("write rollup store: no space left on device")
	}
	return s.Store.Insert(ctx, rows)
}

// countingOutbox is the real outbox, counting the rows appended to it.
type countingOutbox struct {
	*outbox.Outbox
	rows atomic.Int64
}

func (o *countingOutbox) Append(payload []byte, rows int) error {
	o.rows.Add(int64(rows))
	return o.Outbox.Append(payload, rows)
}

// TestLocalBackend runs the write path with the embedded rollup store as a
// local backend: rows go straight into it, a failed insert waits in the
// outbox and is retried, and only when the outbox cannot take them either
// are they dropped with their day marked dirty. Nothing observed is lost
// silently.
func TestLocalBackend(t *testing.T) {
	tests := []struct {
		name         string
		fail         int   // inserts that fail; -1: all
		outboxBytes  int64 // bound of the outbox
		leftover     bool  // the outbox holds a record from an earlier run
		wantAppended bool  // rows went through the outbox
		wantStored   bool  // every reading is counted in the store
		wantDirty    bool  // the day is marked dirty
		wantDropped  string
	}{
		{name: "healthy store: no outbox write", fail: 0, outboxBytes: 64 << 20, wantStored: true},
		{name: "failed inserts wait in the outbox and are retried", fail: 2, outboxBytes: 64 << 20, wantAppended: true, wantStored: true},
		{name: "failing store and full outbox: dropped, day dirty", fail: -1, outboxBytes: 16, wantAppended: true, wantDirty: true, wantDropped: "outbox_full"},
		{name: "records of an earlier run are delivered", fail: 0, outboxBytes: 64 << 20, leftover: true, wantStored: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
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
			ob, err := outbox.Open(filepath.Join(dir, "outbox"), tc.outboxBytes, quiet)
			if err != nil {
				t.Fatal(err)
			}
			defer ob.Close()
			day := model.DayOf(base.UnixMilli())
			leftover := rollup.Row{Key: rollup.Key{Tenant: "old", Device: "d", Metric: "m", Minute: base.UnixMilli()}, Part: 1, Count: 2, Sum: 2, Min: 1, Max: 1, Version: 1}
			if tc.leftover {
				if err := ob.Append(rollup.EncodeRows(nil, []rollup.Row{leftover}), 1); err != nil {
					t.Fatal(err)
				}
			}
			dst := &failingStore{Store: emb, fail: tc.fail}
			cob := &countingOutbox{Outbox: ob}
			cfg := testConfig()
			cfg.BatchRows = 50
			reg := prometheus.NewRegistry()
			feed := newFeed(t, cfg, raw, filepath.Join(dir, "marks"), cob, dst, reg, WithLocalBackend())
			sk := sink.New(sink.DefaultConfig(), buckets.DefaultConfig(), raw, quiet, reg, sink.WithCommitHook(feed))
			r := &rig{raw: raw, sink: sk}
			devices := []string{"a", "b", "c"}
			r.write(t, "acme", devices, base, 0, 150)
			written := uint64(150 * 2 * len(devices))
			cctx, cancel := context.WithTimeout(ctx, time.Minute)
			defer cancel()
			if err := sk.Close(cctx); err != nil {
				t.Fatal(err)
			}
			if err := feed.Close(cctx); err != nil {
				t.Fatal(err)
			}

			stored, err := emb.Rows(ctx, rollup.Filter{Tenant: "acme", From: base.UnixMilli(), To: base.Add(time.Hour).UnixMilli()})
			if err != nil {
				t.Fatal(err)
			}
			var counted uint64
			for _, x := range stored {
				counted += x.Count
			}
			if tc.wantStored && counted != written {
				t.Errorf("the store counts %d readings, %d were written", counted, written)
			}
			if !tc.wantStored && counted != 0 {
				t.Errorf("the store counts %d readings, want none", counted)
			}
			if got := cob.rows.Load() > 0; got != tc.wantAppended {
				t.Errorf("rows appended to the outbox: %d, want some: %t", cob.rows.Load(), tc.wantAppended)
			}
			if d := ob.Depth(); d.Records != 0 {
				t.Errorf("outbox holds %+v after Close, want nothing", d)
			}
			dirty, err := ob.Dirty()
			if err != nil {
				t.Fatal(err)
			}
			var wantDirty []outbox.DirtyDay
			if tc.wantDirty {
				wantDirty = []outbox.DirtyDay{{Tenant: "acme", Day: day}}
			}
			if diff := cmp.Diff(wantDirty, dirty); diff != "" {
				t.Errorf("dirty days (-want +got):\n%s", diff)
			}
			emitted := testutil.ToFloat64(feed.m.emitted)
			if tc.wantDropped != "" {
				if got := testutil.ToFloat64(feed.m.dropped.WithLabelValues(tc.wantDropped)); got != emitted || got == 0 {
					t.Errorf("dropped{reason=%q} = %v, want every emitted row (%v)", tc.wantDropped, got, emitted)
				}
			} else {
				want := emitted
				if tc.leftover {
					want++
				}
				if got := testutil.ToFloat64(feed.m.shipped); got != want {
					t.Errorf("shipped %v rows, want %v", got, want)
				}
			}
			if tc.leftover {
				got, err := emb.Rows(ctx, rollup.Filter{Tenant: "old", From: base.UnixMilli(), To: base.Add(time.Hour).UnixMilli()})
				if err != nil {
					t.Fatal(err)
				}
				if diff := cmp.Diff([]rollup.Row{leftover}, got); diff != "" {
					t.Errorf("leftover record (-want +got):\n%s", diff)
				}
			}
		})
	}
}
