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
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"

	"github.com/sluicehq/sluice/internal/config"
	"github.com/sluicehq/sluice/internal/membudget"
	"github.com/sluicehq/sluice/internal/model"
	"github.com/sluicehq/sluice/internal/store/pebblestore"
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

// benchDataOf returns benchBodies requests of benchReadings readings each,
// from devices devices, scattered at random over yesterday.
func benchDataOf(devices int) ([][]benchReading, [][]byte) {
	return benchBackfill(benchBodies, devices)
}

// benchBackfill returns n distinct requests of benchReadings readings each,
// from devices devices, scattered at random over yesterday.
func benchBackfill(n, devices int) ([][]benchReading, [][]byte) {
	rng := rand.New(rand.NewPCG(7, 11))
	base := time.Now().UTC().Truncate(24 * time.Hour).Add(-24 * time.Hour).UnixMilli()
	reqs := make([][]benchReading, n)
	bodies := make([][]byte, n)
	for i := range reqs {
		b := make([]byte, 0, 110*benchReadings)
		reqs[i] = make([]benchReading, 0, benchReadings)
		for j := range benchReadings {
			r := benchReading{
				device: fmt.Sprintf("dev-%06d", rng.IntN(devices)),
				ts:     base + int64(rng.IntN(86_400_000)),
				rpm:    float64(rng.IntN(3000)),
				temp:   float64(rng.IntN(1000)) / 10,
			}
			reqs[i] = append(reqs[i], r)
			b = appendBenchReading(b, r, j)
		}
		bodies[i] = b
	}
	return reqs, bodies
}

// The two workloads. live: a fleet reporting as it goes, every device once
// per benchLiveEvery, so each request carries the next 1,000 readings in
// time order (request k holds readings k*1000..k*1000+999 of the stream, as
// many distinct bodies as the run posts). backfill: readings scattered at
// random over a whole past day, every body distinct (as many as the run
// posts: a run that posted a few bodies in turn would send most readings
// again, which the store overwrites and the rollups count once).
const benchLiveEvery = 10 * time.Second

// benchLive returns n requests of the live workload for devices devices,
// starting two hours ago.
func benchLive(n, devices int) ([][]benchReading, [][]byte) {
	rng := rand.New(rand.NewPCG(3, 5))
	step := benchLiveEvery.Milliseconds() / int64(devices)
	base := time.Now().UTC().Add(-2 * time.Hour).Truncate(time.Minute).UnixMilli()
	reqs := make([][]benchReading, n)
	bodies := make([][]byte, n)
	for i := range reqs {
		b := make([]byte, 0, 110*benchReadings)
		reqs[i] = make([]benchReading, 0, benchReadings)
		for j := range benchReadings {
			k := i*benchReadings + j
			r := benchReading{
				device: "dev-" + fmt.Sprintf("%06d", k%devices),
				ts:     base + int64(k)*max(step, 1),
				rpm:    float64(rng.IntN(3000)),
				temp:   float64(rng.IntN(1000)) / 10,
			}
			reqs[i] = append(reqs[i], r)
			b = appendBenchReading(b, r, j)
		}
		bodies[i] = b
	}
	return reqs, bodies
}

func appendBenchReading(b []byte, r benchReading, seq int) []byte {
	b = append(b, `{"device_id":"`...)
	b = append(b, r.device...)
	b = append(b, `","ts":"`...)
	b = time.UnixMilli(r.ts).UTC().AppendFormat(b, "2006-01-02T15:04:05.000Z")
	b = append(b, `","seq":`...)
	b = strconv.AppendInt(b, int64(seq), 10)
	b = append(b, `,"metrics":{"rpm":`...)
	b = strconv.AppendFloat(b, r.rpm, 'g', -1, 64)
	b = append(b, `,"temp_c":`...)
	b = strconv.AppendFloat(b, r.temp, 'g', -1, 64)
	return append(b, "}}\n"...)
}

