package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/store/cqlstore"
	"github.com/sluicehq/sluice/internal/testenv"
)

// The gateway on the Cassandra backend, through the real binaries: `ingest
// migrate`, `ingest` with SLUICE_STORE_BACKEND=cassandra, HTTP writes,
// reads through the gateway with `query` and straight from Cassandra with
// `query --direct`, with and without a gateway running.

func cassandraAddr() string {
	if a := os.Getenv("SLUICE_TEST_CASSANDRA"); a != "" {
		return a
	}
	return "127.0.0.1:9042"
}

// requireCassandra skips when Cassandra does not answer (fails under
// CI=true).
func requireCassandra(t *testing.T) {
	t.Helper()
	testenv.Require(t, "cassandra", cassandraAddr())
}

// cassandraEnv returns the SLUICE_* settings that point the gateway and the
// query tool at a keyspace of their own, dropped when t ends.
func cassandraEnv(t *testing.T) []string {
	t.Helper()
	requireCassandra(t)
	ks := fmt.Sprintf("sluice_e2e_%d_%d", os.Getpid(), time.Now().UnixNano()%1_000_000_000)
	t.Cleanup(func() {
		cfg := cqlstore.DefaultConfig()
		cfg.Hosts, cfg.Keyspace = []string{cassandraAddr()}, ks
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := cqlstore.DropKeyspace(ctx, cfg, slog.New(slog.DiscardHandler)); err != nil {
			t.Errorf("drop keyspace %s: %v", ks, err)
		}
	})
	return []string{
		"SLUICE_STORE_BACKEND=cassandra",
		"SLUICE_STORE_CASSANDRA_HOSTS=" + cassandraAddr(),
		"SLUICE_STORE_CASSANDRA_KEYSPACE=" + ks,
		// One node: one replica.
		"SLUICE_STORE_CASSANDRA_REPLICATION_CLASS=SimpleStrategy",
		"SLUICE_STORE_CASSANDRA_REPLICATION_FACTOR=1",
	}
}

// runBin runs a built binary with extra environment in a directory without
// configs/ingest.yaml, and returns its stdout, stderr and error.
func runBin(t *testing.T, env []string, name string, args ...string) (string, string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(bin, name), args...)
	cmd.Dir = t.TempDir()
	cmd.Env = append(os.Environ(), env...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	return out.String(), errb.String(), err
}

// direct runs `query ARGS --direct --tenant acme` and fails t if it fails.
func direct(t *testing.T, env []string, args ...string) string {
	t.Helper()
	args = append(args, "--direct", "--tenant", "acme")
	out, errOut, err := runBin(t, env, "query", args...)
	if err != nil {
		t.Fatalf("query %s: %v\nstderr: %s", strings.Join(args, " "), err, errOut)
	}
	return out
}

