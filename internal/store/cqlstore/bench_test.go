package cqlstore_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	gocql "github.com/apache/cassandra-gocql-driver/v2"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice/internal/buckets"
	"github.com/sluicehq/sluice/internal/model"
	"github.com/sluicehq/sluice/internal/sink"
)

// Write throughput into Cassandra: the sink over cqlstore (what HTTP and
// MQTT ingest call) beside the limit, a minimal gocql writer inserting the
// same rows with the same batching (UNLOGGED batches of batch_rows rows of
// one partition, the same number of requests in flight) into the same
// node. Run both in one invocation (docs/benchmarks.md):
//
//	go test -run '^$' -bench 'Write' -benchtime 20x ./internal/store/cqlstore/

const (
	benchDevices  = 50   // devices per iteration
	benchReadings = 400  // readings per device per iteration, 2 metrics each
	benchClients  = 8    // concurrent writers (HTTP requests in flight)
	benchPerReq   = 1000 // readings per request
)

func benchReading(i, dev int, base int64) model.Reading {
	return model.Reading{DeviceID: fmt.Sprintf("dev-%03d", dev), TS: base + int64(i), Seq: int64(i), HasSeq: true,
		Metrics: []model.Metric{{Name: "temp", Value: float64(i)}, {Name: "volt", Value: 3.3}}}
}

func BenchmarkWriteSink(b *testing.B) {
	st := openStore(b, nil)
	bcfg := buckets.DefaultConfig()
	bcfg.PerWriterSingle = true
	scfg := sink.DefaultConfig()
	scfg.Commits = 8 // as docs/operations.md advises for Cassandra
	sk := sink.New(scfg, bcfg, st, discard, prometheus.NewRegistry())
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		_ = sk.Close(ctx)
	}()
	tenant := unique(b)
	base := int64(20_600) * model.MillisPerDay
	iter := 0
	start := time.Now()
	for b.Loop() {
		// Every request holds benchPerReq readings of consecutive devices.
		var all []model.Reading
		for d := range benchDevices {
			for i := range benchReadings {
				all = append(all, benchReading(iter*benchReadings+i, d, base))
			}
		}
		iter++
		reqs := make(chan []model.Reading, len(all)/benchPerReq+1)
		for len(all) > 0 {
			n := min(benchPerReq, len(all))
			reqs <- all[:n]
			all = all[n:]
		}
		close(reqs)
		var wg sync.WaitGroup
		for range benchClients {
			wg.Go(func() {
				for rs := range reqs {
					if err := sk.Write(context.Background(), &sink.Request{Tenant: tenant, Readings: rs}); err != nil {
						b.Error(err)
						return
					}
				}
			})
		}
		wg.Wait()
	}
	rows := float64(iter * benchDevices * benchReadings * 2)
	b.ReportMetric(rows/time.Since(start).Seconds(), "rows/s")
}

func BenchmarkWriteDirectGocql(b *testing.B) {
	st := openStore(b, nil)
	sess := st.Session()
	cfg := testCfg
	tenant := unique(b)
	base := int64(20_600) * model.MillisPerDay
	day := model.DayOf(base)
	const ins = `INSERT INTO readings (tenant, device, day, sub, ts, metric, value, vtype, ivalue, svalue, seq, has_seq) VALUES (?, ?, ?, ?, ?, ?, ?, 0, 0, '', ?, ?)`
	sem := make(chan struct{}, cfg.MaxConcurrentRequests)
	iter := 0
	start := time.Now()
	for b.Loop() {
		var wg sync.WaitGroup
		for d := range benchDevices {
			// One partition per device-day, as the sink's quiet partitions.
			var entries []gocql.BatchEntry
			for i := range benchReadings {
				r := benchReading(iter*benchReadings+i, d, base)
				for _, m := range r.Metrics {
					entries = append(entries, gocql.BatchEntry{Stmt: ins, Idempotent: true,
						Args: []any{tenant, r.DeviceID, day.Start(), int32(0), r.TS, m.Name, m.Value, r.Seq, true}})
				}
			}
			for len(entries) > 0 {
				n := min(cfg.BatchRows, len(entries))
				chunk := entries[:n]
				entries = entries[n:]
				sem <- struct{}{}
				wg.Go(func() {
					defer func() { <-sem }()
					bt := sess.Batch(gocql.UnloggedBatch).Consistency(gocql.LocalQuorum)
					bt.Entries = chunk
					if err := bt.ExecContext(context.Background()); err != nil {
						b.Error(err)
					}
				})
			}
		}
		wg.Wait()
		iter++
	}
	rows := float64(iter * benchDevices * benchReadings * 2)
	b.ReportMetric(rows/time.Since(start).Seconds(), "rows/s")
}
