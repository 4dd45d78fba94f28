package main

// The audit-log benchmarks, for docs/benchmarks.md:
//
//	go test -run='^$' -bench='AuditIngest' -benchtime=300x -count=3 ./cmd/ingest
//	SLUICE_BENCH_SEAL_EVENTS=1000000 go test -run='^$' -bench='AuditSeal' -benchtime=1x ./cmd/ingest
//
// AuditIngest posts NDJSON requests of 1,000 audit events (10 streams,
// today's timestamps, unique ids) through the gateway with audit.enabled
// off and on, by 4 concurrent writers. AuditSeal seals one stream-day of
// SLUICE_BENCH_SEAL_EVENTS events (default 100,000) in the embedded store.

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"runtime/debug"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/audit/auditlog"
	"github.com/sluicehq/sluice/internal/config"
	"github.com/sluicehq/sluice/internal/model"
	"github.com/sluicehq/sluice/internal/store"
	"github.com/sluicehq/sluice/internal/store/pebblestore"
	"github.com/sluicehq/sluice/internal/testenv"
)

const benchEvents = 1000 // per request

// auditBody returns request i: events between base (today's start) and
// now, which an enabled audit log accepts.
func auditBody(i int, base, now int64) []byte {
	rng := rand.New(rand.NewPCG(uint64(i), 3))
	var b bytes.Buffer
	for j := range benchEvents {
		ts := base + rng.Int64N(max(now-base, 1))
		fmt.Fprintf(&b, `{"event_id":"ev-%d-%d","stream":"s%d","ts":%d,"actor":"user:%d","action":"invoice.refund","resource":"invoice:%d","outcome":"success","attributes":{"amount":%d,"ip":"10.0.%d.%d"}}`+"\n",
			i, j, j%10, ts, rng.IntN(1000), rng.IntN(100000), rng.IntN(10000), rng.IntN(256), rng.IntN(256))
	}
	return b.Bytes()
}

func BenchmarkAuditIngest(b *testing.B) {
	for _, on := range []bool{false, true} {
		b.Run("integrity="+map[bool]string{false: "off", true: "on"}[on], func(b *testing.B) { benchAuditIngest(b, on) })
	}
}

func benchAuditIngest(b *testing.B, integrity bool) {
	cfg, _, err := config.Load("", os.Environ())
	if err != nil {
		b.Fatal(err)
	}
	cfg.DataDir = b.TempDir()
	cfg.Rollups.Enabled = false
	cfg.HTTP.Addr = "127.0.0.1:0"
	cfg.Auth.Tokens = []config.Token{{Token: "bench-token", Tenant: "bench"}}
	if integrity {
		skey, _, err := auditlog.GenerateKey("audit.bench")
		if err != nil {
			b.Fatal(err)
		}
		cfg.Audit.Enabled = true
		cfg.Audit.KeyFile = filepath.Join(b.TempDir(), "key")
		if err := os.WriteFile(cfg.Audit.KeyFile, []byte(skey), 0o600); err != nil {
			b.Fatal(err)
		}
	}
	base := time.Now().UTC().Truncate(24 * time.Hour).UnixMilli()
	bodies := make([][]byte, b.N)
	for i := range bodies {
		bodies[i] = auditBody(i, base, time.Now().UnixMilli())
	}
	ctx, cancel := context.WithCancel(context.Background())
	addr := make(chan string, 1)
	done := make(chan error, 1)
	keepHeapUnlimited(b)
	go func() {
		done <- serve(ctx, cfg, "", slog.New(slog.DiscardHandler), func(a string) { addr <- a })
	}()
	url := "http://" + <-addr + "/v1/audit"
	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: benchWriters}}
	var next atomic.Int64
	cpu0 := processCPU()
	b.ResetTimer()
	start := time.Now()
	var wg sync.WaitGroup
	for range benchWriters {
		wg.Go(func() {
			for i := int(next.Add(1) - 1); i < b.N; i = int(next.Add(1) - 1) {
				req, _ := http.NewRequest(http.MethodPost, url, bytes.NewReader(bodies[i]))
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
		})
	}
	wg.Wait()
	acked := time.Since(start)
	// Flushes and compactions after the last acknowledgement are paid for.
	idle := waitIdle(b)
	b.StopTimer()
	n := float64(b.N * benchEvents)
	b.ReportMetric(n/idle.at.Sub(start).Seconds(), "events/s")
	b.ReportMetric(n/acked.Seconds(), "acked_events/s")
	// CPU time is steadier than wall time on a shared machine; it includes
	// the clients' share (building nothing: bodies are made up front).
	b.ReportMetric(float64((idle.cpu-cpu0).Microseconds())/n, "cpu_us/event")
	cancel()
	if err := <-done; err != nil {
		b.Fatal(err)
	}
	if integrity {
		seal := sealIngested(b, cfg, model.DayOf(base), b.N*benchEvents)
		b.ReportMetric(float64(seal.Microseconds())/n, "seal_cpu_us/event")
		b.ReportMetric(float64((idle.cpu-cpu0+seal).Microseconds())/n, "with_seal_cpu_us/event")
	}
}