func TestCassandraGateway(t *testing.T) {
	env := cassandraEnv(t)

	// The schema, twice: migrate is idempotent.
	for i := range 2 {
		if _, errOut, err := runBin(t, env, "ingest", "migrate"); err != nil {
			t.Fatalf("ingest migrate (run %d): %v\n%s", i+1, err, errOut)
		}
	}

	g := startGateway(t, t.TempDir(), env...)
	if !strings.Contains(g.logs(), "cassandra store open") {
		t.Fatalf("the gateway did not open the Cassandra store:\n%s", g.logs())
	}
	base := day(1).Add(10 * time.Hour)
	const n = 300
	var bodies [3]strings.Builder
	for i := range n {
		fmt.Fprintln(&bodies[i/100], reading("pump-17", base.Add(time.Duration(i)*time.Second), i))
	}
	for _, k := range []int{2, 0, 1} {
		status, body := g.post("/v1/readings", "application/x-ndjson", []byte(bodies[k].String()))
		if status != 202 || body != "{\"accepted\":100}\n" {
			t.Fatalf("POST readings: %d %s", status, body)
		}
	}
	// A retried request stores nothing twice.
	if status, body := g.post("/v1/readings", "application/x-ndjson", []byte(bodies[1].String())); status != 202 {
		t.Fatalf("retry of readings: %d %s", status, body)
	}
	// Audit events, the whole request sent twice: each stored once.
	var events strings.Builder
	for i := range 20 {
		fmt.Fprintf(&events, `{"event_id":"01JCA%03d","stream":"billing-api","ts":%q,"actor":"user:7","action":"invoice.void","resource":"invoice:%d","outcome":"success","attributes":{"n":%d}}`+"\n",
			i, base.Add(time.Duration(i)*time.Minute).Format(time.RFC3339), i, i)
	}
	for range 2 {
		if status, body := g.post("/v1/audit", "application/x-ndjson", []byte(events.String())); status != 202 {
			t.Fatalf("POST audit: %d %s", status, body)
		}
	}

	all := make([]int, n)
	for i := range all {
		all[i] = i
	}
	from, to := day(1).Format(time.RFC3339), day(0).Format(time.RFC3339)
	wantCSV := expectedCSV(base, all)
	readings := []string{"readings", "--device", "pump-17", "--from", from, "--to", to, "--all", "--format", "csv"}
	audit := []string{"audit", "--stream", "billing-api", "--from", from, "--to", to, "--format", "json"}
	partitions := []string{"partitions", "--device", "pump-17", "--day", day(1).Format(time.DateOnly), "--format", "csv"}

	// Through the gateway.
	if out, _ := g.query(readings...); out != wantCSV {
		t.Fatalf("query readings via the gateway:\n%s\nwant:\n%s", head(out), head(wantCSV))
	}
	checkAudit(t, "via the gateway", func() string { out, _ := g.query(audit...); return out }())
	viaGateway, _ := g.query(partitions...)
	// Writer 0's single partition: 300 readings x 2 metrics, and the
	// retried 100 counted again (the count is an upper bound).
	if lines := strings.Split(strings.TrimSpace(viaGateway), "\n"); len(lines) != 2 || !strings.HasPrefix(lines[1], "0,single,false,800,") {
		t.Fatalf("partitions via the gateway:\n%s", viaGateway)
	}
	// No dead letters over HTTP; --direct serves the endpoint all the same.
	deadLetters := []string{"deadletters", "--from", from, "--to", to, "--format", "json"}
	deadViaGateway, _ := g.query(deadLetters...)
	if want := "{\n  \"dead_letters\": []\n}\n"; deadViaGateway != want {
		t.Fatalf("deadletters via the gateway:\n%s\nwant:\n%s", deadViaGateway, want)
	}

	// Straight from Cassandra, while the gateway runs and after it stopped.
	for _, phase := range []string{"gateway running", "gateway stopped"} {
		if phase == "gateway stopped" {
			g.stop()
		}
		if out := direct(t, env, readings...); out != wantCSV {
			t.Fatalf("query readings --direct (%s):\n%s\nwant:\n%s", phase, head(out), head(wantCSV))
		}
		checkAudit(t, "--direct ("+phase+")", direct(t, env, audit...))
		if out := direct(t, env, partitions...); out != viaGateway {
			t.Fatalf("query partitions --direct (%s):\n%s\nwant (as the gateway lists them):\n%s", phase, out, viaGateway)
		}
		if out := direct(t, env, deadLetters...); out != deadViaGateway {
			t.Fatalf("query deadletters --direct (%s):\n%s\nwant (as the gateway lists them):\n%s", phase, out, deadViaGateway)
		}
	}

	// A new gateway on the same keyspace serves what the first one wrote,
	// and a retry of an audit request through it is still a no-op.
	g2 := startGateway(t, t.TempDir(), env...)
	if status, body := g2.post("/v1/audit", "application/x-ndjson", []byte(events.String())); status != 202 {
		t.Fatalf("POST audit after restart: %d %s", status, body)
	}
	if out, _ := g2.query(readings...); out != wantCSV {
		t.Fatalf("query readings after restart:\n%s", head(out))
	}
	checkAudit(t, "after restart", func() string { out, _ := g2.query(audit...); return out }())
	g2.stop()
}

// checkAudit checks a `query audit --format json` page: the 20 events of
// TestCassandraGateway, once each, in order, with their attributes.
func checkAudit(t *testing.T, how, out string) {
	t.Helper()
	var page struct {
		Events []struct {
			EventID    string          `json:"event_id"`
			Attributes json.RawMessage `json:"attributes"`
		} `json:"events"`
	}
	if err := json.Unmarshal([]byte(out), &page); err != nil {
		t.Fatalf("query audit %s: %v\n%s", how, err, out)
	}
	if len(page.Events) != 20 {
		t.Fatalf("query audit %s: %d events, want 20\n%s", how, len(page.Events), out)
	}
	for i, e := range page.Events {
		var attrs bytes.Buffer
		_ = json.Compact(&attrs, e.Attributes)
		if want := fmt.Sprintf("01JCA%03d", i); e.EventID != want || attrs.String() != fmt.Sprintf(`{"n":%d}`, i) {
			t.Fatalf("query audit %s: event %d is %s %s, want %s {\"n\":%d}", how, i, e.EventID, attrs.String(), want, i)
		}
	}
}

// TestQueryDirectNeedsCassandra: --direct on a configuration whose backend
// is the embedded store says which key to set, and reads nothing.
func TestQueryDirectNeedsCassandra(t *testing.T) {
	_, errOut, err := runBin(t, []string{"SLUICE_STORE_BACKEND=pebble"}, "query", "readings", "--device", "d", "--direct", "--tenant", "acme")
	if err == nil {
		t.Fatal("query --direct on the pebble backend succeeded")
	}
	if !strings.Contains(errOut, "store.backend: cassandra") {
		t.Fatalf("query --direct on the pebble backend: stderr does not name store.backend:\n%s", errOut)
	}
}
