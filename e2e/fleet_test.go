package e2e

// The fleet benchmark: the gateway binary, started fresh for every run,
// takes a day of readings from a fleet of a given size, and the run reports
// what a user with that fleet pays: readings/s until the acknowledgement and
// until the process is idle again (work done after the acknowledgement is
// paid for), the gateway's CPU seconds per million readings, and its peak
// RSS. One invocation runs the fleet-size curve and the batch-size curve
// (rollups on and off) and the raw-store limit:
//
//	go test -run='^$' -bench='Fleet' -benchtime=1x -timeout=3h ./e2e/
//
// SLUICE_FLEET_DEVICES (comma-separated) and SLUICE_FLEET_READINGS change
// the fleet sizes and the readings per run, SLUICE_FLEET_CLIENTS the
// clients of the batch-size curve; SLUICE_* settings pass through to the
// gateway.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/objstorage/objstorageprovider"
	"github.com/cockroachdb/pebble/v2/sstable"
	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/sluicehq/sluice/internal/membudget"
	"github.com/sluicehq/sluice/internal/model"
	"github.com/sluicehq/sluice/internal/pebblelog"
	"github.com/sluicehq/sluice/internal/rollup"
	"github.com/sluicehq/sluice/internal/rollupstore"
	"github.com/sluicehq/sluice/internal/store/pebblestore"
	"github.com/sluicehq/sluice/internal/wire"
)

// fleetMetrics are the metrics a reading carries: the first five always, the
// sixth on every other reading (5.5 a reading).
var fleetMetrics = [6]string{"temp_c", "humidity", "rpm", "voltage", "rssi", "battery"}

// fleetLoad is one run's workload: Readings readings from Devices devices
// spread evenly over yesterday (UTC) in time order, device k%Devices for
// reading k, posted as NDJSON in requests of Batch readings by Clients
// concurrent clients.
type fleetLoad struct {
	Devices, Readings, Batch, Clients int
	// LineProtocol posts the readings as line protocol to /api/v2/write
	// (fleet_lp_test.go) instead.
	LineProtocol bool
	// Check, if set, runs once the gateway is idle and its peak RSS read,
	// before it stops: day is the day the readings were written on.
	Check func(tb testing.TB, g *gateway, day time.Time)
}

// Reading k of the run: its device, its timestamp on day, its metrics (the
// first metrics(k) of fleetMetrics) and the value of metric m. The NDJSON
// bodies and the limit's keys are both made from these.
//
// Every device reports once per Devices readings, but not in the order of
// its name: device k%Devices is named by a permutation of the fleet
// (multiplying by a prime larger than any fleet), so that a request's
// devices are spread over the key space as a real fleet's are. Named in
// order, a request's devices were neighbours in the store's keys, and at a
// million devices a day every catalogue read and memtable insert found
// the one before it in the CPU's caches and the block cache: 4.3 CPU-s per
// million readings where a fleet reporting in no order took 26
// (docs/benchmarks.md, item 33).
func (l fleetLoad) device(k int) string {
	return "dev-" + strconv.Itoa(int(uint64(k%l.Devices)*fleetPrime%uint64(l.Devices)))
}

// fleetPrime is a prime, so coprime with every smaller fleet size: device
// names each of a fleet's devices once.
const fleetPrime = 2654435761

func (l fleetLoad) ts(day time.Time, k int) int64 {
	return day.UnixMilli() + int64(k)*86_400_000/int64(l.Readings)
}
func metrics(k int) int            { return 5 + k%2 }
func metricValue(k, m int) float64 { return float64((k*7+m*13)%1000) / 10 }

// readings returns the range of readings of request i.
func (l fleetLoad) readings(i int) (from, to int) {
	return i * l.Batch, min((i+1)*l.Batch, l.Readings)
}

// body appends request i's NDJSON to b.
func (l fleetLoad) body(b []byte, day time.Time, i int) []byte {
	from, to := l.readings(i)
	for k := from; k < to; k++ {
		b = append(b, `{"device_id":"`...)
		b = append(b, l.device(k)...)
		b = append(b, `","ts":`...)
		b = strconv.AppendInt(b, l.ts(day, k), 10)
		b = append(b, `,"metrics":{`...)
		for m := range metrics(k) {
			if m > 0 {
				b = append(b, ',')
			}
			b = append(b, '"')
			b = append(b, fleetMetrics[m]...)
			b = append(b, `":`...)
			b = strconv.AppendFloat(b, metricValue(k, m), 'g', -1, 64)
		}
		b = append(b, "}}\n"...)
	}
	return b
}

