package httpingest_test

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/buckets"
	"github.com/sluicehq/sluice/internal/decode"
	"github.com/sluicehq/sluice/internal/httpingest"
	"github.com/sluicehq/sluice/internal/model"
	"github.com/sluicehq/sluice/internal/reader"
	"github.com/sluicehq/sluice/internal/server"
	"github.com/sluicehq/sluice/internal/sink"
	"github.com/sluicehq/sluice/internal/store"
	"github.com/sluicehq/sluice/internal/store/pebblestore"
)

const token = "test-token-1"

var now = time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC)

// gatedStore lets a test hold commits back, to fill the pipeline.
type gatedStore struct {
	*pebblestore.Store
	gate chan struct{}
	// entered, when set, is told of each commit that reaches the gate.
	entered *chan struct{}
}

func (g *gatedStore) Commit(ctx context.Context, b *store.Batch) error {
	if g.entered != nil && *g.entered != nil {
		select {
		case *g.entered <- struct{}{}:
		default:
		}
	}
	if g.gate != nil {
		<-g.gate
	}
	return g.Store.Commit(ctx, b)
}

type env struct {
	url     string
	st      *pebblestore.Store
	sink    *sink.Sink
	entered chan struct{} // see gatedStore.entered
}

func newEnv(t *testing.T, scfg sink.Config, gate chan struct{}) *env {
	t.Helper()
	logger := slog.New(slog.DiscardHandler)
	st, err := pebblestore.Open(t.TempDir(), pebblestore.Options{}, logger)
	if err != nil {
		t.Fatal(err)
	}
	e := &env{st: st}
	sk := sink.New(scfg, buckets.DefaultConfig(), &gatedStore{Store: st, gate: gate, entered: &e.entered}, logger, nil)
	lim := decode.DefaultLimits()
	lim.MaxRows = 100
	h := httpingest.New(httpingest.Config{MaxBodyBytes: 4096, MaxDecompressedBytes: 16384, Limits: lim},
		sk, func() time.Time { return now }, logger, nil)
	srv := httptest.NewServer(server.Handler([]server.Token{{Token: token, Tenant: "acme"}}, server.Routes{
		PostReadings: h.Readings, PostAudit: h.Audit,
	}))
	t.Cleanup(func() {
		srv.Close()
		if gate != nil {
			close(gate)
		}
		_ = sk.Close(context.Background())
		_ = st.Close()
	})
	e.url, e.sink = srv.URL, sk
	return e
}

type response struct {
	status int
	header http.Header
	body   map[string]any
}

func post(t *testing.T, url, path string, body []byte, headers map[string]string) response {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url+path, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	for k, v := range headers {
		if v == "" {
			req.Header.Del(k)
			continue
		}
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	r := response{status: resp.StatusCode, header: resp.Header}
	if err := json.Unmarshal(raw, &r.body); err != nil {
		t.Fatalf("response %d is not JSON: %q", resp.StatusCode, raw)
	}
	return r
}

func gz(t *testing.T, b []byte) []byte {
	var buf bytes.Buffer
	w := gzip.NewWriter(&buf)
	if _, err := w.Write(b); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func readAll(t *testing.T, st *pebblestore.Store, device string) []model.Reading {
	t.Helper()
	rs, _, err := reader.Readings(context.Background(), st, reader.Query{Tenant: "acme", Series: device,
		From: now.Add(-48 * time.Hour).UnixMilli(), To: now.Add(time.Hour).UnixMilli(), Limit: reader.MaxLimit})
	if err != nil {
		t.Fatal(err)
	}
	return rs
}

const one = `{"device_id":"pump-17","ts":"2026-11-22T10:00:00.250Z","metrics":{"temp_c":21.5,"rpm":1180}}`

func TestAccepted(t *testing.T) {
	tests := []struct {
		name    string
		path    string
		body    []byte
		headers map[string]string
		want    float64
	}{
		{name: "one object", path: "/v1/readings", body: []byte(one), want: 1},
		{name: "curl default content type", path: "/v1/readings", body: []byte(one), headers: map[string]string{"Content-Type": "application/x-www-form-urlencoded"}, want: 1},
		{name: "array", path: "/v1/readings", body: []byte("[" + one + "," + strings.Replace(one, "10:00:00", "10:00:01", 1) + "]"), want: 2},
		{name: "ndjson", path: "/v1/readings", body: []byte(one + "\n" + strings.Replace(one, "10:00:00", "10:00:02", 1) + "\n"), headers: map[string]string{"Content-Type": "application/x-ndjson"}, want: 2},
		{name: "gzip", path: "/v1/readings", body: gz(t, []byte(one)), headers: map[string]string{"Content-Encoding": "gzip"}, want: 1},
		{name: "audit", path: "/v1/audit", body: []byte(`{"event_id":"01JABC","stream":"billing-api","ts":"2026-11-22T10:00:00Z","actor":"user:42","action":"invoice.refund","resource":"invoice:981","outcome":"success","attributes":{"amount":12}}`), want: 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t, sink.DefaultConfig(), nil)
			r := post(t, e.url, tt.path, tt.body, tt.headers)
			if r.status != http.StatusAccepted || r.body["accepted"] != tt.want {
				t.Fatalf("got %d %v, want 202 accepted %v", r.status, r.body, tt.want)
			}
			if tt.path == "/v1/readings" {
				if got := len(readAll(t, e.st, "pump-17")); got != int(tt.want) {
					t.Errorf("stored %d readings, want %v", got, tt.want)
				}
			}
		})
	}
}

