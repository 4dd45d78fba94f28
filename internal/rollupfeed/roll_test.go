package rollupfeed

import (
	"context"
	"errors"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice/internal/buckets"
	"github.com/sluicehq/sluice/internal/model"
	"github.com/sluicehq/sluice/internal/reader"
	"github.com/sluicehq/sluice/internal/rollup"
	"github.com/sluicehq/sluice/internal/sink"
)

// failNthRead fails the n-th catalogue read of device (counting from 1),
// and only that one.
type failNthRead struct {
	reader.Store
	device string
	n      int
	mu     sync.Mutex
	reads  int
}

func (f *failNthRead) Catalogue(ctx context.Context, sd model.SeriesDay) ([]model.PartitionInfo, error) {
	f.mu.Lock()
	if sd.Series == f.device {
		f.reads++
		if f.reads == f.n {
			f.mu.Unlock()
			return nil, errors.New("store unavailable")
		}
	}
	f.mu.Unlock()
	return f.Store.Catalogue(ctx, sd)
}

// A recompute collects one reader's devices in one slice: a device whose
// second range read fails leaves none of its rows there (not even those of
// its first read), is returned as failed, and the devices after it keep
// theirs.
func TestRecomputeLeavesNoRowsOfAFailedDevice(t *testing.T) {
	dir := t.TempDir()
	raw := openRaw(t, dir)
	sk := sink.New(sink.DefaultConfig(), buckets.DefaultConfig(), raw, quiet, prometheus.NewRegistry())
	r := &rig{raw: raw, sink: sk}
	devices := []string{"a", "b", "c"}
	r.write(t, "acme", devices, base, 0, 60)      // minute 0
	r.write(t, "acme", devices, base, 1200, 1260) // minute 20: a second range read
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := sk.Close(ctx); err != nil {
		t.Fatal(err)
	}
	emb, ob := openLocal(t)
	defer ob.Close()
	cfg := testConfig()
	cfg.ReadConcurrency = 1 // one reader: the three devices share its slice
	src := &failNthRead{Store: raw, device: "b", n: 2}
	feed := newFeed(t, cfg, src, filepath.Join(dir, "marks"), ob, emb, prometheus.NewRegistry(), WithLocalBackend())
	defer func() { _ = feed.Close(ctx) }()

	m0, m20 := base.UnixMilli(), base.Add(20*time.Minute).UnixMilli()
	var devs []*pendingDevice
	for _, d := range devices {
		devs = append(devs, &pendingDevice{tenant: "acme", device: d, minutes: []pendingMinute{{minute: m0}, {minute: m20}}})
	}
	rows, failed := feed.recompute(ctx, devs, 1)
	if len(failed) != 1 || failed[0].device != "b" {
		t.Fatalf("failed devices %v, want b alone", failed)
	}
	got := map[string]int{}
	for _, rs := range rows {
		for _, row := range rs {
			got[row.Device]++
			if row.Minute != m0 && row.Minute != m20 {
				t.Errorf("row of %s at minute %d, not a marked one", row.Device, row.Minute)
			}
		}
	}
	// Two metrics in each of two minutes.
	if want := map[string]int{"a": 4, "c": 4}; len(got) != len(want) || got["a"] != 4 || got["c"] != 4 {
		t.Errorf("rows per device %v, want %v", got, want)
	}
	for _, rs := range rows {
		for _, row := range rs {
			if row.Count != 60 {
				t.Errorf("row %s/%s/%d counts %d values, want 60", row.Device, row.Metric, row.Minute, row.Count)
			}
			if row.Writer != rollup.RebuildWriter {
				t.Errorf("row %s/%s/%d written by %d", row.Device, row.Metric, row.Minute, row.Writer)
			}
		}
	}
}
