package rollupfeed

import (
	"context"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/sluicehq/sluice/internal/buckets"
	"github.com/sluicehq/sluice/internal/model"
	"github.com/sluicehq/sluice/internal/outbox"
	"github.com/sluicehq/sluice/internal/rollmarks"
	"github.com/sluicehq/sluice/internal/rollup"
	"github.com/sluicehq/sluice/internal/sink"
	"github.com/sluicehq/sluice/internal/store/pebblestore"
)

// BenchmarkIngest measures durable ingest (sink + embedded store, fsync on
// every commit) of 1 Hz devices with two metrics, with rollups off and on
// (recomputed from the raw store after each commit, written to the
// outbox, shipped to ClickHouse). Compare rows/s of the two.
func BenchmarkIngest(b *testing.B) {
	for _, mode := range []string{"rollups=off", "rollups=on"} {
		b.Run(mode, func(b *testing.B) {
			dir := b.TempDir()
			raw, err := pebblestore.Open(filepath.Join(dir, "raw"), pebblestore.Options{}, quiet)
			if err != nil {
				b.Fatal(err)
			}
			defer raw.Close()
			var opts []sink.Option
			var feed *Feed
			var dst Backend
			var ob *outbox.Outbox
			if mode == "rollups=on" {
				requireServer(b, false)
				ch := openCH(b)
				dst = ch
				ob, err = outbox.Open(filepath.Join(dir, "outbox"), 1<<30, quiet)
				if err != nil {
					b.Fatal(err)
				}
				defer ob.Close()
				marks, err := rollmarks.Open(filepath.Join(dir, "marks"), quiet)
				if err != nil {
					b.Fatal(err)
				}
				defer marks.Close()
				cfg := DefaultConfig()
				cfg.RollDelay, cfg.PastRollDelay = 0, 0
				feed, err = New(cfg, raw, marks, ob, ch, time.Now, quiet, prometheus.NewRegistry())
				if err != nil {
					b.Fatal(err)
				}
				opts = append(opts, sink.WithCommitHook(feed))
			}
			sk := sink.New(sink.DefaultConfig(), buckets.DefaultConfig(), raw, quiet, prometheus.NewRegistry(), opts...)
			// Each iteration: 8 concurrent requests (clients), each 1,000
			// readings (100 devices x 10 seconds) of 2 metrics.
			const clients, devices, seconds = 8, 100, 10
			start := time.Now().Add(-6 * time.Hour).Truncate(time.Hour)
			sec := 0
			rows := 0
			t0 := time.Now()
			for b.Loop() {
				var wg sync.WaitGroup
				errs := make(chan error, clients)
				for c := range clients {
					req := &sink.Request{Tenant: "bench"}
					for s := sec; s < sec+seconds; s++ {
						ts := start.Add(time.Duration(s) * time.Second).UnixMilli()
						for d := c * devices; d < (c+1)*devices; d++ {
							req.Readings = append(req.Readings, model.Reading{DeviceID: deviceName(d), TS: ts,
								Metrics: []model.Metric{{Name: "power", Value: float64(s % 11)}, {Name: "temp", Value: float64(d + s%60)}}})
						}
					}
					rows += req.Rows()
					wg.Go(func() {
						if err := sk.Write(context.Background(), req); err != nil {
							errs <- err
						}
					})
				}
				wg.Wait()
				close(errs)
				if err := <-errs; err != nil {
					b.Fatal(err)
				}
				sec += seconds
			}
			elapsed := time.Since(t0)
			b.ReportMetric(float64(rows)/elapsed.Seconds(), "rows/s")
			ctx := context.Background()
			if err := sk.Close(ctx); err != nil {
				b.Fatal(err)
			}
			if feed != nil {
				if err := feed.Close(ctx); err != nil {
					b.Fatal(err)
				}
				emitted := uint64(0)
				if m := feed.m; m != nil {
					emitted = uint64(counterValue(m.emitted))
				}
				if emitted > 0 {
					b.ReportMetric(float64(rows)/float64(emitted), "raw-rows/emitted-row")
				}
				stored, err := dst.Rows(ctx, rollup.Filter{Tenant: "bench", From: start.UnixMilli(), To: start.Add(24 * time.Hour).UnixMilli()})
				if err != nil {
					b.Fatal(err)
				}
				var counted uint64
				for _, r := range stored {
					counted += r.Count
				}
				if counted != uint64(rows) {
					b.Errorf("rollups count %d readings, %d were written", counted, rows)
				}
				b.ReportMetric(float64(rows)/float64(len(stored)), "raw-rows/stored-row")
			}
		})
	}
}

func deviceName(d int) string { return fmt.Sprintf("dev-%04d", d) }

// BenchmarkClickHouseInsert measures rollup rows/s into ClickHouse, in
// inserts of 50,000 rows (rollups.batch_rows).
func BenchmarkClickHouseInsert(b *testing.B) {
	requireServer(b, false)
	ch := openCH(b)
	const n = 50_000
	rows := make([]rollup.Row, n)
	base := time.Now().Add(-24 * time.Hour).Truncate(time.Hour).UnixMilli()
	version := uint64(1)
	total := 0
	t0 := time.Now()
	for b.Loop() {
		for i := range rows {
			rows[i] = rollup.Row{Key: rollup.Key{Tenant: "bench", Device: deviceName(i % 500), Metric: "temp",
				Minute: base + int64(i/500)*rollup.MinuteMillis}, Part: 1, Count: 60, Sum: 600, Min: 1, Max: 20,
				FirstTS: base, FirstValue: 1, LastTS: base + 59_000, LastValue: 20, Version: version}
		}
		version++
		if err := ch.Insert(context.Background(), rows); err != nil {
			b.Fatal(err)
		}
		total += n
	}
	b.ReportMetric(float64(total)/time.Since(t0).Seconds(), "rows/s")
}

func counterValue(c prometheus.Counter) float64 {
	ch := make(chan prometheus.Metric, 1)
	c.Collect(ch)
	m := <-ch
	var pb dto.Metric
	_ = m.Write(&pb)
	return pb.GetCounter().GetValue()
}