func (l fleetLoad) requests() int { return (l.Readings + l.Batch - 1) / l.Batch }

// fleetResult is what one run measured of the gateway process.
type fleetResult struct {
	acked, idle time.Duration // from the first request to the last acknowledgement / to idle
	cpu         time.Duration // the gateway's CPU over the run, idle tail included
	peakRSS     int64         // bytes
	retries     int64         // requests answered 429 or 503 and sent again
	rawReads    float64       // range reads of the raw store made by the rollups (rollups on)
	rolled      float64       // device-minutes the rollups recomputed
	carried     float64       // device-minutes the rollups summed from their commit
	emitted     float64       // rollup rows the rollups stored
	entries     float64       // catalogue entries the sink wrote (placed and settled)
	reads       float64       // series-days whose catalogue the sink read
	commits     float64       // the sink's durable commits
}

// report reports r; a gateway's also peak RSS and retries (gateway true).
func (r fleetResult) report(b *testing.B, l fleetLoad, gateway bool) {
	n := float64(l.Readings)
	b.ReportMetric(n/r.idle.Seconds(), "readings/s")
	b.ReportMetric(n/r.acked.Seconds(), "acked_readings/s")
	b.ReportMetric(r.cpu.Seconds()/n*1e6, "CPU-s/M")
	if !gateway {
		return
	}
	b.ReportMetric(float64(r.cpu.Microseconds())/float64(l.requests()), "CPU-µs/request")
	b.ReportMetric(float64(r.peakRSS)/(1<<20), "peak_RSS_MiB")
	b.ReportMetric(float64(r.retries), "retries")
	b.ReportMetric(r.entries/n, "catalogue_entries/reading")
	b.ReportMetric(r.reads/n, "catalogue_reads/reading")
	b.ReportMetric(r.commits/float64(l.requests()), "commits/request")
	if r.emitted > 0 {
		b.ReportMetric(r.rawReads/n, "raw_reads/reading")
		b.ReportMetric(r.rolled/n, "minutes_rolled/reading")
		b.ReportMetric(r.carried/n, "minutes_carried/reading")
		b.ReportMetric(r.emitted/n, "rollup_rows/reading")
	}
}

// runFleet starts a fresh gateway with env, sends l to it, waits until it is
// idle and stops it.
func runFleet(tb testing.TB, l fleetLoad, env ...string) fleetResult {
	tb.Helper()
	g := startGateway(tb, tb.TempDir(), env...)
	yesterday := day(1)
	rollups := !slices.Contains(env, "SLUICE_ROLLUPS_ENABLED=false")
	res := measure(tb, g.cmd.Process.Pid, l, g.url+l.path(), yesterday,
		func(err error) { tb.Fatalf("%v\n%s", err, tail(g.logs(), 4000)) },
		func() {
			if !rollups {
				return
			}
			// The rollups recompute what was written rollups.roll_delay
			// after it: a gateway quiet before that is not done.
			deadline := time.Now().Add(5 * time.Minute)
			for ss := g.scrape(); g.metricOf(ss, "sluice_rollup_pending_minutes") > 0 || g.metricOf(ss, "sluice_rollup_lag_seconds") > 0; ss = g.scrape() {
				if time.Now().After(deadline) {
					tb.Fatalf("rollups still pending five minutes after the last acknowledgement")
				}
				time.Sleep(100 * time.Millisecond)
			}
		})
	ss := g.scrape()
	res.entries = sum(ss, "sluice_sink_catalogue_entries_total")
	res.reads = g.metricOf(ss, "sluice_buckets_catalogue_reads_total")
	res.commits = g.metricOf(ss, "sluice_sink_commits_total")
	if rollups {
		res.rawReads, res.rolled = g.metricOf(ss, "sluice_rollup_raw_reads_total"), g.metricOf(ss, "sluice_rollup_minutes_rolled_total")
		res.carried, res.emitted = g.metricOf(ss, "sluice_rollup_minutes_carried_total"), g.metricOf(ss, "sluice_rollup_rows_emitted_total")
	}
	if l.Check != nil {
		l.Check(tb, g, yesterday)
	}
	g.stop()
	return res
}

