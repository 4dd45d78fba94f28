package readapi_test

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/model"
	"github.com/sluicehq/sluice/internal/readapi"
	"github.com/sluicehq/sluice/internal/server"
	"github.com/sluicehq/sluice/internal/store"
)

// slowStore takes 20 ms per catalogue read and never looks at ctx.
type slowStore struct{ reads atomic.Int64 }

func (s *slowStore) Catalogue(context.Context, model.SeriesDay) ([]model.PartitionInfo, error) {
	s.reads.Add(1)
	time.Sleep(20 * time.Millisecond)
	return nil, nil
}

func (s *slowStore) ScanReadings(context.Context, model.PartitionKey, store.Range, int) ([]model.ReadingRow, error) {
	return nil, nil
}

func (s *slowStore) ScanAudit(context.Context, model.PartitionKey, store.Range, int) ([]model.AuditEvent, error) {
	return nil, nil
}

// A read that outlasts read.timeout is answered 504 naming the setting and
// stops reading: 400 days at 20 ms would take 8 s.
func TestReadTimeout(t *testing.T) {
	st := &slowStore{}
	h := readapi.New(st, time.Now, slog.New(slog.DiscardHandler), readapi.WithConfig(readapi.Config{Timeout: 200 * time.Millisecond, MaxDays: 400}))
	srv := httptest.NewServer(server.Handler([]server.Token{{Token: "read-token", Tenant: "acme"}}, server.Routes{GetReadings: h.Readings}))
	defer srv.Close()
	start := time.Now()
	status, body := get(t, srv.URL, "read-token", "/v1/readings?device=d&from=0&to=34560000000")
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("answered after %s, want about read.timeout (200ms)", took)
	}
	if msg, _ := body["error"].(string); status != http.StatusGatewayTimeout || !strings.Contains(msg, "read.timeout (200ms)") {
		t.Errorf("got %d %v, want 504 naming read.timeout", status, body)
	}
	n := st.reads.Load()
	time.Sleep(100 * time.Millisecond)
	if st.reads.Load() != n || n >= 400 {
		t.Errorf("%d catalogue reads, still reading after the answer: %d", n, st.reads.Load())
	}
}

// read.max_days bounds every range, and the answer names it.
func TestMaxDays(t *testing.T) {
	h := readapi.New(&slowStore{}, time.Now, slog.New(slog.DiscardHandler), readapi.WithConfig(readapi.Config{Timeout: time.Second, MaxDays: 2}))
	dl := readapi.New(nil, time.Now, slog.New(slog.DiscardHandler), readapi.WithConfig(readapi.Config{Timeout: time.Second, MaxDays: 2})).DeadLetters(nil)
	srv := httptest.NewServer(server.Handler([]server.Token{{Token: "read-token", Tenant: "acme"}}, server.Routes{
		GetReadings: h.Readings, GetAudit: h.Audit, Extra: map[string]http.HandlerFunc{"GET /v1/deadletters": dl},
	}))
	defer srv.Close()
	for _, path := range []string{
		"/v1/readings?device=d&from=0&to=172800001",
		"/v1/audit?stream=d&from=-1&to=86400001",
		"/v1/deadletters?from=0&to=172800001",
		"/v1/deadletters?from=-9223372036854775808&to=9223372036854775807",
	} {
		status, body := get(t, srv.URL, "read-token", path)
		if msg, _ := body["error"].(string); status != 400 || !strings.HasPrefix(msg, "parameter") {
			t.Errorf("%s: got %d %v, want 400 naming the parameter", path, status, body)
		} else if !strings.Contains(path, "922") && !strings.Contains(msg, "read.max_days (2)") {
			t.Errorf("%s: %q does not name read.max_days", path, msg)
		}
	}
	if status, body := get(t, srv.URL, "read-token", "/v1/readings?device=d&from=0&to=172800000"); status != 200 {
		t.Errorf("2 days: got %d %v, want 200", status, body)
	}
}