// sealIngested seals the audit day d of the gateway's store, as its sealer
// would once the day is due, checks that the logs hold want events, and
// returns the CPU time the seal took, its flush and compactions included.
func sealIngested(b *testing.B, cfg config.Config, d model.Day, want int) time.Duration {
	ctx := context.Background()
	logger := slog.New(slog.DiscardHandler)
	be, err := openBackend(ctx, &cfg, logger, nil)
	if err != nil {
		b.Fatal(err)
	}
	st := be.(*pebblestore.Store)
	defer st.Close()
	// What the gateway had not flushed when it stopped is ingest's work.
	if err := st.Flush(); err != nil {
		b.Fatal(err)
	}
	// The heap the stopped gateway left is collected and returned to the
	// system first: the runtime's scavenging of it is not the seal's work.
	debug.FreeOSMemory()
	cpu0 := waitIdle(b).cpu
	keys, err := auditlog.LoadKeys(cfg.Audit)
	if err != nil {
		b.Fatal(err)
	}
	now := func() time.Time { return time.UnixMilli((d + 2).Start()) }
	l := auditlog.New(cfg.Audit, st, keys, now, logger, nil)
	stopProfile := testenv.CPUProfile(b, os.Getenv("SLUICE_BENCH_SEAL_PROFILE"))
	if err := l.SealDue(ctx); err != nil {
		b.Fatal(err)
	}
	if err := st.Flush(); err != nil {
		b.Fatal(err)
	}
	cpu := waitIdle(b).cpu - cpu0
	stopProfile()
	refs, err := st.AuditStreams(ctx, d)
	if err != nil {
		b.Fatal(err)
	}
	var sealed int64
	for _, ref := range refs {
		recs, err := l.Records(ctx, ref.Tenant, ref.Series)
		if err != nil {
			b.Fatal(err)
		}
		for _, r := range recs {
			sealed += r.Events()
		}
	}
	if sealed != int64(want) {
		b.Fatalf("the logs hold %d events, want %d", sealed, want)
	}
	return cpu
}