func postNDJSON(ctx context.Context, hc *http.Client, url string, body []byte) (int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return 0, err
	}
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/x-ndjson")
	resp, err := hc.Do(req)
	if err != nil {
		return 0, err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode, nil
}

func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}

// procCPU returns the user and system CPU time process pid has used.
func procCPU(tb testing.TB, pid int) time.Duration {
	tb.Helper()
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		tb.Fatalf("read the gateway's CPU time: %v", err)
	}
	// Fields after the command name, which is in parentheses and may hold
	// spaces: state is field 3, utime 14 and stime 15, in clock ticks.
	f := strings.Fields(string(raw[bytes.LastIndexByte(raw, ')')+1:]))
	ut, err1 := strconv.ParseInt(f[11], 10, 64)
	st, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		tb.Fatalf("parse /proc/%d/stat: %q", pid, raw)
	}
	const ticksPerSecond = 100 // USER_HZ on Linux
	return time.Duration(ut+st) * time.Second / ticksPerSecond
}

type cpuAt struct {
	at  time.Time
	cpu time.Duration
}

// waitProcIdle waits until process pid used at most 3% of a core over a
// second (its tickers cost less than that), and returns when that second
// began. It gives up after five minutes.
func waitProcIdle(tb testing.TB, pid int) cpuAt {
	tb.Helper()
	const window, tick = time.Second, 100 * time.Millisecond
	samples := []cpuAt{{time.Now(), procCPU(tb, pid)}}
	deadline := samples[0].at.Add(5 * time.Minute)
	for {
		time.Sleep(tick)
		now := cpuAt{time.Now(), procCPU(tb, pid)}
		samples = append(samples, now)
		i := len(samples) - 1
		for i > 0 && now.at.Sub(samples[i].at) < window {
			i--
		}
		w := samples[i]
		if d := now.at.Sub(w.at); d >= window && now.cpu-w.cpu <= d*3/100 {
			return w
		}
		if now.at.After(deadline) {
			tb.Logf("gateway not idle after five minutes")
			return now
		}
	}
}

// fleetSizes are the fleets of the fleet-size curve.
func fleetSizes(tb testing.TB) []int {
	s := os.Getenv("SLUICE_FLEET_DEVICES")
	if s == "" {
		return []int{10_000, 100_000, 1_000_000}
	}
	var out []int
	for f := range strings.SplitSeq(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			tb.Fatalf("SLUICE_FLEET_DEVICES: %q is not a device count", f)
		}
		out = append(out, n)
	}
	return out
}

// fleetReadings is the readings of a run: SLUICE_FLEET_READINGS, or twice the
// fleet and at least two million.
func fleetReadings(tb testing.TB, devices int) int {
	if s := os.Getenv("SLUICE_FLEET_READINGS"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 {
			tb.Fatalf("SLUICE_FLEET_READINGS: %q is not a count", s)
		}
		return n
	}
	return max(2*devices, 2_000_000)
}

func rollupsEnv(on bool) (string, string) {
	if on {
		return "rollups=on", "SLUICE_ROLLUPS_ENABLED=true"
	}
	return "rollups=off", "SLUICE_ROLLUPS_ENABLED=false"
}

// BenchmarkFleet is the fleet-size curve: requests of 1,000 readings, 8
// clients, 10,000 to 1,000,000 devices a day.
func BenchmarkFleet(b *testing.B) {
	for _, devices := range fleetSizes(b) {
		for _, on := range []bool{true, false} {
			name, env := rollupsEnv(on)
			b.Run(fmt.Sprintf("devices=%d/%s", devices, name), func(b *testing.B) {
				l := fleetLoad{Devices: devices, Readings: fleetReadings(b, devices), Batch: 1000, Clients: 8}
				benchFleet(b, l, true, func() fleetResult { return runFleet(b, l, env) })
			})
		}
	}
}

