package e2e

import (
	"bytes"
	"compress/gzip"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/client"
	"github.com/sluicehq/sluice/internal/config"
	"github.com/sluicehq/sluice/internal/membudget"
	"github.com/sluicehq/sluice/internal/testenv"
)

// vmHWM returns the peak resident set size of process pid, in bytes.
func vmHWM(t testing.TB, pid int) int64 {
	t.Helper()
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		testenv.Missing(t, fmt.Sprintf("no /proc status to read the gateway's peak RSS from: %v", err))
	}
	for line := range strings.SplitSeq(string(raw), "\n") {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			if err != nil {
				t.Fatalf("VmHWM %q: %v", v, err)
			}
			return kb << 10
		}
	}
	t.Fatal("no VmHWM in /proc status")
	return 0
}

func gzipped(t *testing.T, level int, write func(w io.Writer)) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw, err := gzip.NewWriterLevel(&buf, level)
	if err != nil {
		t.Fatal(err)
	}
	write(zw)
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// bigReadings writes rows NDJSON readings of metrics metrics each, a
// millisecond apart.
func bigReadings(w io.Writer, dev string, rows, metrics int) {
	ts := time.Now().Add(-time.Hour).UnixMilli()
	var tail []byte // the metrics object, the same in every row
	tail = append(tail, `,"metrics":{`...)
	for m := range metrics {
		if m > 0 {
			tail = append(tail, ',')
		}
		tail = fmt.Appendf(tail, `"m%d":%d.5`, m, m)
	}
	tail = append(tail, "}}\n"...)
	var line []byte
	for i := range rows {
		line = fmt.Appendf(line[:0], `{"device_id":%q,"ts":%d`, dev, ts+int64(i))
		line = append(line, tail...)
		_, _ = w.Write(line)
	}
}

// memoryFormula is the peak RSS docs/operations.md promises for the
// gateway's settings; keep the two in step. rows is the most rows waiting
// for the store: sink.queue_rows, or one request of limits.max_rows ×
// limits.max_metrics if that is more (it runs alone).
func memoryFormula(bodyBudget, rows int64) int64 {
	// The runtime and the idle gateway (~40 MiB), and what the default
	// memory budget gives outside the Go heap: the embedded store's cache
	// and memtables and the rollups' databases.
	baseline := 40<<20 + membudget.For(membudget.Default, membudget.All).OffHeap()
	// memory.gc_percent: the heap may reach 1 + gc_percent/100 times what
	// is live.
	const gcFactor = 1 + config.DefaultGCPercent/100
	return baseline + gcFactor*(bodyBudget+rows*rowBytes)
}

// rowBytes is what a cell waiting for the store costs, measured: decoded
// (24 B), planned into its batch (48 B), encoded for the store.
const rowBytes = 250

