package main

// The HTTP → Cassandra benchmark and its limit, for docs/benchmarks.md
// ("HTTP → Cassandra"):
//
//	go test -run='^$' -bench='HTTPCassandra' -benchtime=64x ./cmd/ingest
//
// Both sides write the rows of BenchmarkHTTPIngest (the same NDJSON bodies:
// 1,000 readings of 2 metrics from 10,000 devices, by 4 concurrent writers)
// into the same node, each as a tenant of its own:
//
//   - gateway: the gateway (serve) with store.backend=cassandra, on a
//     keyspace created by the migrate code, answering the bodies POSTed over
//     HTTP;
//   - limit: a minimal direct gocql writer. Per request, the rows grouped by
//     partition (device, day, sub 0) in UNLOGGED batches of at most
//     store.cassandra.batch_rows rows of one partition, at most
//     store.cassandra.max_concurrent_requests requests in flight, with the
//     same write consistency, connections per node and host selection. No
//     HTTP, no decoding, no bucketing, no catalogue.
//
// Both first write every body once, untimed (a warm-up: the gateway's
// planner then knows the series-days and their partitions are registered).
// Then SLUICE_BENCH_ROUNDS rounds (default 5) run the two alternately, as
// sub-benchmarks 1/gateway, 1/limit, 2/gateway, …, so that each pair sees
// the node and the machine in nearly the same state. (-count would repeat
// one side before the other.) SLUICE_BENCH_DEVICES (default 10,000) spreads
// the readings over fewer devices: more rows per partition per request, so
// fewer partitions and catalogue entries per row. SLUICE_BENCH_METRICS=1
// logs the gateway's
// Cassandra requests by kind. Cassandra comes from SLUICE_TEST_CASSANDRA
// (default 127.0.0.1:9042); the keyspace is created once per process and
// dropped at its end.

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	gocql "github.com/apache/cassandra-gocql-driver/v2"

	"github.com/sluicehq/sluice/internal/config"
	"github.com/sluicehq/sluice/internal/model"
	"github.com/sluicehq/sluice/internal/store/cqlstore"
	"github.com/sluicehq/sluice/internal/testenv"
)

func cassandraAddr() string {
	if a := os.Getenv("SLUICE_TEST_CASSANDRA"); a != "" {
		return a
	}
	return "127.0.0.1:9042"
}

// requireCassandra skips when Cassandra does not answer (fails under
// CI=true).
func requireCassandra(tb testing.TB) {
	tb.Helper()
	testenv.Require(tb, "cassandra", cassandraAddr())
}

var (
	benchKeyspaceOnce sync.Once
	benchKeyspaceCfg  cqlstore.Config
	benchKeyspaceErr  error
	benchTenants      atomic.Int64
)

// benchCassandraConfig returns the gateway configuration (defaults with
// SLUICE_* overrides) on the benchmark keyspace, creating the keyspace with
// the migrate code on first use.
func benchCassandraConfig(b *testing.B) config.Config {
	b.Helper()
	requireCassandra(b)
	// Loaded as Cassandra, so that the defaults that depend on the store
	// (rollups.past_roll_delay) are Cassandra's.
	cfg, _, err := config.Load("", append(os.Environ(), "SLUICE_STORE_BACKEND=cassandra", "SLUICE_STORE_CASSANDRA_HOSTS="+cassandraAddr()))
	if err != nil {
		b.Fatal(err)
	}
	benchKeyspaceOnce.Do(func() {
		c := cfg.Store.Cassandra
		c.Hosts = []string{cassandraAddr()}
		c.Keyspace = fmt.Sprintf("sluice_bench_%d", os.Getpid())
		c.ReplicationClass, c.ReplicationFactor = "SimpleStrategy", 1
		benchKeyspaceCfg = c
		cfg.Store.Cassandra = c
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		benchKeyspaceErr = migrate(ctx, cfg, slog.New(slog.DiscardHandler))
	})
	if benchKeyspaceErr != nil {
		b.Fatal(benchKeyspaceErr)
	}
	cfg.Store.Cassandra = benchKeyspaceCfg
	return cfg
}