// BenchmarkFleetBatch is the batch-size curve: 10,000 devices, 1 to 1,000
// readings a request; 64 clients for the small requests (devices posting
// their own readings), 8 for 1,000.
func BenchmarkFleetBatch(b *testing.B) {
	for _, batch := range []int{1, 10, 100, 1000} {
		for _, on := range []bool{true, false} {
			name, env := rollupsEnv(on)
			b.Run(fmt.Sprintf("batch=%d/%s", batch, name), func(b *testing.B) {
				l := batchLoad(b, batch)
				benchFleet(b, l, true, func() fleetResult { return runFleet(b, l, env) })
			})
		}
	}
}

// batchLoad is the batch-size curve's load of batch readings a request:
// 10,000 devices, 64 clients for the small requests (devices posting their
// own readings), 8 for 1,000.
func batchLoad(tb testing.TB, batch int) fleetLoad {
	clients := 64
	if batch >= 1000 {
		clients = 8
	}
	if s := os.Getenv("SLUICE_FLEET_CLIENTS"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 {
			tb.Fatalf("SLUICE_FLEET_CLIENTS: %q is not a client count", s)
		}
		clients = n
	}
	// Enough requests for a steady state, few enough for a minute or so of
	// one-reading requests.
	readings := min(fleetReadings(tb, 10_000), batch*200_000)
	return fleetLoad{Devices: 10_000, Readings: readings, Batch: batch, Clients: clients}
}

// benchFleet runs run b.N times and reports the means (the peak of peak
// RSS).
func benchFleet(b *testing.B, l fleetLoad, gateway bool, run func() fleetResult) {
	var sum fleetResult
	for range b.N {
		r := run()
		sum.acked += r.acked
		sum.idle += r.idle
		sum.cpu += r.cpu
		sum.peakRSS = max(sum.peakRSS, r.peakRSS)
		sum.retries += r.retries
		sum.rawReads += r.rawReads
		sum.rolled += r.rolled
		sum.carried += r.carried
		sum.emitted += r.emitted
		sum.entries += r.entries
		sum.reads += r.reads
		sum.commits += r.commits
	}
	n := time.Duration(b.N)
	sum.acked, sum.idle, sum.cpu = sum.acked/n, sum.idle/n, sum.cpu/n
	sum.retries /= int64(b.N)
	sum.rawReads, sum.rolled = sum.rawReads/float64(b.N), sum.rolled/float64(b.N)
	sum.carried, sum.emitted = sum.carried/float64(b.N), sum.emitted/float64(b.N)
	sum.entries, sum.commits = sum.entries/float64(b.N), sum.commits/float64(b.N)
	sum.reads /= float64(b.N)
	sum.report(b, l, gateway)
}

// measure sends l to url (readings of day) and charges process pid with
// them: its CPU from the first request until it is idle again, once
// settle returned, and its peak RSS. fatal reports a client's error.
func measure(tb testing.TB, pid int, l fleetLoad, url string, day time.Time, fatal func(error), settle func()) fleetResult {
	tb.Helper()
	cpu0 := procCPU(tb, pid)
	start := time.Now()
	retries, err := drive(l, url, day)
	acked := time.Since(start)
	if err != nil {
		fatal(err)
	}
	settle()
	idle := waitProcIdle(tb, pid)
	return fleetResult{acked: acked, idle: idle.at.Sub(start), cpu: idle.cpu - cpu0, peakRSS: vmHWM(tb, pid), retries: retries}
}

// drive sends l's requests to url from l.Clients clients, each request
// again after a 429 or 503 until it is accepted, and returns how many
// were sent again, or the first client's error.
func drive(l fleetLoad, url string, day time.Time) (int64, error) {
	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: l.Clients, MaxConnsPerHost: l.Clients}}
	defer hc.CloseIdleConnections()
	ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
	defer cancel()
	// The first client to fail stops the others, and its error is the
	// cause.
	ctx, fail := context.WithCancelCause(ctx)
	defer fail(nil)

	var next, retries atomic.Int64
	var wg sync.WaitGroup
	for range l.Clients {
		wg.Go(func() {
			var buf []byte
			for {
				i := int(next.Add(1) - 1)
				if i >= l.requests() || ctx.Err() != nil {
					return
				}
				buf = l.encode(buf[:0], day, i)
				for {
					code, err := postNDJSON(ctx, hc, url, buf)
					if err != nil {
						fail(err)
						return
					}
					if code == http.StatusAccepted || code == http.StatusNoContent {
						break
					}
					if code != http.StatusTooManyRequests && code != http.StatusServiceUnavailable {
						fail(fmt.Errorf("request %d: status %d", i, code))
						return
					}
					retries.Add(1)
					time.Sleep(20 * time.Millisecond)
				}
			}
		})
	}
	wg.Wait()
	return retries.Load(), context.Cause(ctx)
}

