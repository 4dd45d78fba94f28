package main

// The HTTP → durable store benchmark and its limit, for docs/benchmarks.md.
// Run both in one invocation so they share the machine's state:
//
//	go test -run='^$' -bench='HTTPIngest|PebbleLimit' -benchtime=20000x -count=3 ./cmd/ingest
//
// Both write the same rows: NDJSON requests of 1,000 readings (2 metrics
// each, so 2,000 rows) from 10,000 devices, by 4 concurrent writers. The
// limit writes the same keys straight into Pebble, one synced batch per
// 1,000 readings, with no HTTP, decoding, bucketing or catalogue.

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"log/slog"
	"math"
	"math/rand/v2"
	"net/http"
	"os"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"

	"github.com/sluicehq/sluice/internal/config"
)

const (
	benchReadings = 1000 // per request / batch
	benchDevices  = 10000
	benchWriters  = 4
	benchBodies   = 64
)

type benchReading struct {
	device string
	ts     int64
	rpm    float64
	temp   float64
}

// benchData returns benchBodies requests of benchReadings readings each.
func benchData() ([][]benchReading, [][]byte) { return benchDataOf(benchDevices) }

// benchDataOf is benchData with readings from devices devices.
func benchDataOf(devices int) ([][]benchReading, [][]byte) {
	rng := rand.New(rand.NewPCG(7, 11))
	base := time.Now().UTC().Truncate(24 * time.Hour).Add(-24 * time.Hour).UnixMilli()
	reqs := make([][]benchReading, benchBodies)
	bodies := make([][]byte, benchBodies)
	for i := range reqs {
		var b bytes.Buffer
		for j := range benchReadings {
			r := benchReading{
				device: fmt.Sprintf("dev-%06d", rng.IntN(devices)),
				ts:     base + int64(rng.IntN(86_400_000)),
				rpm:    float64(rng.IntN(3000)),
				temp:   float64(rng.IntN(1000)) / 10,
			}
			reqs[i] = append(reqs[i], r)
			fmt.Fprintf(&b, `{"device_id":%q,"ts":%q,"seq":%d,"metrics":{"rpm":%g,"temp_c":%g}}`+"\n",
				r.device, time.UnixMilli(r.ts).UTC().Format("2006-01-02T15:04:05.000Z"), j, r.rpm, r.temp)
		}
		bodies[i] = b.Bytes()
	}
	return reqs, bodies
}

func BenchmarkHTTPIngest(b *testing.B) {
	_, bodies := benchData()
	// Defaults, with SLUICE_* environment overrides to try other settings.
	cfg, _, err := config.Load("", os.Environ())
	if err != nil {
		b.Fatal(err)
	}
	cfg.DataDir = b.TempDir()
	cfg.HTTP.Addr = "127.0.0.1:0"
	cfg.Auth.Tokens = []config.Token{{Token: "bench-token", Tenant: "bench"}}
	ctx, cancel := context.WithCancel(context.Background())
	addr := make(chan string, 1)
	done := make(chan error, 1)
	go func() {
		done <- serve(ctx, cfg, "", slog.New(slog.DiscardHandler), func(a string) { addr <- a })
	}()
	url := "http://" + <-addr + "/v1/readings"
	tr := &http.Transport{MaxIdleConnsPerHost: benchWriters}
	hc := &http.Client{Transport: tr}
	var n atomic.Int64
	post := func(body []byte) {
		req, _ := http.NewRequest(http.MethodPost, url, bytes.NewReader(body))
		req.Header.Set("Authorization", "Bearer bench-token")
		req.Header.Set("Content-Type", "application/x-ndjson")
		resp, err := hc.Do(req)
		if err != nil {
			b.Error(err)
			return
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusAccepted {
			b.Errorf("status %d", resp.StatusCode)
		}
	}
	var bytesPerReq int64
	for _, body := range bodies {
		bytesPerReq += int64(len(body))
	}
	b.SetBytes(bytesPerReq / int64(len(bodies)))
	b.SetParallelism(benchWriters / max(1, runtimeProcs()))
	b.ResetTimer()
	start := time.Now()
	b.RunParallel(func(pb *testing.PB) {
		i := int(n.Add(1))
		for pb.Next() {
			post(bodies[i%len(bodies)])
			i += benchWriters
		}
	})
	elapsed := time.Since(start)
	b.StopTimer()
	b.ReportMetric(float64(b.N*benchReadings)/elapsed.Seconds(), "readings/s")
	cancel()
	if err := <-done; err != nil {
		b.Fatal(err)
	}
}

func BenchmarkPebbleLimit(b *testing.B) {
	reqs, bodies := benchData()
	db, err := pebble.Open(b.TempDir(), &pebble.Options{
		Cache: pebble.NewCache(64 << 20), MemTableSize: 64 << 20, MemTableStopWritesThreshold: 4,
		FormatMajorVersion: pebble.FormatNewest, Logger: quietLogger{},
	})
	if err != nil {
		b.Fatal(err)
	}
	defer db.Close()
	var bytesPerReq int64
	for _, body := range bodies {
		bytesPerReq += int64(len(body))
	}
	b.SetBytes(bytesPerReq / int64(len(bodies)))
	var n atomic.Int64
	b.SetParallelism(benchWriters / max(1, runtimeProcs()))
	b.ResetTimer()
	start := time.Now()
	b.RunParallel(func(pb *testing.PB) {
		i := int(n.Add(1))
		var key, val []byte
		for pb.Next() {
			batch := db.NewBatch()
			for _, r := range reqs[i%len(reqs)] {
				for _, m := range [2]struct {
					name string
					v    float64
				}{{"rpm", r.rpm}, {"temp_c", r.temp}} {
					key = append(key[:0], 'r')
					key = binary.BigEndian.AppendUint32(key, uint32(r.ts/86_400_000)^1<<31)
					key = append(key, "bench\x00"...)
					key = append(key, r.device...)
					key = append(key, 0, 0, 0, 0, 0)
					key = binary.BigEndian.AppendUint64(key, uint64(r.ts)^1<<63)
					key = append(key, m.name...)
					val = append(val[:0], 1)
					val = binary.BigEndian.AppendUint64(val, math.Float64bits(m.v))
					val = binary.AppendVarint(val, 1)
					if err := batch.Set(key, val, nil); err != nil {
						b.Error(err)
					}
				}
			}
			if err := batch.Commit(pebble.Sync); err != nil {
				b.Error(err)
			}
			_ = batch.Close()
			i += benchWriters
		}
	})
	elapsed := time.Since(start)
	b.StopTimer()
	b.ReportMetric(float64(b.N*benchReadings)/elapsed.Seconds(), "readings/s")
}

type quietLogger struct{}

func (quietLogger) Infof(string, ...any)  {}
func (quietLogger) Errorf(string, ...any) {}
func (quietLogger) Fatalf(format string, args ...any) {
	panic(fmt.Sprintf(format, args...))
}

func runtimeProcs() int { return runtime.GOMAXPROCS(0) }