// TestMemoryUnderHostileBodies fires gzip bombs, large gzip bodies of the
// most rows and metrics allowed, and large chunked bodies at the gateway at
// once, and checks that its peak RSS stays under what the memory formula in
// docs/operations.md promises for its settings (defaults here), and that it
// still answers afterwards. With -sluice.long it keeps the load up for
// rounds over a few minutes.
func TestMemoryUnderHostileBodies(t *testing.T) {
	if testing.Short() {
		t.Skip("memory under attack: not in -short")
	}
	g := startGateway(t, t.TempDir())
	// The defaults: http.max_inflight_body_bytes, and the most rows waiting
	// (limits.max_rows × limits.max_metrics is over sink.queue_rows).
	const bodyBudget, rows = 128 << 20, 10_000 * 256

	made := time.Now()
	// About 256 KiB of gzip that inflates to 256 MiB of spaces: 256 members
	// of 1 MiB each, concatenated (a gzip reader reads them as one stream).
	member := gzipped(t, gzip.BestCompression, func(w io.Writer) { _, _ = w.Write(bytes.Repeat([]byte{' '}, 1<<20)) })
	bomb := bytes.Repeat(member, 256)
	// The most a request may hold: 10 000 readings of 256 metrics (2.56 M
	// rows, ~25 MiB inflated), sent three times at once.
	big := gzipped(t, gzip.BestSpeed, func(w io.Writer) { bigReadings(w, "big", 10_000, 256) })
	largest := [3][]byte{big, big, big}
	t.Logf("bomb %d bytes, largest body %d bytes gzip, made in %s", len(bomb), len(big), time.Since(made))

	send := func(body io.Reader, size int64, gz bool) (int, error) {
		req, err := http.NewRequestWithContext(context.Background(), http.MethodPost, g.url+"/v1/readings", body)
		if err != nil {
			return 0, err
		}
		req.ContentLength = size // -1: chunked
		req.Header.Set("Authorization", "Bearer "+token)
		req.Header.Set("Content-Type", "application/x-ndjson")
		if gz {
			req.Header.Set("Content-Encoding", "gzip")
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return 0, err
		}
		defer resp.Body.Close()
		_, _ = io.Copy(io.Discard, resp.Body)
		if resp.StatusCode == http.StatusServiceUnavailable && resp.Header.Get("Retry-After") == "" {
			return resp.StatusCode, fmt.Errorf("503 without Retry-After")
		}
		return resp.StatusCode, nil
	}
	chunked := func(write func(w io.Writer)) io.Reader {
		pr, pw := io.Pipe()
		go func() {
			write(pw)
			pw.Close()
		}()
		return pr
	}

	var (
		mu       sync.Mutex
		statuses = map[string]map[int]int{}
		errs     []error
	)
	record := func(what string, status int, err error) {
		mu.Lock()
		defer mu.Unlock()
		if err != nil {
			// The gateway may close a connection it refused a body on
			// before the client finished sending it.
			if !strings.Contains(err.Error(), "broken pipe") && !strings.Contains(err.Error(), "connection reset") {
				errs = append(errs, fmt.Errorf("%s: %w", what, err))
			}
			return
		}
		if statuses[what] == nil {
			statuses[what] = map[int]int{}
		}
		statuses[what][status]++
	}
	// retry sends a body again while it is answered 503, as clients are
	// told to (and as an attacker would), at most 10 times.
	retry := func(what string, body func() (io.Reader, int64), gz bool) {
		for range 10 {
			r, size := body()
			st, err := send(r, size, gz)
			if err != nil || st != http.StatusServiceUnavailable {
				record(what, st, err)
				return
			}
			time.Sleep(time.Second)
		}
		record(what, http.StatusServiceUnavailable, nil)
	}
	// SLUICE_MEMTEST_ONLY=bomb, largest or chunked sends only that kind, to
	// measure it alone.
	only := os.Getenv("SLUICE_MEMTEST_ONLY")
	round := func() {
		var wg sync.WaitGroup
		for range 8 {
			if only != "" && only != "bomb" {
				break
			}
			wg.Go(func() {
				retry("bomb", func() (io.Reader, int64) { return bytes.NewReader(bomb), int64(len(bomb)) }, true)
			})
		}
		for i := range largest {
			if only != "" && only != "largest" {
				break
			}
			wg.Go(func() {
				retry("largest", func() (io.Reader, int64) { return bytes.NewReader(largest[i]), int64(len(largest[i])) }, true)
			})
		}
		for i := range 4 {
			if only != "" && only != "chunked" {
				break
			}
			wg.Go(func() {
				// ~10 MiB of legal NDJSON without a length: 640 000 rows.
				retry("chunked", func() (io.Reader, int64) {
					return chunked(func(w io.Writer) { bigReadings(w, fmt.Sprint("chunked-", i), 10_000, 64) }), -1
				}, false)
			})
		}
		for range 2 {
			if only != "" && only != "chunked" {
				break
			}
			wg.Go(func() {
				// 20 MiB of spaces without a length: over max_body_bytes.
				retry("chunked_over", func() (io.Reader, int64) {
					return chunked(func(w io.Writer) {
						chunk := bytes.Repeat([]byte{' '}, 1<<20)
						for range 20 {
							if _, err := w.Write(chunk); err != nil {
								return
							}
						}
					}), -1
				}, false)
			})
		}
		wg.Wait()
	}
	deadline := time.Now()
	if longForm() {
		deadline = deadline.Add(3 * time.Minute)
	}
	for n := 1; ; n++ {
		round()
		t.Logf("round %d: peak RSS %d MiB, %s since start", n, vmHWM(t, g.cmd.Process.Pid)>>20, time.Since(made))
		if time.Now().After(deadline) {
			break
		}
	}
	peak := vmHWM(t, g.cmd.Process.Pid)
	formula := memoryFormula(bodyBudget, rows)
	bound := formula + formula/10 // margin
	t.Logf("statuses %v; peak RSS %d MiB, bound %d MiB", statuses, peak>>20, bound>>20)
	for _, err := range errs {
		t.Error(err)
	}
	if peak > bound {
		t.Errorf("peak RSS %d MiB is over the documented bound of %d MiB", peak>>20, bound>>20)
	}
	for _, st := range []int{http.StatusOK, http.StatusBadRequest, http.StatusInternalServerError} {
		for what, byStatus := range statuses {
			if byStatus[st] > 0 {
				t.Errorf("%s: %d answered %d", what, byStatus[st], st)
			}
		}
	}
	if statuses["bomb"][http.StatusAccepted] > 0 || statuses["chunked_over"][http.StatusAccepted] > 0 {
		t.Errorf("a body over the limits was accepted: %v", statuses)
	}
	if only == "" && (statuses["largest"][http.StatusAccepted] == 0 || statuses["chunked"][http.StatusAccepted] == 0) {
		t.Errorf("legal requests were not accepted, retried: %v", statuses)
	}
	// Still serving.
	if st, body := g.post("/v1/readings", "", fmt.Appendf(nil, `{"device_id":"after","ts":%d,"metrics":{"v":1}}`, time.Now().UnixMilli())); st != http.StatusAccepted {
		t.Fatalf("after the attack: %d %s", st, body)
	}
	g.stop()
}