// BenchmarkFleetBatchFloor is the floor of the batch-size curve: the same
// requests, clients and readings as BenchmarkFleetBatch sent to httpfloor
// (testdata), a bare net/http server that appends each body to a file and
// answers 202 once a group commit synced it. Its CPU per request is what
// HTTP and "202 means durable" cost on this machine before any parsing,
// validation or storage.
func BenchmarkFleetBatchFloor(b *testing.B) {
	for _, batch := range []int{1, 10, 100, 1000} {
		b.Run(fmt.Sprintf("batch=%d", batch), func(b *testing.B) {
			l := batchLoad(b, batch)
			benchFleet(b, l, true, func() fleetResult { return runFloor(b, l) })
		})
	}
}

// buildFloor builds httpfloor once, when a benchmark first needs it.
var buildFloor = sync.OnceValue(func() error { return build("./e2e/testdata/httpfloor") })

func runFloor(tb testing.TB, l fleetLoad) fleetResult {
	tb.Helper()
	if err := buildFloor(); err != nil {
		tb.Fatal(err)
	}
	cmd := exec.Command(filepath.Join(bin, "httpfloor"), tb.TempDir())
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		tb.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		tb.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	addr, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		tb.Fatalf("httpfloor's address: %v", err)
	}
	return measure(tb, cmd.Process.Pid, l, "http://"+strings.TrimSpace(addr)+l.path(), day(1),
		func(err error) { tb.Fatal(err) }, func() {})
}

// BenchmarkFleetLimit is the raw-store limit of the fleet runs: the same
// readings' keys and values written straight into Pebble (the store's
// memtable and cache sizes, its key layout, one synced batch per 1,000
// readings, 8 writers) until Pebble is idle again: no HTTP, decoding,
// bucketing, catalogue or rollups. CPU is this process's, key building
// included.
func BenchmarkFleetLimit(b *testing.B) {
	for _, devices := range fleetSizes(b) {
		b.Run(fmt.Sprintf("devices=%d", devices), func(b *testing.B) {
			l := fleetLoad{Devices: devices, Readings: fleetReadings(b, devices), Batch: 1000, Clients: 8}
			benchFleet(b, l, false, func() fleetResult { return runLimit(b, l, limitKeys{}) })
		})
	}
}

// BenchmarkFleetLimitModel adds to the limit the least that the data
// model writes besides the readings, so that its distance from the limit
// is a floor under what the gateway can reach:
//
//   - catalogue: one catalogue entry per device-day, with the device's
//     first reading of the day (a partition's entry is written with its
//     first rows; claimed to the end of the day, no later reading of the
//     device needs another). That is 0.005 entries a reading at 10,000
//     devices and 0.5 at a million, where each device reports twice.
//   - rollups: one rollup key per device-minute (every reading is a
//     device-minute of its own here), its rows as the sink would carry
//     them, inserted into a rollup store opened as the gateway opens it,
//     one Insert per batch; no marks, reads or outbox.
func BenchmarkFleetLimitModel(b *testing.B) {
	for _, devices := range fleetSizes(b) {
		for _, keys := range []limitKeys{{catalogue: true}, {rollups: true}, {daily: true}} {
			b.Run(fmt.Sprintf("devices=%d/%s", devices, keys), func(b *testing.B) {
				l := fleetLoad{Devices: devices, Readings: fleetReadings(b, devices), Batch: 1000, Clients: 8}
				benchFleet(b, l, false, func() fleetResult { return runLimit(b, l, keys) })
			})
		}
	}
}

// limitKeys says what runLimit writes besides the readings: a catalogue
// entry per device-day, a rollup key per device-minute as the readings
// come (rollups), or the day's rollups built after the last reading
// (daily).
type limitKeys struct{ catalogue, rollups, daily bool }