// benchWorkload returns the requests of one workload for a run of n.
func benchWorkload(name string, n int) ([][]benchReading, [][]byte) {
	if name == "live" {
		return benchLive(n, benchDevices)
	}
	return benchBackfill(n, benchDevices)
}

var benchWorkloads = []string{"live", "backfill"}

// BenchmarkHTTPIngest runs the gateway on each workload twice: with the
// default configuration (rollups on), and with rollups off, which is the
// HTTP → durable store path alone (rollups are computed after the commit,
// off the request path, and have their own budget: see docs/benchmarks.md).
func BenchmarkHTTPIngest(b *testing.B) {
	for _, w := range benchWorkloads {
		b.Run(w, func(b *testing.B) {
			for _, rollups := range []bool{true, false} {
				name := "rollups=on"
				if !rollups {
					name = "rollups=off"
				}
				b.Run(name, func(b *testing.B) { benchHTTPIngest(b, w, rollups) })
			}
		})
	}
}

func benchHTTPIngest(b *testing.B, workload string, rollups bool) {
	_, bodies := benchWorkload(workload, b.N)
	// Defaults, with SLUICE_* environment overrides to try other settings.
	cfg, _, err := config.Load("", os.Environ())
	if err != nil {
		b.Fatal(err)
	}
	cfg.DataDir = b.TempDir()
	cfg.Rollups.Enabled = cfg.Rollups.Enabled && rollups
	cfg.HTTP.Addr = "127.0.0.1:0"
	cfg.Auth.Tokens = []config.Token{{Token: "bench-token", Tenant: "bench"}}
	ctx, cancel := context.WithCancel(context.Background())
	addr := make(chan string, 1)
	done := make(chan error, 1)
	keepHeapUnlimited(b)
	go func() {
		done <- serve(ctx, cfg, "", slog.New(slog.DiscardHandler), func(a string) { addr <- a })
	}()
	url := "http://" + <-addr + "/v1/readings"
	tr := &http.Transport{MaxIdleConnsPerHost: benchWriters}
	hc := &http.Client{Transport: tr}
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
	b.SetBytes(meanLen(bodies))
	benchParallel(b, func(i int) { post(bodies[i%len(bodies)]) })
	metrics := strings.TrimSuffix(url, "/v1/readings") + "/metrics"
	if placed := scrapeCounter(b, hc, metrics, `sluice_sink_catalogue_entries_total{why="placed"}`); placed >= 0 {
		b.ReportMetric(placed/float64(b.N*benchReadings), "catalogue_entries/reading")
	}
	if emitted := scrapeCounter(b, hc, metrics, "sluice_rollup_rows_emitted_total"); emitted > 0 {
		b.ReportMetric(float64(b.N*benchReadings)/emitted, "readings/rollup_row")
		b.ReportMetric(scrapeCounter(b, hc, metrics, "sluice_rollup_raw_reads_total")/float64(b.N*benchReadings), "raw_reads/reading")
	}
	cancel()
	if err := <-done; err != nil {
		b.Fatal(err)
	}
}

// scrapeCounter returns the value of one sample of the gateway's /metrics,
// or -1 if it is not there.
func scrapeCounter(b *testing.B, hc *http.Client, url, sample string) float64 {
	resp, err := hc.Get(url)
	if err != nil {
		b.Fatal(err)
	}
	defer resp.Body.Close()
	text, err := io.ReadAll(resp.Body)
	if err != nil {
		b.Fatal(err)
	}
	for line := range strings.Lines(string(text)) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), sample+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				b.Fatalf("metric %s: %v", sample, err)
			}
			return f
		}
	}
	return -1
}

func meanLen(bodies [][]byte) int64 {
	var n int64
	for _, body := range bodies {
		n += int64(len(body))
	}
	return n / int64(len(bodies))
}