func TestRejected(t *testing.T) {
	big := bytes.Repeat([]byte(" "), 5000)
	bomb := gz(t, append([]byte(one), bytes.Repeat([]byte(" "), 20000)...))
	many := strings.Repeat(one+"\n", 101)
	tests := []struct {
		name      string
		path      string
		body      []byte
		headers   map[string]string
		status    int
		wantError string
		row       *float64
		field     string
	}{
		{name: "bad field names row and field", path: "/v1/readings",
			body:   []byte("[" + one + `,{"device_id":"pump-17","ts":"yesterday","metrics":{"x":1}}]`),
			status: 400, wantError: "nothing stored", row: ptr(1), field: "ts"},
		{name: "ndjson line", path: "/v1/readings", headers: map[string]string{"Content-Type": "application/x-ndjson"},
			body:   []byte(one + "\n\n" + `{"device_id":"pump/17","ts":1,"metrics":{"x":1}}` + "\n"),
			status: 400, wantError: "line 3", row: ptr(1), field: "device_id"},
		{name: "audit without event_id", path: "/v1/audit", body: []byte(`{"stream":"s","ts":"2026-11-22T10:00:00Z","action":"a"}`),
			status: 400, wantError: "event_id", row: ptr(0), field: "event_id"},
		{name: "future timestamp", path: "/v1/readings", body: []byte(`{"device_id":"d","ts":"2026-11-23T10:00:00Z","metrics":{"x":1}}`),
			status: 400, wantError: "future", row: ptr(0), field: "ts"},
		{name: "not json", path: "/v1/readings", body: []byte("hello"), status: 400, wantError: "nothing stored"},
		{name: "body over limit", path: "/v1/readings", body: big, status: 413, wantError: "over the limit of 4096 bytes"},
		{name: "decompressed over limit", path: "/v1/readings", body: bomb, headers: map[string]string{"Content-Encoding": "gzip"}, status: 413, wantError: "decompressed body"},
		{name: "too many rows", path: "/v1/readings", body: gz(t, []byte(many)), headers: map[string]string{"Content-Encoding": "gzip", "Content-Type": "application/x-ndjson"}, status: 413, wantError: "more than 100 rows"},
		{name: "bad gzip", path: "/v1/readings", body: []byte(one), headers: map[string]string{"Content-Encoding": "gzip"}, status: 400, wantError: "not valid gzip"},
		{name: "unknown encoding", path: "/v1/readings", body: []byte(one), headers: map[string]string{"Content-Encoding": "br"}, status: 415, wantError: "Content-Encoding"},
		{name: "unknown content type", path: "/v1/readings", body: []byte(one), headers: map[string]string{"Content-Type": "application/xml"}, status: 415, wantError: "application/xml"},
		{name: "no token", path: "/v1/readings", body: []byte(one), headers: map[string]string{"Authorization": ""}, status: 401, wantError: "bearer token"},
		{name: "wrong token", path: "/v1/readings", body: []byte(one), headers: map[string]string{"Authorization": "Bearer nope-nope-nope"}, status: 401, wantError: "invalid bearer token"},
		{name: "basic auth", path: "/v1/readings", body: []byte(one), headers: map[string]string{"Authorization": "Basic dTpw"}, status: 401, wantError: "bearer token"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t, sink.DefaultConfig(), nil)
			r := post(t, e.url, tt.path, tt.body, tt.headers)
			if r.status != tt.status {
				t.Fatalf("status %d, want %d (%v)", r.status, tt.status, r.body)
			}
			msg, _ := r.body["error"].(string)
			if !strings.Contains(msg, tt.wantError) {
				t.Errorf("error %q does not contain %q", msg, tt.wantError)
			}
			if tt.row != nil && r.body["row"] != *tt.row {
				t.Errorf("row = %v, want %v", r.body["row"], *tt.row)
			}
			if tt.field != "" && r.body["field"] != tt.field {
				t.Errorf("field = %v, want %q", r.body["field"], tt.field)
			}
			if tt.status == 401 && r.header.Get("WWW-Authenticate") == "" {
				t.Error("401 without WWW-Authenticate")
			}
			// All-or-nothing: the valid first row of a bad request is not stored.
			if got := readAll(t, e.st, "pump-17"); len(got) != 0 {
				t.Errorf("a refused request stored %d readings", len(got))
			}
		})
	}
}

