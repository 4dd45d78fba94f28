package quota_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice/internal/decode"
	"github.com/sluicehq/sluice/internal/httpingest"
	"github.com/sluicehq/sluice/internal/quota"
	"github.com/sluicehq/sluice/internal/server"
	"github.com/sluicehq/sluice/internal/sink"
)

// pipeline stands for the sink: it counts what reaches it and answers nil
// (durable), after waiting on hold when it is set.
type pipeline struct {
	mu      sync.Mutex
	rows    map[string]int
	hold    chan struct{}
	entered chan struct{}
}

// Reserve reserves nothing: a nil reservation is one Release ignores.
func (p *pipeline) Reserve(context.Context, int) (*sink.Reservation, error) { return nil, nil }

func (p *pipeline) WriteReserved(ctx context.Context, _ *sink.Reservation, r *sink.Request) error {
	if p.hold != nil {
		p.entered <- struct{}{}
		<-p.hold
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.rows[r.Tenant] += int(quota.Rows(r))
	return nil
}

func (p *pipeline) got(tenant string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.rows[tenant]
}

// gateway is the HTTP surface as serve() assembles it: authentication,
// the quota middleware, the ingest handler and the quota writer.
type gateway struct {
	h    http.Handler
	pipe *pipeline
	now  time.Time
	mu   sync.Mutex
}

func newGateway(t *testing.T, cfg quota.Config) *gateway {
	t.Helper()
	g := &gateway{pipe: &pipeline{rows: map[string]int{}}, now: time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC)}
	q := quota.New(cfg, []string{"flood", "calm"}, g.clock, prometheus.NewRegistry())
	const maxBody = 1 << 20
	in := httpingest.New(httpingest.Config{MaxBodyBytes: maxBody, MaxDecompressedBytes: maxBody, Limits: decode.DefaultLimits()},
		q.Writer(g.pipe), func() time.Time { return time.Now() }, slog.New(slog.DiscardHandler), prometheus.NewRegistry())
	g.h = server.Handler([]server.Token{{Token: "flood-token", Tenant: "flood"}, {Token: "calm-token", Tenant: "calm"}}, server.Routes{
		PostReadings: q.Middleware(maxBody, in.Readings), PostAudit: q.Middleware(maxBody, in.Audit),
	})
	return g
}

func (g *gateway) clock() time.Time {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.now
}

func (g *gateway) advance(d time.Duration) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.now = g.now.Add(d)
}

// body returns an NDJSON body of n readings.
func body(n int) []byte {
	var b bytes.Buffer
	ts := time.Now().Add(-time.Hour).UnixMilli()
	for i := range n {
		fmt.Fprintf(&b, `{"device_id":"d-%d","ts":%d,"metrics":{"v":%d}}`+"\n", i%7, ts+int64(i), i)
	}
	return b.Bytes()
}

// readLog is a body that records whether it was read.
type readLog struct {
	r    io.Reader
	read bool
}

func (b *readLog) Read(p []byte) (int, error) {
	b.read = true
	return b.r.Read(p)
}

type answer struct {
	status     int
	retryAfter string
	err        string
	bodyRead   bool
}

// post sends n readings as tenant; chunked leaves the Content-Length out.
func (g *gateway) post(tenant string, n int, chunked bool) answer {
	data := body(n)
	b := &readLog{r: bytes.NewReader(data)}
	req := httptest.NewRequest(http.MethodPost, "/v1/readings", b)
	req.ContentLength = int64(len(data))
	if chunked {
		req.ContentLength = -1
	}
	req.Header.Set("Authorization", "Bearer "+tenant+"-token")
	req.Header.Set("Content-Type", "application/x-ndjson")
	rec := httptest.NewRecorder()
	g.h.ServeHTTP(rec, req)
	var e struct {
		Error string `json:"error"`
	}
	_ = json.Unmarshal(rec.Body.Bytes(), &e)
	return answer{status: rec.Code, retryAfter: rec.Header().Get("Retry-After"), err: e.Error, bodyRead: b.read}
}