// String names the keys for a benchmark: catalogue, rollups, both,
// daily-rollups or none.
func (k limitKeys) String() string {
	switch {
	case k.daily:
		return "daily-rollups"
	case k.catalogue && k.rollups:
		return "catalogue+rollups"
	case k.catalogue:
		return "catalogue"
	case k.rollups:
		return "rollups"
	}
	return "none"
}

func runLimit(tb testing.TB, l fleetLoad, keys limitKeys) fleetResult {
	tb.Helper()
	// The sizes the gateway gives the raw store at the default budget.
	plan := membudget.For(membudget.Default, membudget.All)
	db, err := pebblestore.OpenDB(tb.TempDir(), pebblestore.OptionsFor(plan), slog.New(slog.DiscardHandler))
	if err != nil {
		tb.Fatal(err)
	}
	defer db.Close()
	var rs *rollupstore.Store
	if keys.rollups {
		if rs, err = rollupstore.OpenWith(tb.TempDir(), rollupstore.Options{MemTableBytes: plan.RollupMemTable}, slog.New(slog.DiscardHandler)); err != nil {
			tb.Fatal(err)
		}
		defer rs.Close()
	}
	yesterday := day(1)
	self := os.Getpid()
	cpu0 := procCPU(tb, self)
	start := time.Now()
	var next atomic.Int64
	var wg sync.WaitGroup
	for range l.Clients {
		wg.Go(func() {
			var key, val []byte
			var rows []model.ReadingRow
			var rolled []rollup.Row
			for {
				i := int(next.Add(1) - 1)
				if i >= l.requests() {
					return
				}
				batch := db.NewBatch()
				version := time.Now().UnixNano()
				rolled = rolled[:0]
				from, to := l.readings(i)
				for k := from; k < to; k++ {
					ts := l.ts(yesterday, k)
					pk := model.SeriesDay{Kind: model.KindReadings, Tenant: "acme", Series: l.device(k), Day: model.DayOf(ts)}.Partition(0)
					rows = rows[:0]
					for m := range metrics(k) {
						rows = append(rows, model.ReadingRow{TS: ts, Metric: fleetMetrics[m], Value: metricValue(k, m)})
					}
					slices.SortFunc(rows, func(a, b model.ReadingRow) int { return strings.Compare(a.Metric, b.Metric) })
					key, val = pebblestore.AppendReading(key[:0], val[:0], pk, rows)
					if err := batch.Merge(key, val, nil); err != nil {
						tb.Error(err)
					}
					if keys.catalogue && k < l.Devices {
						// The device's first reading of the day: its
						// partition's entry, claimed to the day's end.
						e := model.PartitionInfo{Key: pk, Rows: int64(len(rows)) + 64, Bytes: 4096,
							MinTS: ts - 15*60_000, MaxTS: pk.Day.End() - 1, State: "single", Ahead: true}
						key, val = pebblestore.AppendEntry(key[:0], val[:0], e, version)
						if err := batch.Merge(key, val, nil); err != nil {
							tb.Error(err)
						}
					}
					for _, r := range rows {
						if keys.rollups {
							rolled = append(rolled, rollup.Row{Key: rollup.Key{Tenant: "acme", Device: pk.Series, Metric: r.Metric, Minute: rollup.MinuteOf(ts)},
								Writer: 65535, Count: 1, Sum: r.Value, Min: r.Value, Max: r.Value,
								FirstTS: ts, FirstValue: r.Value, LastTS: ts, LastValue: r.Value, Version: uint64(version)})
						}
					}
				}
				if err := batch.Commit(pebble.Sync); err != nil {
					tb.Error(err)
				}
				batch.Close()
				if keys.rollups {
					if err := rs.Insert(context.Background(), rolled); err != nil {
						tb.Error(err)
					}
				}
			}
		})
	}
	wg.Wait()
	acked := time.Since(start)
	var built *pebble.DB
	if keys.daily {
		built = buildDailyRollups(tb, db, tb.TempDir(), plan)
		defer built.Close()
	}
	idle := waitProcIdle(tb, self)
	if built != nil {
		// One key per device-minute of the load, no more, no fewer.
		want := map[[2]int64]bool{}
		for k := range l.Readings {
			want[[2]int64{int64(k % l.Devices), rollup.MinuteOf(l.ts(yesterday, k))}] = true
		}
		if n := countKeys(tb, built); n != len(want) {
			tb.Fatalf("the day's rollups hold %d device-minutes, want %d", n, len(want))
		}
	}
	return fleetResult{acked: acked, idle: idle.at.Sub(start), cpu: idle.cpu - cpu0}
}