// TestMain drops the benchmark keyspace, if one was created.
func TestMain(m *testing.M) {
	code := m.Run()
	if benchKeyspaceCfg.Keyspace != "" {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		if err := cqlstore.DropKeyspace(ctx, benchKeyspaceCfg, slog.New(slog.DiscardHandler)); err != nil {
			fmt.Fprintln(os.Stderr, "drop benchmark keyspace:", err)
		}
		cancel()
	}
	os.Exit(code)
}

func BenchmarkHTTPCassandra(b *testing.B) {
	rounds := 5
	if v := os.Getenv("SLUICE_BENCH_ROUNDS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			b.Fatalf("SLUICE_BENCH_ROUNDS: want a positive integer, got %q", v)
		}
		rounds = n
	}
	devices := benchDevices
	if v := os.Getenv("SLUICE_BENCH_DEVICES"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			b.Fatalf("SLUICE_BENCH_DEVICES: want a positive integer, got %q", v)
		}
		devices = n
	}
	reqs, bodies := benchDataOf(devices)
	cfg := benchCassandraConfig(b)
	gw := startBenchGateway(b, cfg)
	defer gw.stop(b)
	lim := openBenchLimit(b, cfg)
	defer lim.sess.Close()

	// Warm-up, untimed: every body once through each side, so that the
	// rounds measure a running gateway (its planner knows the 10,000
	// series-days, their partitions are registered), not its first minute.
	warm := make(chan int)
	var wg sync.WaitGroup
	for range benchWriters {
		wg.Go(func() {
			for i := range warm {
				gw.post(b, bodies[i])
				lim.write(b, reqs[i])
			}
		})
	}
	for i := range bodies {
		warm <- i
	}
	close(warm)
	wg.Wait()
	if os.Getenv("SLUICE_BENCH_METRICS") != "" {
		gw.logRequestCounts(b, "after warm-up")
	}

	for r := 1; r <= rounds; r++ {
		b.Run(fmt.Sprintf("%d/gateway", r), func(b *testing.B) {
			benchRun(b, func(i int) { gw.post(b, bodies[i%len(bodies)]) })
		})
		b.Run(fmt.Sprintf("%d/limit", r), func(b *testing.B) {
			benchRun(b, func(i int) { lim.write(b, reqs[i%len(reqs)]) })
		})
	}
	if os.Getenv("SLUICE_BENCH_METRICS") != "" {
		gw.logRequestCounts(b, "at the end")
	}
}

// benchGateway is the gateway (serve) on Cassandra, in this process.
type benchGateway struct {
	base   string
	hc     *http.Client
	cancel context.CancelFunc
	done   chan error
}

func startBenchGateway(b *testing.B, cfg config.Config) *benchGateway {
	cfg.DataDir = b.TempDir() // what the gateway keeps locally besides the store (rollup outbox)
	cfg.HTTP.Addr = "127.0.0.1:0"
	cfg.Auth.Tokens = []config.Token{{Token: "bench-token", Tenant: fmt.Sprintf("bench%d", benchTenants.Add(1))}}
	ctx, cancel := context.WithCancel(context.Background())
	g := &benchGateway{cancel: cancel, done: make(chan error, 1),
		hc: &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: benchWriters}}}
	addr := make(chan string, 1)
	keepHeapUnlimited(b)
	go func() {
		g.done <- serve(ctx, cfg, "", slog.New(slog.DiscardHandler), func(a string) { addr <- a })
	}()
	select {
	case a := <-addr:
		g.base = "http://" + a
	case err := <-g.done:
		cancel()
		b.Fatal(err)
	}
	return g
}

func (g *benchGateway) post(b *testing.B, body []byte) {
	req, _ := http.NewRequest(http.MethodPost, g.base+"/v1/readings", bytes.NewReader(body))
	req.Header.Set("Authorization", "Bearer bench-token")
	req.Header.Set("Content-Type", "application/x-ndjson")
	resp, err := g.hc.Do(req)
	if err != nil {
		b.Error(err)
		return
	}
	msg, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusAccepted {
		b.Errorf("status %d: %s", resp.StatusCode, msg)
	}
}

func (g *benchGateway) stop(b *testing.B) {
	g.cancel()
	if err := <-g.done; err != nil {
		b.Error(err)
	}
}

const insBenchReading = `INSERT INTO readings (tenant, device, day, sub, ts, metric, value, seq, has_seq) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)`

