package e2e

import (
	"fmt"
	"net"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestShutdownCancelsLongRequests: a request still running when
// http.shutdown_timeout ends (here a POST whose client stalls in the middle
// of its body, under a long http.read_timeout) is cancelled and returns
// before the store closes, and the whole shutdown keeps to one
// http.shutdown_timeout (plus the short floors of docs/operations.md).
func TestShutdownCancelsLongRequests(t *testing.T) {
	g := startGateway(t, t.TempDir(), "SLUICE_HTTP_SHUTDOWN_TIMEOUT=2s", "SLUICE_HTTP_READ_TIMEOUT=120s", "SLUICE_LOG_LEVEL=debug")
	g.waitReady(200, "ready")
	conn, err := net.Dial("tcp", strings.TrimPrefix(g.url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	body := reading("pump-1", day(1).Add(time.Hour), 1) + "\n" // in the past at any time of day
	// Announce more body than is sent, and stall.
	if _, err := fmt.Fprintf(conn, "POST /v1/readings HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\nContent-Type: application/x-ndjson\r\nContent-Length: %d\r\n\r\n%s",
		token, len(body)+1000, body); err != nil {
		t.Fatal(err)
	}
	time.Sleep(200 * time.Millisecond) // the request reaches its handler
	start := time.Now()
	if err := g.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-g.exited:
		if err != nil {
			t.Fatalf("gateway exit: %v\n%s", err, g.logs())
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("gateway did not stop within 30s:\n%s", g.logs())
	}
	// 2s of http.shutdown_timeout, at most 2s of floors, a generous margin.
	if took := time.Since(start); took > 10*time.Second {
		t.Errorf("shutdown took %s, want about http.shutdown_timeout (2s)", took)
	}
	logs := g.logs()
	last := -1
	for _, step := range []string{"closing the listener", "http.shutdown_timeout reached with requests in progress: cancelling them",
		`route="POST /v1/readings"`, "cancelled requests returned", "http server stopped", "write pipeline drained", "store closed"} {
		i := strings.Index(logs, step)
		if i < 0 || i < last {
			t.Fatalf("shutdown step %q missing or out of order:\n%s", step, logs)
		}
		last = i
	}
}
