package httpingest_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/sluicehq/sluice/internal/buckets"
	"github.com/sluicehq/sluice/internal/decode"
	"github.com/sluicehq/sluice/internal/httpingest"
	"github.com/sluicehq/sluice/internal/lineproto"
	"github.com/sluicehq/sluice/internal/model"
	"github.com/sluicehq/sluice/internal/server"
	"github.com/sluicehq/sluice/internal/sink"
	"github.com/sluicehq/sluice/internal/store/pebblestore"
)

// newInfluxEnv serves the Influx write endpoints (and /v1/readings) over a
// real sink and Pebble store; gate, when not nil, holds commits back.
func newInfluxEnv(t *testing.T, scfg sink.Config, gate chan struct{}) (string, *pebblestore.Store) {
	url, st, _ := newInfluxEnvEntered(t, scfg, gate)
	return url, st
}

// newInfluxEnvEntered is newInfluxEnv also returning the channel told of
// each commit that reaches the gate.
func newInfluxEnvEntered(t *testing.T, scfg sink.Config, gate chan struct{}) (string, *pebblestore.Store, chan struct{}) {
	t.Helper()
	logger := slog.New(slog.DiscardHandler)
	st, err := pebblestore.Open(t.TempDir(), pebblestore.Options{}, logger)
	if err != nil {
		t.Fatal(err)
	}
	entered := make(chan struct{}, 1)
	sk := sink.New(scfg, buckets.DefaultConfig(), &gatedStore{Store: st, gate: gate, entered: &entered}, logger, nil)
	lim := decode.DefaultLimits()
	lim.MaxRows = 100
	h := httpingest.New(httpingest.Config{MaxBodyBytes: 4096, MaxDecompressedBytes: 16384, Limits: lim, Influx: lineproto.DefaultConfig()},
		sk, func() time.Time { return now }, logger, nil)
	srv := httptest.NewServer(server.Handler([]server.Token{{Token: token, Tenant: "acme"}}, server.Routes{
		PostReadings: h.Readings, InfluxV1: h.InfluxV1, InfluxV2: h.InfluxV2,
	}))
	t.Cleanup(func() {
		srv.Close()
		if gate != nil {
			close(gate)
		}
		_ = sk.Close(context.Background())
		_ = st.Close()
	})
	return srv.URL, st, entered
}

type influxResponse struct {
	status int
	header http.Header
	body   map[string]any
}

func postInflux(t *testing.T, req *http.Request) influxResponse {
	t.Helper()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	r := influxResponse{status: resp.StatusCode, header: resp.Header}
	if resp.StatusCode == http.StatusNoContent {
		if len(raw) != 0 {
			t.Fatalf("204 with a body %q", raw)
		}
		return r
	}
	if err := json.Unmarshal(raw, &r.body); err != nil {
		t.Fatalf("response %d is not JSON: %q", resp.StatusCode, raw)
	}
	return r
}

func influxReq(t *testing.T, url string, body []byte, auth func(*http.Request)) *http.Request {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "text/plain; charset=utf-8")
	if auth != nil {
		auth(req)
	}
	return req
}

func tokenAuth(r *http.Request) { r.Header.Set("Authorization", "Token "+token) }

// lp is two lines of one device and millisecond: one reading.
const lp = "weather,host=pump-17,site=north temp=21.5,ok=true 1795341600250000000\n" +
	"power,host=pump-17 rpm=1180i 1795341600250000000\n"

func TestInfluxAccepted(t *testing.T) {
	want := []model.Reading{{DeviceID: "pump-17", TS: 1795341600250, Metrics: []model.Metric{
		model.IntMetric("power.rpm", 1180), model.BoolMetric("weather.ok:site.north", true), {Name: "weather.temp:site.north", Value: 21.5}}}}
	tests := []struct {
		name string
		path string
		body []byte
		auth func(*http.Request)
		enc  string
	}{
		{name: "v2 token", path: "/api/v2/write?org=o&bucket=b&precision=ns", body: []byte(lp), auth: tokenAuth},
		{name: "v2 bearer", path: "/api/v2/write?bucket=b", body: []byte(lp), auth: func(r *http.Request) { r.Header.Set("Authorization", "Bearer "+token) }},
		{name: "v2 gzip, precision ms", path: "/api/v2/write?bucket=b&precision=ms", body: gz(t, []byte(strings.ReplaceAll(lp, "1795341600250000000", "1795341600250"))), auth: tokenAuth, enc: "gzip"},
		{name: "v1 u and p", path: "/write?db=telegraf&rp=autogen&u=user&p=" + token, body: []byte(lp)},
		{name: "v1 basic", path: "/write?db=telegraf", body: []byte(lp), auth: func(r *http.Request) { r.SetBasicAuth("telegraf", token) }},
		{name: "v1 token, precision u", path: "/write?db=x&precision=u", body: []byte(strings.ReplaceAll(lp, "1795341600250000000", "1795341600250000")), auth: tokenAuth},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			url, st := newInfluxEnv(t, sink.DefaultConfig(), nil)
			req := influxReq(t, url+tt.path, tt.body, tt.auth)
			if tt.enc != "" {
				req.Header.Set("Content-Encoding", tt.enc)
			}
			if r := postInflux(t, req); r.status != http.StatusNoContent {
				t.Fatalf("got %d %v, want 204", r.status, r.body)
			}
			if d := cmp.Diff(want, readAll(t, st, "pump-17")); d != "" {
				t.Fatalf("stored (-want +got):\n%s", d)
			}
		})
	}
}