// countKeys counts the keys of db.
func countKeys(tb testing.TB, db *pebble.DB) int {
	tb.Helper()
	it, err := db.NewIter(nil)
	if err != nil {
		tb.Fatal(err)
	}
	n := 0
	for ok := it.First(); ok; ok = it.Next() {
		n++
	}
	if err := it.Close(); err != nil {
		tb.Fatal(err)
	}
	return n
}

// buildDailyRollups is the least a day's rollups cost when they are built
// once, after the day, instead of as the readings come: the raw store read
// in key order (device by device, each in time order), each device's
// readings folded into rows with rollup.Builder, and the rows written in
// the rollup store's own keys and values into one table file per hour of
// the day (an hour's keys come device by device, so each file is written
// in order), which a database opened with the rollup store's sizes (not
// its merger: nothing here merges) then ingests: no write-ahead log,
// memtable or compaction. Queries of a day
// not built yet, late readings and several tenants are not modelled. It
// returns the database, open.
func buildDailyRollups(tb testing.TB, raw *pebble.DB, dir string, plan membudget.Plan) *pebble.DB {
	tb.Helper()
	opts := &pebble.Options{Logger: pebblelog.New(slog.New(slog.DiscardHandler), "daily"), FormatMajorVersion: pebble.FormatNewest,
		MemTableSize: uint64(plan.RollupMemTable), L0CompactionThreshold: 16, L0StopWritesThreshold: 48}
	opts.EnsureDefaults() // for the table files' writer options
	db, err := pebble.Open(filepath.Join(dir, "rollups"), opts)
	if err != nil {
		tb.Fatal(err)
	}
	var files [24]*sstable.Writer
	var paths []string
	var key, val []byte
	write := func(rows []rollup.Row) {
		for i := 0; i < len(rows); {
			j := i + 1
			for j < len(rows) && rows[j].Minute == rows[i].Minute {
				j++
			}
			h := int((rows[i].Minute - model.DayOf(rows[i].Minute).Start()) / 3_600_000)
			if files[h] == nil {
				path := filepath.Join(dir, fmt.Sprintf("%02d.sst", h))
				f, err := vfs.Default.Create(path, vfs.WriteCategoryUnspecified)
				if err != nil {
					tb.Fatal(err)
				}
				files[h] = sstable.NewWriter(objstorageprovider.NewFileWritable(f), opts.MakeWriterOptions(0, db.TableFormat()))
				paths = append(paths, path)
			}
			key, val = rollupstore.AppendMinute(key[:0], val[:0], rows[i:j])
			if err := files[h].Merge(key, val); err != nil {
				tb.Fatal(err)
			}
			i = j
		}
	}
	it, err := raw.NewIter(nil)
	if err != nil {
		tb.Fatal(err)
	}
	version := uint64(time.Now().UnixNano())
	var device []byte
	var cells []model.ReadingRow
	var rows []rollup.Row
	var b rollup.Builder
	for ok := it.First(); ok; ok = it.Next() {
		series, got, err := pebblestore.DecodeReading(it.Key(), it.Value(), cells[:0])
		if err != nil {
			tb.Fatal(err)
		}
		cells = got
		if device == nil || !bytes.Equal(series, device) {
			if device != nil {
				rows = b.Rows()
				write(rows)
			}
			device = append(device[:0], series...)
			b = rollup.NewBuilder(rows[:0], "acme", string(device), version)
		}
		for _, c := range cells {
			b.Add(c.TS, &model.Metric{Name: c.Metric, Value: c.Value, Type: c.Type, Int: c.Int, Str: c.Str})
		}
	}
	if err := it.Close(); err != nil {
		tb.Fatal(err)
	}
	if device != nil {
		write(b.Rows())
	}
	for _, f := range files {
		if f != nil {
			if err := f.Close(); err != nil {
				tb.Fatal(err)
			}
		}
	}
	if err := db.Ingest(context.Background(), paths); err != nil {
		_ = db.Close()
		tb.Fatal(err)
	}
	return db
}

