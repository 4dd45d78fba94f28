package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"
)

// A tenant sending past its quota is answered 429 with Retry-After naming
// the quota, while another tenant is still answered 202, through the real
// binary with the quotas set from the environment. (Before quotas, every
// request was answered 202 until the pipeline was full, then 503 for
// everyone; the gateway never answered 429.)
func TestQuotaFloodingTenant(t *testing.T) {
	const flood, calm = "e2e-token-1", "e2e-token-2"
	g := startGateway(t, t.TempDir(),
		"SLUICE_AUTH_TOKENS="+flood+"=acme,"+calm+"=beta",
		// Every tenant: 10 readings a second from a burst of 10,000 (the
		// least allowed: limits.max_rows).
		"SLUICE_QUOTAS_DEFAULT_ROWS_PER_SECOND=10",
		"SLUICE_QUOTAS_DEFAULT_ROW_BURST=10000",
	)
	post := func(tok string, first, n int) (int, string, string) {
		var b bytes.Buffer
		base := time.Now().Add(-time.Hour).Truncate(time.Second)
		for i := first; i < first+n; i++ {
			b.WriteString(reading(fmt.Sprintf("dev-%d", i%10), base.Add(time.Duration(i)*time.Millisecond), i) + "\n")
		}
		req, err := http.NewRequest(http.MethodPost, g.url+"/v1/readings", &b)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer "+tok)
		req.Header.Set("Content-Type", "application/x-ndjson")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, resp.Header.Get("Retry-After"), string(body)
	}
	if st, _, body := post(flood, 0, 6000); st != http.StatusAccepted {
		t.Fatalf("acme's first request (within its burst): %d %s", st, body)
	}
	st, retry, body := post(flood, 6000, 6000)
	if st != http.StatusTooManyRequests {
		t.Fatalf("acme's second request, 2,000 readings over its burst: %d %s, want 429", st, body)
	}
	// 2,000 missing at 10 a second: about 200 s.
	if secs, err := strconv.Atoi(retry); err != nil || secs < 150 || secs > 201 {
		t.Errorf("Retry-After %q, want about 200 (seconds until the bucket holds 6,000)", retry)
	}
	var e struct{ Error string }
	if err := json.Unmarshal([]byte(body), &e); err != nil || !strings.Contains(e.Error, "tenant acme over its rows_per_second quota of 10") {
		t.Errorf("error body %s, want it to name acme's rows_per_second quota", body)
	}
	if st, _, body := post(calm, 0, 6000); st != http.StatusAccepted {
		t.Errorf("beta, within its own quota, while acme is over its: %d %s, want 202", st, body)
	}
	// What acme was refused was not stored; what it was acknowledged was.
	if n := g.metric(`sluice_http_rows_accepted_total{kind="readings"}`); n != 12000 {
		t.Errorf("%v readings acknowledged, want 12000 (6,000 each)", n)
	}
	if n := g.metric(`sluice_quota_refused_requests_total{quota="rows_per_second",tenant="acme"}`); n != 1 {
		t.Errorf("sluice_quota_refused_requests_total for acme = %v, want 1", n)
	}
	g.stop()
}