func TestInfluxRejected(t *testing.T) {
	many := ""
	for i := range 101 {
		many += "m,host=d" + strings.Repeat("x", i%3) + " v=1 " + "17953416" + string(rune('0'+i/10%10)) + string(rune('0'+i%10)) + "000000000\n"
	}
	tests := []struct {
		name     string
		path     string
		body     []byte
		auth     func(*http.Request)
		status   int
		code     string // v2 code; "" for a v1 {"error"} body
		contains string
	}{
		{name: "v2 bad line names it", path: "/api/v2/write?bucket=b", body: []byte(lp + "m,host=h v=1\nbroken\n"), auth: tokenAuth,
			status: 400, code: "invalid", contains: "line 4"},
		{name: "v1 bad line names it", path: "/write?db=d", body: []byte("m,host=h v=1\nm v=1\n"), auth: tokenAuth,
			status: 400, contains: "line 2"},
		{name: "uint too big", path: "/api/v2/write?bucket=b", body: []byte("m,host=h v=18446744073709551615u\n"), auth: tokenAuth,
			status: 400, code: "invalid", contains: `line 1: field "v": unsigned integer`},
		{name: "v2 precision", path: "/api/v2/write?bucket=b&precision=h", body: []byte(lp), auth: tokenAuth,
			status: 400, code: "invalid", contains: "precision"},
		{name: "v2 no token", path: "/api/v2/write?bucket=b", body: []byte(lp), status: 401, code: "unauthorized", contains: "missing token"},
		{name: "v2 does not take p", path: "/api/v2/write?bucket=b&p=" + token, body: []byte(lp), status: 401, code: "unauthorized"},
		{name: "v1 wrong p", path: "/write?db=d&p=nope", body: []byte(lp), status: 401, contains: "invalid token"},
		{name: "too large", path: "/api/v2/write?bucket=b", body: bytes.Repeat([]byte("m,host=h v=1\n"), 400), auth: tokenAuth,
			status: 413, code: "request too large"},
		{name: "too many readings", path: "/write?db=d", body: []byte(many), auth: tokenAuth, status: 413, contains: "more than 100 rows"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			url, st := newInfluxEnv(t, sink.DefaultConfig(), nil)
			r := postInflux(t, influxReq(t, url+tt.path, tt.body, tt.auth))
			if r.status != tt.status {
				t.Fatalf("got %d %v, want %d", r.status, r.body, tt.status)
			}
			msg, _ := r.body["error"].(string)
			if strings.HasPrefix(tt.path, "/api/v2/") {
				msg, _ = r.body["message"].(string)
				if r.body["code"] != tt.code || r.header.Get("X-Platform-Error-Code") != tt.code {
					t.Errorf("code %v (header %q), want %q", r.body["code"], r.header.Get("X-Platform-Error-Code"), tt.code)
				}
			}
			if msg == "" || !strings.Contains(msg, tt.contains) {
				t.Errorf("message %q, want it to hold %q", msg, tt.contains)
			}
			if got := readAll(t, st, "pump-17"); len(got) != 0 {
				t.Errorf("stored %d readings of a refused request", len(got))
			}
		})
	}
}

// TestInfluxBusy fills the pipeline (a write held at the store takes the
// whole row budget) and checks that the next write is answered 503 with
// Retry-After, in the v2 error format, before its body is decoded.
func TestInfluxBusy(t *testing.T) {
	scfg := sink.DefaultConfig()
	scfg.BatchRows, scfg.QueueRows, scfg.AdmissionTimeout, scfg.Linger = 2, 2, 50*time.Millisecond, 0
	gate := make(chan struct{})
	url, _, entered := newInfluxEnvEntered(t, scfg, gate)
	held := make(chan influxResponse, 1)
	go func() {
		held <- postInflux(t, influxReq(t, url+"/api/v2/write?bucket=b", []byte("m,host=a v=1 1795341600250000000"), tokenAuth))
	}()
	select {
	case <-entered:
	case <-time.After(5 * time.Second):
		t.Fatal("the first write never reached the store")
	}
	r := postInflux(t, influxReq(t, url+"/api/v2/write?bucket=b", []byte("m,host=b v=1 1795341600250000000"), tokenAuth))
	if r.status != http.StatusServiceUnavailable || r.header.Get("Retry-After") == "" || r.body["code"] != "unavailable" {
		t.Errorf("got %d %v %v, want 503 with Retry-After and code unavailable", r.status, r.header, r.body)
	}
	gate <- struct{}{}
	if first := <-held; first.status != http.StatusNoContent {
		t.Fatalf("first write got %d %v", first.status, first.body)
	}
}