// benchParallel runs do(i) for i in 0..b.N-1 on benchWriters goroutines,
// each i once. A run lasts until the last request is acknowledged and then
// until the process is idle again: Pebble flushes and compacts in the
// background, and a run that stopped the clock at the last
// acknowledgement would leave that work unpaid, favouring whichever side
// finishes sooner. It reports readings/s over the whole run, and
// acked_readings/s up to the last acknowledgement.
func benchParallel(b *testing.B, do func(i int)) {
	var next atomic.Int64
	b.SetParallelism(benchWriters / max(1, runtimeProcs()))
	b.ResetTimer()
	start := time.Now()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			do(int(next.Add(1) - 1))
		}
	})
	acked := time.Since(start)
	idle := waitIdle(b).at.Sub(start)
	b.StopTimer()
	b.ReportMetric(float64(b.N*benchReadings)/idle.Seconds(), "readings/s")
	b.ReportMetric(float64(b.N*benchReadings)/acked.Seconds(), "acked_readings/s")
}

// idleAt is when the process became idle and the CPU time it had used.
type idleAt struct {
	at  time.Time
	cpu time.Duration
}

// waitIdle waits until the process used less than 5% of a core over
// idleWindow, and returns when that window began. It gives up after a
// minute.
func waitIdle(b *testing.B) idleAt {
	const idleWindow, tick = 250 * time.Millisecond, 25 * time.Millisecond
	samples := []idleAt{{time.Now(), processCPU()}}
	deadline := samples[0].at.Add(time.Minute)
	for {
		time.Sleep(tick)
		now := idleAt{time.Now(), processCPU()}
		samples = append(samples, now)
		// The oldest sample at least idleWindow back.
		i := len(samples) - 1
		for i > 0 && now.at.Sub(samples[i].at) < idleWindow {
			i--
		}
		w := samples[i]
		if now.at.Sub(w.at) >= idleWindow && now.cpu-w.cpu < now.at.Sub(w.at)/20 {
			return w
		}
		if now.at.After(deadline) {
			b.Logf("process not idle after a minute")
			return now
		}
	}
}

func BenchmarkPebbleLimit(b *testing.B) {
	for _, w := range benchWorkloads {
		b.Run(w, func(b *testing.B) { benchPebbleLimit(b, w) })
	}
}

func benchPebbleLimit(b *testing.B, workload string) {
	reqs, bodies := benchWorkload(workload, b.N)
	db, err := pebblestore.OpenDB(b.TempDir(), pebblestore.OptionsFor(membudget.For(membudget.Default, membudget.All)), slog.New(slog.DiscardHandler))
	if err != nil {
		b.Fatal(err)
	}
	defer db.Close()
	b.SetBytes(meanLen(bodies))
	benchParallel(b, func(i int) {
		var key, val []byte
		batch := db.NewBatch()
		defer batch.Close()
		for _, r := range reqs[i%len(reqs)] {
			pk := model.SeriesDay{Kind: model.KindReadings, Tenant: "bench", Series: r.device, Day: model.DayOf(r.ts)}.Partition(0)
			key, val = pebblestore.AppendReading(key[:0], val[:0], pk, []model.ReadingRow{
				{TS: r.ts, Metric: "rpm", Value: r.rpm, Seq: 1, HasSeq: true},
				{TS: r.ts, Metric: "temp_c", Value: r.temp, Seq: 1, HasSeq: true},
			})
			if err := batch.Merge(key, val, nil); err != nil {
				b.Error(err)
			}
		}
		if err := batch.Commit(pebble.Sync); err != nil {
			b.Error(err)
		}
	})
}

func runtimeProcs() int { return runtime.GOMAXPROCS(0) }

// keepHeapUnlimited keeps serve from setting the Go heap limit of the memory
// budget in a benchmark that runs the gateway in its own process: the limit
// would also count the load generator's memory. (serve leaves the limit to
// GOMEMLIMIT when that is set.)
func keepHeapUnlimited(b *testing.B) { b.Setenv("GOMEMLIMIT", "off") }
