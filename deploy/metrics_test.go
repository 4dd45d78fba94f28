package deploy

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/chstore/chstoretest"

	mqtt "github.com/eclipse/paho.mqtt.golang"

	"github.com/sluicehq/sluice/internal/config"
	"github.com/sluicehq/sluice/internal/store/cqlstore"
	"github.com/sluicehq/sluice/internal/testenv"
)

const alertRules = "prometheus/alerts.yml"

var metricName = regexp.MustCompile(`\bsluice_[a-z0-9_]*[a-z0-9]`)

// queriedMetrics returns the sluice_ metrics that the operators' dashboards
// (their Prometheus queries and variables), the Prometheus configuration
// and the alert rules use, sorted.
func queriedMetrics(t *testing.T) []string {
	t.Helper()
	var texts []string
	for _, d := range dashboards(t) {
		for _, v := range d.Templating.List {
			if v.Datasource != nil && v.Datasource.Type == "prometheus" {
				texts = append(texts, v.text())
			}
		}
		for _, p := range d.allPanels() {
			for _, tg := range p.Targets {
				texts = append(texts, tg.Expr)
			}
		}
	}
	for _, f := range []string{prometheusConfig, alertRules} {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		texts = append(texts, string(b))
	}
	names := map[string]bool{}
	for _, s := range texts {
		for _, n := range metricName.FindAllString(s, -1) {
			names[n] = true
		}
	}
	return slices.Sorted(maps.Keys(names))
}

// buildIngest builds cmd/ingest into a temporary directory.
func buildIngest(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "ingest")
	cmd := exec.Command("go", "build", "-o", bin, "./cmd/ingest")
	cmd.Dir = ".."
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build ingest: %v\n%s", err, out)
	}
	return bin
}

func testAddr(envName, def string) string {
	if a := os.Getenv(envName); a != "" {
		return a
	}
	return def
}

// readyLine is the gateway's start-up line (log.format text).
var readyLine = regexp.MustCompile(`msg="gateway ready" http_addr=(\S+)`)

// composeGateway is a gateway process started as the compose file starts
// one, on the test servers.
type composeGateway struct {
	url  string
	mu   sync.Mutex
	logs bytes.Buffer
}

func (g *composeGateway) log() string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.logs.String()
}