// One tenant floods past its quotas: it is answered 429 with Retry-After,
// naming the quota, and nothing of its refused requests reaches the
// pipeline; the other tenant is answered 202 all along. (Before quotas,
// every request was 202 until the pipeline was full, then 503 for all.)
func TestFloodingTenantGets429(t *testing.T) {
	body100 := int64(len(body(100)))
	tests := []struct {
		name    string
		cfg     quota.Config
		chunked bool
		// The flooding tenant's answers to three posts of 100 readings in a row.
		want        []int
		wantQuota   string
		wantRetry   string
		wantRead    bool // the refused body was read (the quota is known only after)
		wantInPipe  int  // flood rows that reached the pipeline
		thenAdvance time.Duration
	}{
		{
			name: "rows", cfg: quota.Config{Tenants: []quota.Override{{Tenant: "flood", RowsPerSecond: ptr(100), RowBurst: ptr(200)}}},
			want: []int{202, 202, 429}, wantQuota: "rows_per_second quota of 100", wantRetry: "1", wantRead: true, wantInPipe: 200,
			thenAdvance: time.Second,
		},
		{
			name: "rows refill slowly", cfg: quota.Config{Tenants: []quota.Override{{Tenant: "flood", RowsPerSecond: ptr(20), RowBurst: ptr(100)}}},
			want: []int{202, 429, 429}, wantQuota: "rows_per_second quota of 20", wantRetry: "5", wantRead: true, wantInPipe: 100,
			thenAdvance: 5 * time.Second,
		},
		{
			name: "bytes by Content-Length, before reading", cfg: quota.Config{Tenants: []quota.Override{{Tenant: "flood", BytesPerSecond: ptr(body100), ByteBurst: ptr(2 * body100)}}},
			want: []int{202, 202, 429}, wantQuota: fmt.Sprintf("bytes_per_second quota of %d", body100), wantRetry: "1", wantInPipe: 200,
			thenAdvance: time.Second,
		},
		{
			name: "bytes of a chunked body, after reading", chunked: true,
			cfg:  quota.Config{Tenants: []quota.Override{{Tenant: "flood", BytesPerSecond: ptr(body100), ByteBurst: ptr(2 * body100)}}},
			want: []int{202, 202, 429}, wantQuota: fmt.Sprintf("bytes_per_second quota of %d", body100), wantRetry: "1", wantRead: true, wantInPipe: 200,
			thenAdvance: time.Second,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := newGateway(t, tt.cfg)
			var last answer
			for i, want := range tt.want {
				last = g.post("flood", 100, tt.chunked)
				if last.status != want {
					t.Fatalf("flood post %d: %d %q, want %d", i, last.status, last.err, want)
				}
				if calm := g.post("calm", 100, tt.chunked); calm.status != http.StatusAccepted {
					t.Fatalf("calm post %d: %d %q, want 202", i, calm.status, calm.err)
				}
			}
			if last.retryAfter != tt.wantRetry {
				t.Errorf("Retry-After %q, want %q", last.retryAfter, tt.wantRetry)
			}
			if !strings.Contains(last.err, "tenant flood over its "+tt.wantQuota) || !strings.HasPrefix(last.err, "nothing stored: ") {
				t.Errorf("error %q, want it to name the %s", last.err, tt.wantQuota)
			}
			if last.bodyRead != tt.wantRead {
				t.Errorf("refused body read: %v, want %v", last.bodyRead, tt.wantRead)
			}
			if got := g.pipe.got("flood"); got != tt.wantInPipe {
				t.Errorf("%d flood rows reached the pipeline, want %d", got, tt.wantInPipe)
			}
			if got := g.pipe.got("calm"); got != 100*len(tt.want) {
				t.Errorf("%d calm rows reached the pipeline, want %d", got, 100*len(tt.want))
			}
			// After Retry-After, the same request goes through.
			g.advance(tt.thenAdvance)
			if a := g.post("flood", 100, tt.chunked); a.status != http.StatusAccepted {
				t.Errorf("after Retry-After: %d %q, want 202", a.status, a.err)
			}
		})
	}
}

// Over its concurrency bound a tenant is answered 429 at once, without its
// body being read; other tenants are not affected.
func TestConcurrencyQuota(t *testing.T) {
	g := newGateway(t, quota.Config{Default: quota.Limits{MaxConcurrentRequests: 1}})
	g.pipe.hold = make(chan struct{})
	g.pipe.entered = make(chan struct{})
	first := make(chan answer, 1)
	go func() { first <- g.post("flood", 10, false) }()
	<-g.pipe.entered // the first request is in the pipeline
	a := g.post("flood", 10, false)
	if a.status != http.StatusTooManyRequests || a.retryAfter != "1" || a.bodyRead ||
		!strings.Contains(a.err, "tenant flood over its max_concurrent_requests quota of 1") {
		t.Errorf("second request: %+v, want 429, Retry-After 1, body unread, naming max_concurrent_requests", a)
	}
	calm := make(chan answer, 1)
	go func() { calm <- g.post("calm", 10, false) }()
	<-g.pipe.entered
	close(g.pipe.hold)
	if a := <-calm; a.status != http.StatusAccepted {
		t.Errorf("other tenant: %d %q, want 202", a.status, a.err)
	}
	if a := <-first; a.status != http.StatusAccepted {
		t.Errorf("first request: %d %q, want 202", a.status, a.err)
	}
	g.pipe.hold = nil
	if a := g.post("flood", 10, false); a.status != http.StatusAccepted {
		t.Errorf("after the first ended: %d %q, want 202", a.status, a.err)
	}
}

// A body declared over http.max_body_bytes is the handler's to refuse (413),
// whatever the tenant's byte quota.
func TestOversizedBodyIs413(t *testing.T) {
	g := newGateway(t, quota.Config{Default: quota.Limits{BytesPerSecond: 1 << 20}})
	req := httptest.NewRequest(http.MethodPost, "/v1/readings", strings.NewReader("{}"))
	req.ContentLength = 2 << 20
	req.Header.Set("Authorization", "Bearer flood-token")
	rec := httptest.NewRecorder()
	g.h.ServeHTTP(rec, req)
	if rec.Code != http.StatusRequestEntityTooLarge {
		t.Errorf("status %d, want 413", rec.Code)
	}
}

func ptr(n int64) *int64 { return &n }
