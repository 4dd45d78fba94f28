package rollupfeed

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice/internal/buckets"
	"github.com/sluicehq/sluice/internal/model"
	"github.com/sluicehq/sluice/internal/reader"
	"github.com/sluicehq/sluice/internal/rollup"
	"github.com/sluicehq/sluice/internal/sink"
	"github.com/sluicehq/sluice/internal/store"
	"github.com/sluicehq/sluice/internal/store/pebblestore"
)

// countedReads counts the partitions a read session streamed.
type countedReads struct {
	*pebblestore.Reads
	streamed int
}

func (c *countedReads) EachReading(ctx context.Context, pk model.PartitionKey, r store.Range, fn func(name []byte, row *model.ReadingRow) error) (bool, error) {
	whole, err := c.Reads.EachReading(ctx, pk, r, fn)
	if whole {
		c.streamed++
	}
	return whole, err
}

// A recompute that streams a partition's values into its rows makes the
// rows a recompute through the reader makes, for typed values, and falls
// back to the reader when a run spans two partitions (copies of a reading
// in both, which the reader merges) or two days.
func TestStreamedRecomputeMatchesReader(t *testing.T) {
	dir := t.TempDir()
	raw := openRaw(t, dir)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var rigs []*rig
	for w := 1; w <= 2; w++ {
		bcfg := buckets.DefaultConfig()
		bcfg.Writer, bcfg.PerWriterSingle = w, true
		sk := sink.New(sink.DefaultConfig(), bcfg, raw, quiet, prometheus.NewRegistry())
		defer func() { _ = sk.Close(ctx) }()
		rigs = append(rigs, &rig{raw: raw, sink: sk})
	}
	midnight := base.Truncate(24 * time.Hour).Add(24 * time.Hour)
	if midnight.Sub(base) < 2*time.Hour { // the late device's minutes must not overlap the others'
		midnight = midnight.Add(24 * time.Hour)
	}
	rigs[0].write(t, "acme", []string{"one", "two"}, base, 0, 180)
	rigs[1].write(t, "acme", []string{"two"}, base, 60, 120) // copies in a second partition
	rigs[0].write(t, "acme", []string{"late"}, midnight.Add(-90*time.Second), 0, 180)
	typed := &sink.Request{Tenant: "acme", Readings: []model.Reading{
		{DeviceID: "one", TS: base.Add(10 * time.Second).UnixMilli(), Metrics: []model.Metric{model.IntMetric("count", -3), model.BoolMetric("on", true), model.StringMetric("state", "idle")}},
		{DeviceID: "one", TS: base.Add(70 * time.Second).UnixMilli(), Metrics: []model.Metric{model.IntMetric("count", 9), model.StringMetric("state", "busy")}},
	}}
	if err := rigs[0].sink.Write(ctx, typed); err != nil {
		t.Fatal(err)
	}

	emb, ob := openLocal(t)
	defer ob.Close()
	f := newFeed(t, testConfig(), raw, t.TempDir(), ob, emb, prometheus.NewRegistry(), WithLocalBackend())
	defer func() { _ = f.Close(ctx) }()
	pending := func(device string, start time.Time) *pendingDevice {
		d := &pendingDevice{tenant: "acme", device: device}
		for m := range 3 {
			d.minutes = append(d.minutes, pendingMinute{minute: start.Add(time.Duration(m) * time.Minute).UnixMilli()})
		}
		return d
	}
	for _, c := range []struct {
		device   string
		start    time.Time
		streamed int
	}{
		{"one", base, 1},
		{"two", base, 0},
		{"late", midnight.Add(-2 * time.Minute), 0},
	} {
		var sc scratch
		want, err := f.recomputeDevice(ctx, raw, &sc, pending(c.device, c.start), 7, nil)
		if err != nil {
			t.Fatal(err)
		}
		rs, err := raw.NewReads(ctx)
		if err != nil {
			t.Fatal(err)
		}
		counted := &countedReads{Reads: rs}
		got, err := f.recomputeDevice(ctx, counted, &sc, pending(c.device, c.start), 7, []rollup.Row{})
		_ = rs.Close()
		if err != nil {
			t.Fatal(err)
		}
		if len(want) < 6 {
			t.Fatalf("%s: %d rows through the reader, want at least 6", c.device, len(want))
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("%s: streamed rows differ (-reader +streamed):\n%s", c.device, diff)
		}
		if counted.streamed != c.streamed {
			t.Errorf("%s: %d partitions streamed, want %d", c.device, counted.streamed, c.streamed)
		}
	}
}

// partialReads streams a partition's first cells, then says it cannot
// stream the rest, as EachReading does on reaching a per-metric key of an
// older store.
type partialReads struct {
	*pebblestore.Reads
	cells int
}