// TestDashboardMetricsExported starts the gateway as docker-compose.yml
// starts it (the migrate service's command, then a gateway's, each with its
// SLUICE_* variables; only the addresses, names and directories point at
// the test servers and at scratch keyspace, database and topics), makes it
// accept, refuse and dead-letter a write, and checks that every metric the
// dashboards, the Prometheus configuration and the alert rules use is on its
// /metrics.
func TestDashboardMetricsExported(t *testing.T) {
	cqlAddr := testAddr("SLUICE_TEST_CASSANDRA", "127.0.0.1:9042")
	mqttAddr := "127.0.0.1:" + testAddr("SLUICE_MQTT_PORT", "1883")
	chAddr := clickhouseAddr()
	testenv.Require(t, "cassandra", cqlAddr)
	testenv.Require(t, "mosquitto", mqttAddr)
	testenv.LockClickHouse(t, false)
	testenv.Require(t, "clickhouse", chAddr)
	// The embedded store's metrics are not exported on Cassandra, which the
	// compose deployment runs: e2e TestAlertMetricsExported checks them on
	// a gateway with the embedded store.
	names := slices.DeleteFunc(queriedMetrics(t), func(n string) bool { return strings.HasPrefix(n, "sluice_store_") })
	if len(names) < 15 {
		t.Fatalf("only %d metrics found in the dashboards and rules: %v", len(names), names)
	}
	p := project(t)
	gws, migrate := gateways(t, p)
	bin := buildIngest(t)

	unique := fmt.Sprintf("deploy_%d", time.Now().UnixNano())
	keyspace, database, prefix := "sluice_"+unique, "sluice_"+unique, "deploy-"+unique
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		cfg := cqlstore.DefaultConfig()
		cfg.Hosts, cfg.Keyspace = []string{cqlAddr}, keyspace
		if err := cqlstore.DropKeyspace(ctx, cfg, slog.New(slog.DiscardHandler)); err != nil {
			t.Errorf("drop keyspace %s: %v", keyspace, err)
		}
		if err := chstoretest.Drop(chAddr, database); err != nil {
			t.Errorf("drop database %s: %v", database, err)
		}
	})
	local := map[string]string{
		"SLUICE_HTTP_ADDR":                   "127.0.0.1:0",
		"SLUICE_HTTP_DRAIN_DELAY":            "0s",
		"SLUICE_STORE_CASSANDRA_HOSTS":       cqlAddr,
		"SLUICE_STORE_CASSANDRA_KEYSPACE":    keyspace,
		"SLUICE_ROLLUPS_CLICKHOUSE_ADDR":     chAddr,
		"SLUICE_ROLLUPS_CLICKHOUSE_DATABASE": database,
		"SLUICE_MQTT_BROKERS":                "tcp://" + mqttAddr,
		"SLUICE_MQTT_CLIENT_ID":              prefix + "-gateway",
		"SLUICE_MQTT_SHARED_GROUP":           prefix,
		"SLUICE_MQTT_TOPICS":                 prefix + "/devices/+/readings:1",
		"SLUICE_MQTT_TOPIC_TEMPLATE":         prefix + "/devices/{device_id}/readings",
		"SLUICE_READ_CURSOR_KEY_FILE":        p.Secrets["cursor-key"].File,
	}
	environ := func(vars map[string]string, dataDir string) []string {
		out := os.Environ()
		for k, v := range vars {
			out = append(out, k+"="+v)
		}
		for k, v := range local {
			out = append(out, k+"="+v)
		}
		return append(out, "SLUICE_DATA_DIR="+dataDir)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	mig := exec.CommandContext(ctx, bin, migrate.Command...)
	mig.Dir, mig.Env = t.TempDir(), environ(sluiceVars(migrate), t.TempDir())
	if out, err := mig.CombinedOutput(); err != nil {
		t.Fatalf("ingest %s: %v\n%s", strings.Join(migrate.Command, " "), err, out)
	}
	g := startComposeGateway(t, ctx, bin, gws[0].Command, environ(sluiceVars(gws[0]), t.TempDir()))

	// Labelled counters appear with their first event.
	ts := time.Now().UTC().Add(-time.Minute).Format(time.RFC3339Nano)
	for body, want := range map[string]int{
		`{"device_id":"d1","ts":"` + ts + `","metrics":{"t":1}}` + "\n": http.StatusAccepted,
		`{"device_id": 7}` + "\n": http.StatusBadRequest,
	} {
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, g.url+"/v1/readings", strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+config.DevToken)
		req.Header.Set("Content-Type", "application/x-ndjson")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Fatalf("POST %s: %d %s, want %d", body, resp.StatusCode, b, want)
		}
	}
	c := mqtt.NewClient(mqtt.NewClientOptions().AddBroker("tcp://" + mqttAddr).SetClientID(prefix + "-device").
		SetCleanSession(true).SetAutoReconnect(false).SetConnectTimeout(5 * time.Second))
	if tok := c.Connect(); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
		t.Fatalf("connect to %s: %v", mqttAddr, tok.Error())
	}
	defer c.Disconnect(0)

	var missing []string
	deadline := time.Now().Add(60 * time.Second)
	for published := false; ; {
		exported := g.series(t)
		if !published && exported["sluice_mqtt_connected"] {
			// Subscribed by now or soon: publish until a dead letter shows.
			for _, payload := range []string{`{"ts":"` + ts + `","metrics":{"t":2}}`, "not json"} {
				if tok := c.Publish(prefix+"/devices/d1/readings", 1, false, payload); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
					t.Fatalf("publish: %v", tok.Error())
				}
			}
			published = exported["sluice_mqtt_dead_letters_total"]
		}
		missing = slices.DeleteFunc(slices.Clone(names), func(n string) bool { return exported[n] })
		if len(missing) == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(500 * time.Millisecond)
	}
	if len(missing) > 0 {
		t.Errorf("metrics the dashboards or rules use but the gateway does not export: %v\n%s", missing, g.log())
	}
}

// startComposeGateway runs the gateway and waits for its start-up line;
// it is killed when t ends.
func startComposeGateway(t *testing.T, ctx context.Context, bin string, args, env []string) *composeGateway {
	t.Helper()
	g := &composeGateway{}
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Dir, cmd.Env = t.TempDir(), env
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	addr := make(chan string, 1)
	exited := make(chan error, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			g.mu.Lock()
			g.logs.WriteString(sc.Text() + "\n")
			g.mu.Unlock()
			if m := readyLine.FindStringSubmatch(sc.Text()); m != nil {
				addr <- m[1]
			}
		}
		exited <- cmd.Wait()
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-exited
	})
	select {
	case a := <-addr:
		g.url = "http://" + a
	case err := <-exited:
		t.Fatalf("gateway exited before it was ready: %v\n%s", err, g.log())
	case <-time.After(2 * time.Minute):
		t.Fatalf("gateway not ready after 2 minutes:\n%s", g.log())
	}
	return g
}

// series returns the names of the series on the gateway's /metrics (a
// histogram's name_bucket, name_sum and name_count are names of their own).
func (g *composeGateway) series(t *testing.T) map[string]bool {
	t.Helper()
	resp, err := http.Get(g.url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	out := map[string]bool{}
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if i := strings.IndexAny(line, "{ "); i > 0 {
			out[line[:i]] = true
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}