// benchLimit is the minimal direct gocql writer.
type benchLimit struct {
	sess      *gocql.Session
	tenant    string
	cl        gocql.Consistency
	sem       chan struct{} // one token per request in flight
	batchRows int
}

func openBenchLimit(b *testing.B, cfg config.Config) *benchLimit {
	c := cfg.Store.Cassandra
	cc := gocql.NewCluster(c.Hosts...)
	cc.Keyspace = c.Keyspace
	cc.NumConns = c.NumConns
	cc.Timeout, cc.WriteTimeout, cc.ConnectTimeout = c.Timeout, c.Timeout, c.ConnectTimeout
	cc.PoolConfig.HostSelectionPolicy = gocql.TokenAwareHostPolicy(gocql.DCAwareRoundRobinPolicy(c.LocalDC), gocql.ShuffleReplicas())
	sess, err := cc.CreateSession()
	if err != nil {
		b.Fatal(err)
	}
	return &benchLimit{sess: sess, tenant: fmt.Sprintf("bench%d", benchTenants.Add(1)),
		cl: gocql.ParseConsistency(c.WriteConsistency), sem: make(chan struct{}, c.MaxConcurrentRequests), batchRows: c.BatchRows}
}

// write stores one request's rows: one group of UNLOGGED batches per
// partition, all in parallel under the in-flight bound.
func (l *benchLimit) write(b *testing.B, rs []benchReading) {
	type pkey struct {
		device string
		day    model.Day
	}
	parts := make(map[pkey][]gocql.BatchEntry)
	var order []pkey
	for j, r := range rs {
		k := pkey{r.device, model.DayOf(r.ts)}
		es, ok := parts[k]
		if !ok {
			order = append(order, k)
		}
		for _, m := range [2]struct {
			name string
			v    float64
		}{{"rpm", r.rpm}, {"temp_c", r.temp}} {
			es = append(es, gocql.BatchEntry{Stmt: insBenchReading, Idempotent: true,
				Args: []any{l.tenant, r.device, k.day.Start(), int32(0), r.ts, m.name, m.v, int64(j), true}})
		}
		parts[k] = es
	}
	var wg sync.WaitGroup
	for _, k := range order {
		es := parts[k]
		for len(es) > 0 {
			n := min(l.batchRows, len(es))
			chunk := es[:n:n]
			es = es[n:]
			l.sem <- struct{}{}
			wg.Go(func() {
				defer func() { <-l.sem }()
				var err error
				if len(chunk) == 1 {
					err = l.sess.Query(chunk[0].Stmt, chunk[0].Args...).Consistency(l.cl).Idempotent(true).Exec()
				} else {
					bt := l.sess.Batch(gocql.UnloggedBatch).Consistency(l.cl)
					bt.Entries = chunk
					err = bt.Exec()
				}
				if err != nil {
					b.Error(err)
				}
			})
		}
	}
	wg.Wait()
}

// logRequestCounts logs how many Cassandra requests of each kind the
// gateway sent (SLUICE_BENCH_METRICS=1), to compare with the limit's.
func (g *benchGateway) logRequestCounts(b *testing.B, when string) {
	resp, err := g.hc.Get(g.base + "/metrics")
	if err != nil {
		b.Log(err)
		return
	}
	m, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for l := range strings.SplitSeq(string(m), "\n") {
		if strings.HasPrefix(l, "sluice_cassandra_request_seconds_count") || strings.HasPrefix(l, "sluice_sink_commits_total") {
			fmt.Fprintf(os.Stderr, "%s: %s: %s\n", b.Name(), when, l)
		}
	}
}

// benchRun hands one request (its index) per b.Loop iteration to
// benchWriters concurrent writers calling fn, and reports readings/s over
// the whole run, the last requests in flight included.
func benchRun(b *testing.B, fn func(i int)) {
	work := make(chan int)
	var wg sync.WaitGroup
	for range benchWriters {
		wg.Go(func() {
			for i := range work {
				fn(i)
			}
		})
	}
	start := time.Now()
	n := 0
	for b.Loop() {
		work <- n
		n++
	}
	close(work)
	wg.Wait()
	b.ReportMetric(float64(n*benchReadings)/time.Since(start).Seconds(), "readings/s")
}
