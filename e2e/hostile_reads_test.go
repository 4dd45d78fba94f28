package e2e

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/testenv"
)

// send makes one request as the test tenant, giving up after limit.
func (g *gateway) send(ctx context.Context, method, path string, limit time.Duration) (int, string, error) {
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, g.url+path, nil)
	if err != nil {
		return 0, "", err
	}
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), err
}

// cpuTime returns the CPU time the process has used, from /proc.
func cpuTime(t *testing.T, pid int) time.Duration {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		testenv.Missing(t, fmt.Sprintf("no /proc to read the gateway's CPU time from: %v", err))
	}
	// Fields after the command name, which ends with ')': state is field 3,
	// utime and stime are 14 and 15.
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+2:]))
	ut, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(ut+st) * 10 * time.Millisecond // USER_HZ is 100 on Linux
}

// A tenant's hostile reads answer 400 promptly instead of hanging: a cursor
// edited to 2^31 days ahead, from/to at the int64 limits, a rebuild over an
// overflowing range, another tenant's or an edited cursor. A long read
// whose client leaves stops burning CPU, and SIGTERM then exits well within
// http.shutdown_timeout.
func TestHostileReads(t *testing.T) {
	g := startGateway(t, t.TempDir(),
		"SLUICE_HTTP_SHUTDOWN_TIMEOUT=25s",
		"SLUICE_READ_MAX_DAYS=3652425", // every day of years 0000..9999, for the long read below
		"SLUICE_READ_TIMEOUT=50s",
	)
	now := time.Now().UTC()
	var body strings.Builder
	for i := range 5 {
		fmt.Fprintf(&body, `{"device_id":"d","ts":%d,"metrics":{"v":%d}}`+"\n", now.Add(-time.Minute).UnixMilli()+int64(i), i)
	}
	if status, resp := g.post("/v1/readings", "application/x-ndjson", []byte(body.String())); status != 202 {
		t.Fatalf("ingest: %d %s", status, resp)
	}
	status, resp, err := g.send(t.Context(), "GET", "/v1/readings?device=d&limit=2", 10*time.Second)
	var page struct {
		NextCursor string `json:"next_cursor"`
	}
	if err != nil || status != 200 || json.Unmarshal([]byte(resp), &page) != nil || page.NextCursor == "" {
		t.Fatalf("first page: %d %s %v", status, resp, err)
	}
	raw, _ := base64.RawURLEncoding.DecodeString(page.NextCursor)
	raw[len(raw)/2] ^= 0x01
	edited := base64.RawURLEncoding.EncodeToString(raw)
	far := int64(math.MaxInt32+1) * 86_400_000
	b64 := base64.RawURLEncoding.EncodeToString
	hostile := []struct{ method, path, want string }{
		{"GET", "/v1/readings?device=d&cursor=" + b64(fmt.Appendf(nil, `{"v":1,"k":"readings","s":"d","t":%d,"e":true}`, far)), "parameter cursor: "},
		{"GET", "/v1/audit?stream=s&cursor=" + b64(fmt.Appendf(nil, `{"v":1,"k":"audit","s":"s","t":%d,"p":"e"}`, far)), "parameter cursor: "},
		{"GET", "/v1/deadletters?cursor=" + b64(fmt.Appendf(nil, "%d.x", far)), "parameter cursor: "},
		{"GET", "/v1/readings?device=d&cursor=" + edited, "parameter cursor: "},
		{"GET", "/v1/audit?stream=d&cursor=" + page.NextCursor, "parameter cursor: "},
		{"GET", "/v1/readings?device=d&from=-9223372036854775808&to=9223372036854775807", "parameter to: "},
		{"GET", "/v1/audit?stream=s&from=-9223372036854775807&to=-9223372036854775806", "parameter to: "},
		{"GET", "/v1/deadletters?from=-9223372036854775808&to=9223372036854775807", "parameter to: "},
		{"GET", "/v1/deadletters?from=-9223372036854775808&to=0", "parameter from: "},
		{"GET", "/v1/rollups?device=d&metric=v&from=-9223372036854775808&to=9223372036854775807", "parameter to: "},
		{"GET", "/v1/top?metric=v&from=-9223372036854775808&to=0", "parameter from: "},
		{"GET", "/v1/partitions?device=d&day=10000-01-01", "parameter day: "},
		{"POST", "/v1/rollups/rebuild?from=-9223372036854775808&to=9223372036854775807", "parameter to: "},
		{"POST", "/v1/rollups/rebuild?from=-9223372036854775807&to=9223372036854775807", "parameter to: "},
	}
	for _, h := range hostile {
		start := time.Now()
		status, resp, err := g.send(t.Context(), h.method, h.path, 5*time.Second)
		if err != nil {
			t.Errorf("%s %.90s: no answer after %s: %v", h.method, h.path, time.Since(start).Round(time.Millisecond), err)
			continue
		}
		var e struct{ Error string }
		if status != 400 || json.Unmarshal([]byte(resp), &e) != nil || !strings.HasPrefix(e.Error, h.want) {
			t.Errorf("%s %.90s: got %d %.200s, want 400 %q", h.method, h.path, status, resp, h.want)
		}
	}

	// A read over every day of years 0000..9999 takes far longer than the
	// client waits; once the client is gone the gateway goes idle.
	span := url.Values{"from": {"0000-01-01T00:00:00Z"}, "to": {"9999-12-31T00:00:00Z"}}
	if _, _, err := g.send(t.Context(), "GET", "/v1/deadletters?"+span.Encode(), time.Second); err == nil {
		t.Fatal("the long read answered within 1s: the cancellation below would not be exercised")
	}
	time.Sleep(500 * time.Millisecond) // allowance for the read to notice (100 ms) and the scheduler
	pid := g.cmd.Process.Pid
	before := cpuTime(t, pid)
	time.Sleep(time.Second)
	if used := cpuTime(t, pid) - before; used > 500*time.Millisecond {
		t.Errorf("the gateway used %s of CPU in the second after its clients left, want it idle", used)
	}
	start := time.Now()
	if err := g.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-g.exited:
		if took := time.Since(start); took > 10*time.Second {
			t.Errorf("SIGTERM took %s, want well within http.shutdown_timeout (25s)", took)
		}
	case <-time.After(40 * time.Second):
		t.Fatalf("gateway did not stop within 40s:\n%s", g.logs())
	}
}