func (p *partialReads) EachReading(ctx context.Context, pk model.PartitionKey, r store.Range, fn func(name []byte, row *model.ReadingRow) error) (bool, error) {
	n := 0
	_, err := p.Reads.EachReading(ctx, pk, r, func(name []byte, row *model.ReadingRow) error {
		if n++; n > p.cells {
			return errStop
		}
		return fn(name, row)
	})
	if err != nil && !errors.Is(err, errStop) {
		return false, err
	}
	return false, nil
}

var errStop = errors.New("stop")

// A partition streamed in part before the stream gives up (an older
// store's per-metric key among the readings) leaves no row of that part:
// the run is read again through the reader, and the rows already in dst
// stay as they were.
func TestPartlyStreamedRunFallsBack(t *testing.T) {
	raw := openRaw(t, t.TempDir())
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	sk := sink.New(sink.DefaultConfig(), buckets.DefaultConfig(), raw, quiet, prometheus.NewRegistry())
	defer func() { _ = sk.Close(ctx) }()
	(&rig{raw: raw, sink: sk}).write(t, "acme", []string{"one"}, base, 0, 180)
	emb, ob := openLocal(t)
	defer ob.Close()
	f := newFeed(t, testConfig(), raw, t.TempDir(), ob, emb, prometheus.NewRegistry(), WithLocalBackend())
	defer func() { _ = f.Close(ctx) }()
	d := func() *pendingDevice {
		return &pendingDevice{tenant: "acme", device: "one", minutes: []pendingMinute{{minute: base.UnixMilli()}, {minute: base.Add(time.Minute).UnixMilli()}}}
	}
	var sc scratch
	want, err := f.recomputeDevice(ctx, raw, &sc, d(), 7, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(want) < 2 {
		t.Fatalf("%d rows through the reader, want at least 2", len(want))
	}
	before := rollup.Row{Key: rollup.Key{Tenant: "acme", Device: "other", Metric: "m", Minute: 1}, Count: 1}
	for _, cells := range []int{0, 1, 5} {
		rs, err := raw.NewReads(ctx)
		if err != nil {
			t.Fatal(err)
		}
		got, err := f.recomputeDevice(ctx, &partialReads{Reads: rs, cells: cells}, &sc, d(), 7, []rollup.Row{before})
		_ = rs.Close()
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(append([]rollup.Row{before}, want...), got); diff != "" {
			t.Errorf("%d cells streamed before the fallback (-want +got):\n%s", cells, diff)
		}
	}
}

// readerOnly hides a read session's EachReading: recomputes through it read
// rows and readings, as before streaming.
type readerOnly struct{ reader.Store }

// BenchmarkRecomputeMinute measures the recompute of one device-minute
// holding one reading of six metrics (what every reading costs at a
// million devices a day), through a read session, with the values
// streamed into the rows and through the reader.
func BenchmarkRecomputeMinute(b *testing.B) {
	ctx := context.Background()
	raw, err := pebblestore.Open(filepath.Join(b.TempDir(), "raw"), pebblestore.Options{NoSync: true}, quiet)
	if err != nil {
		b.Fatal(err)
	}
	defer raw.Close()
	sk := sink.New(sink.DefaultConfig(), buckets.DefaultConfig(), raw, quiet, prometheus.NewRegistry())
	const devices = 2000
	at := base.Add(30 * time.Second).UnixMilli()
	req := &sink.Request{Tenant: "acme"}
	var devs []*pendingDevice
	for d := range devices {
		id := fmt.Sprintf("dev-%05d", d)
		req.Readings = append(req.Readings, model.Reading{DeviceID: id, TS: at, Metrics: []model.Metric{
			{Name: "temp_c", Value: 21.5}, {Name: "humidity", Value: 40}, {Name: "rpm", Value: 1200},
			{Name: "voltage", Value: 230}, {Name: "rssi", Value: -60}, {Name: "battery", Value: 88},
		}})
		devs = append(devs, &pendingDevice{tenant: "acme", device: id, minutes: []pendingMinute{{minute: rollup.MinuteOf(at)}}})
	}
	if err := sk.Write(ctx, req); err != nil {
		b.Fatal(err)
	}
	if err := sk.Close(ctx); err != nil {
		b.Fatal(err)
	}
	f := &Feed{m: newMetrics(nil, nil, nil)}
	for _, mode := range []string{"streamed", "reader"} {
		b.Run(mode, func(b *testing.B) {
			rs, err := raw.NewReads(ctx)
			if err != nil {
				b.Fatal(err)
			}
			defer rs.Close()
			var src reader.Store = rs
			if mode == "reader" {
				src = readerOnly{rs}
			}
			var sc scratch
			var rows []rollup.Row
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				if rows, err = f.recomputeDevice(ctx, src, &sc, devs[i%devices], 1, rows[:0]); err != nil || len(rows) != 6 {
					b.Fatalf("%d rows, %v", len(rows), err)
				}
			}
		})
	}
}
