package readapi_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/model"
	"github.com/sluicehq/sluice/internal/readapi"
	"github.com/sluicehq/sluice/internal/server"
	"github.com/sluicehq/sluice/internal/store/pebblestore"
)

func TestParameterErrors(t *testing.T) {
	st, err := pebblestore.Open(t.TempDir(), pebblestore.Options{}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	now := time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC)
	h := readapi.New(st, func() time.Time { return now }, slog.New(slog.DiscardHandler))
	srv := httptest.NewServer(server.Handler([]server.Token{{Token: "read-token", Tenant: "acme"}}, server.Routes{
		GetReadings: h.Readings, GetAudit: h.Audit, GetPartitions: h.Partitions,
	}))
	defer srv.Close()
	tests := []struct {
		path   string
		status int
		want   string
	}{
		{"/v1/readings?from=0&to=1", 400, "parameter device: required"},
		{"/v1/readings?device=d&from=yesterday", 400, "parameter from"},
		{"/v1/readings?device=d&to=2026-13-01T00:00:00Z", 400, "parameter to"},
		{"/v1/readings?device=d&from=10&to=5", 400, "parameter to: must be after from"},
		{"/v1/readings?device=d&limit=0", 400, "parameter limit: must be 1..10000"},
		{"/v1/readings?device=d&limit=10001", 400, "parameter limit"},
		{"/v1/readings?device=d&cursor=%21%21", 400, "parameter cursor"},
		{"/v1/readings?device=d&from=0&to=999999999999", 400, "parameters from, to: the range spans 11575 days, more than read.max_days (400)"},
		{"/v1/readings?device=d&from=0&to=34560000000", 200, `"readings":[]`}, // 400 days
		{"/v1/readings?device=d&from=0&to=34560000001", 400, "more than read.max_days (400)"},
		// The edges of int64 and of the valid time range.
		{"/v1/readings?device=d&from=-9223372036854775808&to=9223372036854775807", 400, "parameter to: 9223372036854775807 is outside the valid time range"},
		{"/v1/readings?device=d&from=-9223372036854775808&to=0", 400, "parameter from: -9223372036854775808 is outside the valid time range"},
		{"/v1/readings?device=d&to=9223372036854775807", 400, "parameter to"},
		{"/v1/readings?device=d&to=9223372036854775808", 400, "parameter to: 9223372036854775808 is outside the valid time range"},
		{"/v1/readings?device=d&from=-9223372036854775809&to=0", 400, "parameter from"},
		{"/v1/readings?device=d&from=0000-01-01T00:00:00Z&to=0000-01-02T00:00:00Z", 200, `"readings":[]`},
		{"/v1/readings?device=d&to=-62167219200000", 400, "parameter to: must be after from"},
		{"/v1/readings?device=d&from=-62167219200001&to=0", 400, "parameter from: -62167219200001 is outside"},
		{"/v1/readings?device=d&from=0000-01-01T00:00:00%2B01:00", 400, "parameter from"},
		{"/v1/readings?device=d&from=9999-12-31T00:00:00Z&to=253402300800000", 200, `"readings":[]`},
		{"/v1/readings?device=d&from=9999-12-31T00:00:00Z&to=253402300800001", 400, "parameter to: 253402300800001 is outside"},
		{"/v1/readings?device=d&to=9999-12-31T23:59:59.999Z", 200, `"readings":[]`},
		{"/v1/audit?stream=s&from=-62167219200000&to=-62167219199999", 200, `"events":[]`},
		{"/v1/audit?stream=s&to=" + strings.Repeat("9", 100), 400, "parameter to: longer than 64 characters"},
		{"/v1/readings?device=d&limit=99999999999999999999", 400, "parameter limit"},
		{"/v1/partitions?device=d&day=0000-01-01", 200, `"partitions":[]`},
		{"/v1/partitions?device=d&day=9999-12-31", 200, `"partitions":[]`},
		{"/v1/partitions?device=d&day=10000-01-01", 400, "parameter day"},
		{"/v1/partitions?device=d&day=-001-01-01", 400, "parameter day"},
		{"/v1/audit?device=d", 400, "parameter stream: required"},
		{"/v1/partitions?device=d&day=22-11-2026", 400, "parameter day"},
		{"/v1/partitions?kind=metrics&series=d&day=2026-11-22", 400, "parameter kind"},
		{"/v1/partitions?day=2026-11-22", 400, "parameter series"},
		{"/v1/readings?device=d", 200, `"readings":[]`},
		{"/v1/partitions?stream=s&day=2026-11-22", 200, `"partitions":[]`},
	}
	for _, tt := range tests {
		t.Run(tt.path, func(t *testing.T) {
			req, _ := http.NewRequest(http.MethodGet, srv.URL+tt.path, nil)
			req.Header.Set("Authorization", "Bearer read-token")
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			var body json.RawMessage
			if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
				t.Fatal(err)
			}
			if resp.StatusCode != tt.status || !strings.Contains(string(body), tt.want) {
				t.Errorf("got %d %s, want %d containing %q", resp.StatusCode, body, tt.status, tt.want)
			}
		})
	}
}

// A partitions listing that cannot settle the catalogue first (the gateway
// is stopping) still answers, and says its entries may run ahead.
func TestPartitionsUnsettled(t *testing.T) {
	st, err := pebblestore.Open(t.TempDir(), pebblestore.Options{}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	now := time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name   string
		settle error
		want   string
	}{
		{"settled", nil, `{"partitions":[]}`},
		{"not settled", errors.New("sink closed"), `{"partitions":[],"unsettled":true}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := readapi.New(st, func() time.Time { return now }, slog.New(slog.DiscardHandler),
				readapi.WithSettle(func(context.Context, ...model.SeriesDay) error { return tc.settle }))
			srv := httptest.NewServer(server.Handler([]server.Token{{Token: "read-token", Tenant: "acme"}}, server.Routes{GetPartitions: h.Partitions}))
			defer srv.Close()
			req, _ := http.NewRequest(http.MethodGet, srv.URL+"/v1/partitions?device=d&day=2026-11-22", nil)
			req.Header.Set("Authorization", "Bearer read-token")
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			body, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != 200 || strings.TrimSpace(string(body)) != tc.want {
				t.Errorf("got %d %s, want 200 %s", resp.StatusCode, body, tc.want)
			}
		})
	}
}