func ptr(f float64) *float64 { return &f }

func TestBusyAnswers503WithRetryAfter(t *testing.T) {
	gate := make(chan struct{})
	cfg := sink.DefaultConfig()
	cfg.BatchRows, cfg.QueueRows, cfg.AdmissionTimeout, cfg.Linger = 2, 2, 50*time.Millisecond, 0
	e := newEnv(t, cfg, gate)
	// Each request has 2 rows and the budget is 2 rows: whichever request is
	// admitted first waits at the gate, and the other must be refused.
	answers := make(chan response, 2)
	for _, dev := range []string{"pump-17", "pump-18"} {
		go func() {
			answers <- post(t, e.url, "/v1/readings", []byte(strings.Replace(one, "pump-17", dev, 1)), nil)
		}()
	}
	busy := <-answers
	if busy.status != http.StatusServiceUnavailable || busy.header.Get("Retry-After") == "" {
		t.Fatalf("got %d (Retry-After %q) %v, want 503 with Retry-After", busy.status, busy.header.Get("Retry-After"), busy.body)
	}
	gate <- struct{}{}
	if got := <-answers; got.status != http.StatusAccepted {
		t.Fatalf("admitted request answered %d", got.status)
	}
	if n := len(readAll(t, e.st, "pump-17")) + len(readAll(t, e.st, "pump-18")); n != 1 {
		t.Errorf("stored %d readings, want only the admitted request's 1", n)
	}
}

func TestShutdownAnswers503(t *testing.T) {
	e := newEnv(t, sink.DefaultConfig(), nil)
	if err := e.sink.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	r := post(t, e.url, "/v1/readings", []byte(one), nil)
	if r.status != http.StatusServiceUnavailable || r.header.Get("Retry-After") == "" {
		t.Fatalf("got %d %v, want 503 with Retry-After", r.status, r.body)
	}
}

func TestRetriesAreIdempotent(t *testing.T) {
	e := newEnv(t, sink.DefaultConfig(), nil)
	ev := []byte(`{"event_id":"01JX","stream":"billing-api","ts":"2026-11-22T10:00:00Z","action":"invoice.refund"}`)
	for range 3 {
		if r := post(t, e.url, "/v1/readings", []byte(one), nil); r.status != 202 {
			t.Fatalf("readings: %d", r.status)
		}
		if r := post(t, e.url, "/v1/audit", ev, nil); r.status != 202 {
			t.Fatalf("audit: %d", r.status)
		}
	}
	if got := readAll(t, e.st, "pump-17"); len(got) != 1 || len(got[0].Metrics) != 2 {
		t.Errorf("readings after 3 identical posts: %+v", got)
	}
	es, _, err := reader.Audit(context.Background(), e.st, reader.Query{Tenant: "acme", Series: "billing-api",
		From: now.Add(-24 * time.Hour).UnixMilli(), To: now.UnixMilli(), Limit: 100})
	if err != nil {
		t.Fatal(err)
	}
	if len(es) != 1 {
		t.Errorf("audit events after 3 identical posts: %d", len(es))
	}
}