// BenchmarkFleetRollupRebuild is what the rollups of the fleet's day cost
// when they are built after the fact, from the raw store, instead of
// streamed as the readings come: the readings ingested with rollups off,
// then the gateway restarted on the same store with rollups on and the day
// rebuilt (`query rollups rebuild`, every device of the tenant), its CPU
// counted from the request until the gateway is idle again. CPU-s/M is per
// million readings of the day, as in BenchmarkFleet, so the two compare.
func BenchmarkFleetRollupRebuild(b *testing.B) {
	for _, devices := range fleetSizes(b) {
		b.Run(fmt.Sprintf("devices=%d", devices), func(b *testing.B) {
			l := fleetLoad{Devices: devices, Readings: fleetReadings(b, devices), Batch: 1000, Clients: 8}
			var cpu, wall, verify time.Duration
			var rows float64
			for range b.N {
				r := runRebuild(b, l)
				cpu, wall, verify, rows = cpu+r.cpu, wall+r.wall, verify+r.verify, rows+r.rows
			}
			n := float64(l.Readings) * float64(b.N)
			b.ReportMetric(cpu.Seconds()/n*1e6, "CPU-s/M")
			b.ReportMetric(wall.Seconds()/float64(b.N), "rebuild_s")
			b.ReportMetric(verify.Seconds()/float64(b.N), "verify_s")
			b.ReportMetric(rows/n, "rollup_rows/reading")
		})
	}
}

// rebuilt is what runRebuild measured.
type rebuilt struct {
	cpu, wall time.Duration // the rebuild's: the gateway's CPU until idle, and its request
	verify    time.Duration // the verification of the day after it
	rows      float64       // rows the rebuild wrote
}

// runRebuild ingests l with rollups off, rebuilds its day with rollups on
// and verifies it (every device exact), through the query CLI.
func runRebuild(tb testing.TB, l fleetLoad) rebuilt {
	tb.Helper()
	dir := tb.TempDir()
	yesterday := day(1)
	g := startGateway(tb, dir, "SLUICE_ROLLUPS_ENABLED=false")
	measure(tb, g.cmd.Process.Pid, l, g.url+l.path(), yesterday,
		func(err error) { tb.Fatalf("%v\n%s", err, tail(g.logs(), 4000)) }, func() {})
	g.stop()
	// A verification of a large fleet's day may outlast the default
	// read.timeout (30 s); verify_s says whether it did.
	g = startGateway(tb, dir, "SLUICE_ROLLUPS_ENABLED=true", "SLUICE_READ_TIMEOUT=10m", "SLUICE_HTTP_WRITE_TIMEOUT=11m")
	defer g.stop()
	pid := g.cmd.Process.Pid
	idle := waitProcIdle(tb, pid)
	var res rebuilt
	var r wire.RebuildResult
	res.wall = runQuery(tb, g, &r, "rollups", "rebuild", "--from", yesterday.Format(time.RFC3339), "--to", yesterday.Add(24*time.Hour).Format(time.RFC3339))
	res.cpu = waitProcIdle(tb, pid).cpu - idle.cpu
	if r.DeviceDays != l.Devices {
		tb.Fatalf("rebuild: %+v, want %d device-days", r, l.Devices)
	}
	res.rows = float64(r.Written)
	var v struct {
		Devices    int               `json:"devices"`
		Mismatches []json.RawMessage `json:"mismatches"`
	}
	res.verify = runQuery(tb, g, &v, "rollups", "verify", "--timeout", "10m", "--day", yesterday.Format(time.DateOnly))
	if v.Devices != l.Devices || len(v.Mismatches) != 0 {
		tb.Fatalf("verify after the rebuild: %d devices, %d mismatches; want %d and none", v.Devices, len(v.Mismatches), l.Devices)
	}
	return res
}

// runQuery runs the query CLI against g (queryT) with --format json,
// decodes its output into v and returns how long it ran.
func runQuery(tb testing.TB, g *gateway, v any, args ...string) time.Duration {
	tb.Helper()
	start := time.Now()
	out, _ := g.queryT(tb, append(args, "--format", "json")...)
	took := time.Since(start)
	if err := json.Unmarshal([]byte(out), v); err != nil {
		tb.Fatalf("query %s: %v\n%s", strings.Join(args, " "), err, tail(out, 2000))
	}
	return took
}