func BenchmarkAuditSeal(b *testing.B) {
	n := 100_000
	if v := os.Getenv("SLUICE_BENCH_SEAL_EVENTS"); v != "" {
		var err error
		if n, err = strconv.Atoi(v); err != nil || n < 1 {
			b.Fatalf("SLUICE_BENCH_SEAL_EVENTS=%q", v)
		}
	}
	st, err := pebblestore.Open(b.TempDir(), pebblestore.Options{}, slog.New(slog.DiscardHandler))
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close()
	ctx := context.Background()
	d := model.Day(20400)
	// Unsorted attribute names (SLUICE_BENCH_SEAL_ATTRS=unsorted) take the
	// canonicaliser's slow path; Go's encoding/json writes a map sorted.
	unsorted := os.Getenv("SLUICE_BENCH_SEAL_ATTRS") == "unsorted"
	// The day before, small and sealed first: the measured seal proves
	// consistency with it, as every seal but a stream's first does.
	writeAuditDay(ctx, b, st, d-1, 1000, unsorted)
	writeAuditDay(ctx, b, st, d, n, unsorted)
	skey, _, err := auditlog.GenerateKey("audit.bench")
	if err != nil {
		b.Fatal(err)
	}
	keys, err := auditlog.ParseKeys(skey, nil)
	if err != nil {
		b.Fatal(err)
	}
	now := func() time.Time { return time.UnixMilli((d + 2).Start()) }
	l := auditlog.New(auditlog.DefaultConfig(), st, keys, now, slog.New(slog.DiscardHandler), nil)
	if _, err := l.Seal(ctx, "bench", "s", d-1); err != nil {
		b.Fatal(err)
	}
	// The writes' flushes and compactions are ingest's work, not the seal's.
	if err := st.Flush(); err != nil {
		b.Fatal(err)
	}
	// Likewise the heap the writes left.
	debug.FreeOSMemory()
	waitIdle(b)
	if b.N > 1 {
		b.Fatal("AuditSeal measures one seal of one day: run it with -benchtime=1x")
	}
	b.ResetTimer()
	for range b.N {
		stopProfile := testenv.CPUProfile(b, os.Getenv("SLUICE_BENCH_SEAL_PROFILE"))
		start, cpu0 := time.Now(), processCPU()
		rec, err := l.Seal(ctx, "bench", "s", d)
		if err != nil || rec == nil || rec.Events() != int64(n) {
			b.Fatalf("seal: %v %+v", err, rec)
		}
		sealed := time.Since(start)
		// The seal's own writes (its leaves) are flushed and compacted after
		// it returns: that is counted too.
		if err := st.Flush(); err != nil {
			b.Fatal(err)
		}
		idle := waitIdle(b)
		stopProfile()
		b.ReportMetric(sealed.Seconds(), "seal_s")
		b.ReportMetric(float64(n)/sealed.Seconds(), "sealed_events/s")
		b.ReportMetric(float64((idle.cpu-cpu0).Microseconds())/float64(n), "seal_cpu_us/event")
		start = time.Now()
		rep, err := l.Verify(ctx, "bench", "s", d, d)
		if err != nil || !rep.OK {
			b.Fatalf("verify: %v %+v", err, rep)
		}
		b.ReportMetric(time.Since(start).Seconds(), "verify_s")
	}
}

// writeAuditDay writes n events of stream s on day d as the sink would:
// partitions of 100,000 events, the events of each at random times of the
// day.
func writeAuditDay(ctx context.Context, b *testing.B, st *pebblestore.Store, d model.Day, n int, unsorted bool) {
	rng := rand.New(rand.NewPCG(uint64(d), 2))
	const perPart, perBatch = 100_000, 10_000
	for i := 0; i < n; i += perBatch {
		pk := model.PartitionKey{Kind: model.KindAudit, Tenant: "bench", Series: "s", Day: d, Sub: uint32(i / perPart)}
		var evs []model.AuditEvent
		for j := i; j < min(n, i+perBatch); j++ {
			attrs := fmt.Appendf(nil, `{"amount":%d,"ip":"10.0.%d.%d"}`, rng.IntN(10000), rng.IntN(256), rng.IntN(256))
			if unsorted {
				attrs = fmt.Appendf(nil, `{"ip":"10.0.%d.%d","amount":%d}`, rng.IntN(256), rng.IntN(256), rng.IntN(10000))
			}
			evs = append(evs, model.AuditEvent{EventID: fmt.Sprintf("ev-%07d", j), Stream: "s", TS: d.Start() + rng.Int64N(model.MillisPerDay),
				Actor: "user:" + strconv.Itoa(rng.IntN(1000)), Action: "invoice.refund", Resource: "invoice:" + strconv.Itoa(j), Outcome: "success",
				Attributes: attrs})
		}
		bt := &store.Batch{Partitions: []store.PartitionWrite{{Key: pk, Events: evs}},
			Catalogue: []model.PartitionInfo{{Key: pk, Rows: perPart, Bytes: 1 << 30, MinTS: d.Start(), MaxTS: d.End() - 1, State: "split"}}}
		if err := st.Commit(ctx, bt); err != nil {
			b.Fatal(err)
		}
	}
}

// processCPU is the user and system CPU time of this process so far.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
