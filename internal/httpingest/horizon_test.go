package httpingest_test

import (
	"context"
	"fmt"
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
	"github.com/sluicehq/sluice/internal/retention"
	"github.com/sluicehq/sluice/internal/server"
	"github.com/sluicehq/sluice/internal/sink"
	"github.com/sluicehq/sluice/internal/store"
	"github.com/sluicehq/sluice/internal/store/pebblestore"
)

// Rows older than the tenant's retention horizon are refused (they would
// be dropped at once); rows just inside it are stored.
func TestRetentionHorizon(t *testing.T) {
	logger := slog.New(slog.DiscardHandler)
	st, err := pebblestore.Open(t.TempDir(), pebblestore.Options{}, logger)
	if err != nil {
		t.Fatal(err)
	}
	sk := sink.New(sink.DefaultConfig(), buckets.DefaultConfig(), st, logger, nil)
	t.Cleanup(func() {
		_ = sk.Close(context.Background())
		_ = st.Close()
	})
	rc := retention.DefaultConfig() // readings 30d, audit 400d
	rc.Tenants = map[string]retention.Policy{"acme": {Readings: retention.Duration(7 * retention.Day)}}
	h := httpingest.New(httpingest.Config{MaxBodyBytes: 1 << 20, MaxDecompressedBytes: 1 << 20, Limits: decode.DefaultLimits(),
		Horizon: func(k model.Kind, tenant string, now time.Time) time.Time {
			return rc.Horizon(store.BucketKind(k), tenant, now)
		}}, sk, func() time.Time { return now }, logger, nil)
	srv := httptest.NewServer(server.Handler([]server.Token{{Token: token, Tenant: "acme"}}, server.Routes{
		PostReadings: h.Readings, PostAudit: h.Audit,
	}))
	t.Cleanup(srv.Close)

	reading := func(ts time.Time) []byte {
		return fmt.Appendf(nil, `{"device_id":"d1","ts":%d,"metrics":{"v":1}}`, ts.UnixMilli())
	}
	event := func(id string, ts time.Time) []byte {
		return fmt.Appendf(nil, `{"event_id":%q,"stream":"s","ts":%d,"action":"login"}`, id, ts.UnixMilli())
	}
	for _, tc := range []struct {
		name   string
		path   string
		body   []byte
		status int
		reason string
	}{
		{"reading inside acme's 7d", "/v1/readings", reading(now.Add(-7*retention.Day + time.Millisecond)), http.StatusAccepted, ""},
		{"reading at the 7d horizon", "/v1/readings", reading(now.Add(-7 * retention.Day)), http.StatusAccepted, ""},
		{"reading past acme's 7d (default 30d does not apply)", "/v1/readings", reading(now.Add(-8 * retention.Day)), http.StatusBadRequest,
			"2026-11-14T12:00:00.000Z is older than the retention horizon 2026-11-15T12:00:00Z"},
		{"audit at 300d, inside the default 400d", "/v1/audit", event("e1", now.Add(-300*retention.Day)), http.StatusAccepted, ""},
		{"audit past 400d", "/v1/audit", event("e2", now.Add(-401*retention.Day)), http.StatusBadRequest, "older than the retention horizon"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := post(t, srv.URL, tc.path, tc.body, nil)
			if r.status != tc.status {
				t.Fatalf("status %d, want %d: %v", r.status, tc.status, r.body)
			}
			if tc.reason != "" {
				if r.body["field"] != "ts" || !strings.Contains(fmt.Sprint(r.body["reason"]), tc.reason) {
					t.Errorf("body %v, want field ts and reason containing %q", r.body, tc.reason)
				}
			}
		})
	}
}
