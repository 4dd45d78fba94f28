package auditlog_test

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/audit/auditlog"
	"github.com/sluicehq/sluice/internal/audit/audittest"
	"github.com/sluicehq/sluice/internal/httpx"
	"github.com/sluicehq/sluice/internal/model"
	"github.com/sluicehq/sluice/internal/store"
)

// sealStore answers AuditSeals with nothing, or, when hang is set, only
// once the request's context ends (a store that does not answer).
type sealStore struct {
	auditlog.Store
	hang bool
}

func (s sealStore) AuditSeals(ctx context.Context, _, _ string) ([]store.AuditSeal, error) {
	if s.hang {
		<-ctx.Done()
		return nil, ctx.Err()
	}
	return nil, nil
}

// Catalogue lists no partitions: the stream has no events.
func (s sealStore) Catalogue(context.Context, model.SeriesDay) ([]model.PartitionInfo, error) {
	return nil, nil
}

// The audit log's endpoints obey the read limits: a verify wider than
// read.max_days is refused with 400 naming it, and a request that outlives
// read.timeout is answered 504 instead of running on.
func TestRoutesObeyReadLimits(t *testing.T) {
	keys, _ := audittest.NewKeys(t, "audit.example.com")
	for _, tc := range []struct {
		name   string
		hang   bool
		path   string
		status int
		want   string
	}{
		{"verify past max_days", false, "/v1/audit/verify?stream=s&from=2026-01-01&to=2026-01-05", http.StatusBadRequest, "read.max_days"},
		{"verify within max_days", false, "/v1/audit/verify?stream=s&from=2026-01-01&to=2026-01-02", http.StatusOK, ""},
		{"checkpoints past read.timeout", true, "/v1/audit/checkpoints?stream=s", http.StatusGatewayTimeout, "read.timeout"},
		{"verify past read.timeout", true, "/v1/audit/verify?stream=s", http.StatusGatewayTimeout, "read.timeout"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := audittest.NewLog(sealStore{hang: tc.hang}, keys, audittest.Now())
			routes := l.Routes(slog.New(slog.NewTextHandler(io.Discard, nil)), auditlog.Limits{Timeout: 50 * time.Millisecond, MaxDays: 2})
			pattern := "GET " + strings.SplitN(tc.path, "?", 2)[0]
			req := httptest.NewRequest(http.MethodGet, tc.path, nil)
			req = req.WithContext(httpx.WithTenant(req.Context(), "acme"))
			rec := httptest.NewRecorder()
			done := make(chan struct{})
			go func() { routes[pattern](rec, req); close(done) }()
			select {
			case <-done:
			case <-time.After(10 * time.Second):
				t.Fatal("no answer after 10s")
			}
			if rec.Code != tc.status || !strings.Contains(rec.Body.String(), tc.want) {
				t.Errorf("%s: %d %s, want %d naming %q", tc.path, rec.Code, rec.Body, tc.status, tc.want)
			}
		})
	}
}