// TestFleetMemoryBound runs the gateway, rollups on, with a fleet of many
// distinct devices (each a series-day of its own, a rollup minute per
// reading, more than the planner and the pending rollups may hold) and
// checks that its peak RSS stays within memory.budget_bytes: 384 MiB for
// 200,000 devices; with -sluice.long, the default 512 MiB for 1,000,000
// devices (the workload of docs/benchmarks.md's fleet curve).
func TestFleetMemoryBound(t *testing.T) {
	if testing.Short() {
		t.Skip("fleet memory: not in -short")
	}
	devices, budget := 200_000, int64(384<<20)
	// Time for the verification of the day's rollups after the run.
	env := []string{"SLUICE_READ_TIMEOUT=5m", "SLUICE_HTTP_WRITE_TIMEOUT=6m"}
	if *long {
		devices, budget = 1_000_000, membudget.Default
	} else {
		env = append(env, fmt.Sprintf("SLUICE_MEMORY_BUDGET_BYTES=%d", budget))
	}
	if p := membudget.For(budget, membudget.All); p.SeriesDays >= devices || p.MaxPending >= devices {
		t.Fatalf("the budget's planner (%d series-days) or pending rollups (%d) hold the whole fleet of %d: nothing is evicted", p.SeriesDays, p.MaxPending, devices)
	}
	l := fleetLoad{Devices: devices, Readings: 2 * devices, Batch: 1000, Clients: 8}
	// The planner and the pending rollups forgot most devices on the way:
	// every reading must still be stored, and the rollups exact.
	l.Check = func(tb testing.TB, g *gateway, day time.Time) {
		var want int64
		for k := range l.Readings {
			want += int64(metrics(k))
		}
		v := verifyRollups(tb, g, day)
		if v.Devices != devices || v.RawRows != want || v.RollupRows != want || len(v.Mismatches) > 0 {
			tb.Errorf("after the run: %d devices, %d raw values, %d counted by the rollups, %d mismatches (first: %+v); want %d devices, %d values in both",
				v.Devices, v.RawRows, v.RollupRows, len(v.Mismatches), firstOr(v.Mismatches), devices, want)
		}
	}
	if *long {
		// Verifying a day of a million devices takes longer than any
		// sensible read timeout (over 5 minutes here): the CI run verifies
		// its 200,000.
		l.Check = nil
	}
	res := runFleet(t, l, env...)
	t.Logf("%d devices, %d readings: peak RSS %d MiB, budget %d MiB; %s until idle, %.1f CPU-s per million readings",
		devices, l.Readings, res.peakRSS>>20, budget>>20, res.idle.Round(time.Millisecond), res.cpu.Seconds()/float64(l.Readings)*1e6)
	if res.peakRSS > budget {
		t.Errorf("peak RSS %d MiB is over memory.budget_bytes, %d MiB", res.peakRSS>>20, budget>>20)
	}
}

// verifyRollups asks the gateway to check the rollups of day against its raw
// readings (GET /v1/rollups/verify).
func verifyRollups(tb testing.TB, g *gateway, day time.Time) client.Verification {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	start := time.Now()
	v, err := g.client().VerifyRollups(ctx, day.Format(time.DateOnly))
	if err != nil {
		tb.Fatalf("verify rollups: %v", err)
	}
	tb.Logf("verified %d devices in %s", v.Devices, time.Since(start).Round(time.Millisecond))
	return v
}

func firstOr[T any](s []T) (t T) {
	if len(s) > 0 {
		t = s[0]
	}
	return t
}
