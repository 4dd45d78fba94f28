package httpingest_test

import (
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/sluicehq/sluice/internal/buckets"
	"github.com/sluicehq/sluice/internal/decode"
	"github.com/sluicehq/sluice/internal/httpingest"
	"github.com/sluicehq/sluice/internal/server"
	"github.com/sluicehq/sluice/internal/sink"
	"github.com/sluicehq/sluice/internal/store/pebblestore"
)

// TestBodyBudgetBusy: while one gzip body holds the body budget (its
// client is slow), another is answered 503 with Retry-After after the
// admission timeout, before anything of it is stored; once the first is
// done its bytes are back in the budget and bodies are taken again.
func TestBodyBudgetBusy(t *testing.T) {
	logger := slog.New(slog.DiscardHandler)
	st, err := pebblestore.Open(t.TempDir(), pebblestore.Options{}, logger)
	if err != nil {
		t.Fatal(err)
	}
	sk := sink.New(sink.DefaultConfig(), buckets.DefaultConfig(), st, logger, nil)
	reg := prometheus.NewRegistry()
	const maxBody, maxInflated = 4096, 16384
	h := httpingest.New(httpingest.Config{MaxBodyBytes: maxBody, MaxDecompressedBytes: maxInflated,
		MaxInflightBodyBytes: httpingest.MinInflightBodyBytes(maxBody, maxInflated), BodyAdmissionTimeout: 100 * time.Millisecond,
		Limits: decode.DefaultLimits()}, sk, func() time.Time { return now }, logger, reg)
	srv := httptest.NewServer(server.Handler([]server.Token{{Token: token, Tenant: "acme"}}, server.Routes{PostReadings: h.Readings, PostAudit: h.Audit}))
	t.Cleanup(func() {
		srv.Close()
		_ = sk.Close(context.Background())
		_ = st.Close()
	})
	// metric returns the value of the series of name whose labels include
	// label=value (any series when label is empty), or 0.
	metric := func(name, label, value string) float64 {
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, mf := range mfs {
			if mf.GetName() != name {
				continue
			}
			for _, m := range mf.GetMetric() {
				if label != "" && !slices.ContainsFunc(m.GetLabel(), func(lp *dto.LabelPair) bool {
					return lp.GetName() == label && lp.GetValue() == value
				}) {
					continue
				}
				if m.GetGauge() != nil {
					return m.GetGauge().GetValue()
				}
				return m.GetCounter().GetValue()
			}
		}
		return 0
	}
	inflight := func() float64 { return metric("sluice_http_body_inflight_bytes", "", "") }

	// The slow client: a gzip stream sent in two halves, without a length.
	pr, pw := io.Pipe()
	// Cleanups run last first: should the test stop before the slow body
	// is finished, its request ends here, before the server waits for it.
	t.Cleanup(func() { _ = pw.CloseWithError(errors.New("the test stopped")) })
	slow := make(chan int, 1)
	go func() {
		req, _ := http.NewRequest(http.MethodPost, srv.URL+"/v1/readings", pr)
		req.Header.Set("Authorization", "Bearer "+token)
		req.Header.Set("Content-Encoding", "gzip")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			slow <- 0
			return
		}
		resp.Body.Close()
		slow <- resp.StatusCode
	}()
	var zbuf bytes.Buffer
	zw := gzip.NewWriter(&zbuf)
	_, _ = zw.Write([]byte(strings.Replace(one, "pump-17", "slow", 1)))
	_ = zw.Close()
	z := zbuf.Bytes()
	if _, err := pw.Write(z[:len(z)/2]); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for inflight() == 0 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if inflight() == 0 {
		t.Fatal("the slow body holds nothing of the budget")
	}

	busy := post(t, srv.URL, "/v1/readings", gz(t, []byte(strings.Replace(one, "pump-17", "refused", 1))), map[string]string{"Content-Encoding": "gzip"})
	if busy.status != http.StatusServiceUnavailable || busy.header.Get("Retry-After") == "" {
		t.Fatalf("with the budget held: %d (Retry-After %q) %v, want 503 with Retry-After", busy.status, busy.header.Get("Retry-After"), busy.body)
	}
	if n := metric("sluice_http_requests_rejected_total", "reason", "body_busy"); n != 1 {
		t.Errorf("body_busy rejections %v, want 1", n)
	}

	if _, err := pw.Write(z[len(z)/2:]); err != nil {
		t.Fatal(err)
	}
	pw.Close()
	if got := <-slow; got != http.StatusAccepted {
		t.Fatalf("slow request answered %d", got)
	}
	if v := inflight(); v != 0 {
		t.Errorf("%v bytes still charged after every request is done", v)
	}
	if r := post(t, srv.URL, "/v1/readings", gz(t, []byte(one)), map[string]string{"Content-Encoding": "gzip"}); r.status != http.StatusAccepted {
		t.Fatalf("after the budget was given back: %d %v", r.status, r.body)
	}
	if n := len(readAll(t, st, "refused")); n != 0 {
		t.Errorf("the refused request stored %d readings", n)
	}
}

// TestPipelineFullRefusedBeforeDecoding: when the pipeline has no room, a
// request is refused 503 before it is decoded (a body whose last row is
// invalid gets 503, not the 400 decoding would give).
func TestPipelineFullRefusedBeforeDecoding(t *testing.T) {
	gate := make(chan struct{})
	cfg := sink.DefaultConfig()
	cfg.BatchRows, cfg.QueueRows, cfg.AdmissionTimeout, cfg.Linger = 2, 2, 50*time.Millisecond, 0
	e := newEnv(t, cfg, gate)
	// The first request takes the whole budget and waits at the gate.
	e.entered = make(chan struct{}, 1)
	held := make(chan response, 1)
	go func() { held <- post(t, e.url, "/v1/readings", []byte(one), nil) }()
	select {
	case <-e.entered:
	case <-time.After(5 * time.Second):
		t.Fatal("the first request never reached the store")
	}
	bad := "[" + strings.Replace(one, "pump-17", "pump-18", 1) + `,{"device_id":"pump-18","ts":"2026-11-22T10:00:01Z","metrics":{"temp_c":null}}]`
	r := post(t, e.url, "/v1/readings", []byte(bad), nil)
	if r.status != http.StatusServiceUnavailable || r.header.Get("Retry-After") == "" {
		t.Errorf("with the pipeline full: %d (Retry-After %q) %v, want 503 with Retry-After before decoding", r.status, r.header.Get("Retry-After"), r.body)
	}
	gate <- struct{}{}
	if got := <-held; got.status != http.StatusAccepted {
		t.Fatalf("admitted request answered %d", got.status)
	}
	// With room again, the same body is decoded and refused for its row.
	if r := post(t, e.url, "/v1/readings", []byte(bad), nil); r.status != http.StatusBadRequest {
		t.Fatalf("with room: %d %v, want 400", r.status, r.body)
	}
}
