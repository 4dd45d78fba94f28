package e2e

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/testenv"
)

// probe GETs path and returns the status and the body's status or error.
func (g *gateway) probe(path string) (int, string) {
	g.t.Helper()
	c := &http.Client{Timeout: 5 * time.Second}
	resp, err := c.Get(g.url + path)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	var body struct{ Status, Error string }
	b, _ := io.ReadAll(resp.Body)
	if err := json.Unmarshal(b, &body); err != nil {
		g.t.Fatalf("GET %s: %d %q: %v", path, resp.StatusCode, b, err)
	}
	return resp.StatusCode, body.Status + body.Error
}

// waitReady waits (30 s at most) until /readyz answers status with a
// reason containing want.
func (g *gateway) waitReady(status int, want string) {
	g.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		got, reason := g.probe("/readyz")
		if got == status && strings.Contains(reason, want) {
			return
		}
		if time.Now().After(deadline) {
			g.t.Fatalf("/readyz = %d %q, want %d %q, for 30s\n%s", got, reason, status, want, g.logs())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (g *gateway) wantHealthy() {
	g.t.Helper()
	if status, body := g.probe("/healthz"); status != 200 || body != "ok" {
		g.t.Fatalf("/healthz = %d %q, want 200 ok", status, body)
	}
}

// TestReadyzDrain: SIGTERM makes /readyz 503 at once while /healthz stays
// 200 and writes are still taken for http.drain_delay; then the listener
// closes, the pipeline drains and the process exits.
func TestReadyzDrain(t *testing.T) {
	g := startGateway(t, t.TempDir(), "SLUICE_HTTP_DRAIN_DELAY=3s")
	g.waitReady(200, "ready")
	g.wantHealthy()
	if err := g.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	g.waitReady(503, "shutting down")
	g.wantHealthy()
	body := reading("pump-1", day(1).Add(time.Hour), 1) + "\n" // in the past at any time of day
	if status, resp := g.post("/v1/readings", "application/x-ndjson", []byte(body)); status != 202 {
		t.Fatalf("POST during the drain: %d %s", status, resp)
	}
	select {
	case err := <-g.exited:
		if err != nil {
			t.Fatalf("gateway exit: %v\n%s", err, g.logs())
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("gateway did not stop within 30s:\n%s", g.logs())
	}
	logs := g.logs()
	last := -1
	for _, step := range []string{"/readyz answers 503; requests are still served", "drain delay over", "closing the listener",
		"http server stopped", "write pipeline drained", "store closed"} {
		i := strings.Index(logs, step)
		if i < 0 || i < last {
			t.Fatalf("shutdown step %q missing or out of order:\n%s", step, logs)
		}
		last = i
	}
	if _, err := net.DialTimeout("tcp", strings.TrimPrefix(g.url, "http://"), time.Second); err == nil {
		t.Fatal("listener still open after exit")
	}
}

// TestReadyzStore: /readyz follows whether the embedded store takes a
// write (its data directory made unwritable for the probe, then writable
// again); /healthz stays 200.
func TestReadyzStore(t *testing.T) {
	data := t.TempDir()
	g := startGateway(t, data)
	g.waitReady(200, "ready")
	blocker := filepath.Join(data, ".sluice-probe")
	if err := os.MkdirAll(filepath.Join(blocker, "x"), 0o700); err != nil {
		t.Fatal(err)
	}
	g.waitReady(503, "store: data directory not writable")
	g.wantHealthy()
	if err := os.RemoveAll(blocker); err != nil {
		t.Fatal(err)
	}
	g.waitReady(200, "ready")
	g.stop()
}

// mosquitto runs a private Mosquitto on addr (not the shared one other
// tests use) until the returned function kills it.
func mosquitto(t *testing.T, addr string) (kill func()) {
	t.Helper()
	path, err := exec.LookPath("mosquitto")
	if err != nil {
		testenv.Missing(t, "mosquitto is not installed (apt-get install mosquitto)")
	}
	_, port, _ := net.SplitHostPort(addr)
	cmd := exec.Command(path, "-p", port)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	kill = func() {
		_ = cmd.Process.Kill()
		<-done
	}
	t.Cleanup(kill)
	deadline := time.Now().Add(10 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			_ = c.Close()
			return kill
		}
		if time.Now().After(deadline) {
			t.Fatalf("mosquitto -p %s not listening after 10s: %v", port, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestReadyzMQTTBroker: with an MQTT subscription, /readyz is 503 while
// its broker (a real Mosquitto, killed and started again) is away.
func TestReadyzMQTTBroker(t *testing.T) {
	addr := testenv.FreeAddr(t)
	kill := mosquitto(t, addr)
	g := startGateway(t, t.TempDir(), "SLUICE_MQTT_ENABLED=true", "SLUICE_MQTT_BROKERS=tcp://"+addr,
		fmt.Sprintf("SLUICE_MQTT_CLIENT_ID=sluice-e2e-ready-%d", os.Getpid()), "SLUICE_MQTT_MAX_RECONNECT_INTERVAL=1s",
		"SLUICE_MQTT_CONNECT_RETRY_INTERVAL=1s")
	g.waitReady(200, "ready")
	kill()
	g.waitReady(503, "mqtt: not connected to the broker")
	g.wantHealthy()
	mosquitto(t, addr)
	g.waitReady(200, "ready")
	g.stop()
}

// TestReadyzCassandra: /readyz follows whether the gateway's Cassandra
// answers: the real Cassandra, behind a TCP proxy that is cut and restored
// (the shared server itself is never stopped).
func TestReadyzCassandra(t *testing.T) {
	env := cassandraEnv(t)
	if _, errOut, err := runBin(t, env, "ingest", "migrate"); err != nil {
		t.Fatalf("ingest migrate: %v\n%s", err, errOut)
	}
	p := testenv.StartProxy(t, cassandraAddr())
	g := startGateway(t, t.TempDir(), append(env, "SLUICE_STORE_CASSANDRA_HOSTS="+p.Addr(), "SLUICE_STORE_CASSANDRA_TIMEOUT=2s")...)
	g.waitReady(200, "ready")
	p.Cut()
	g.waitReady(503, "store: cassandra does not answer")
	g.wantHealthy()
	p.Restore()
	g.waitReady(200, "ready")
	g.stop()
}
