package httpingest

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/sluicehq/sluice/internal/decode"
	"github.com/sluicehq/sluice/internal/httpx"
	"github.com/sluicehq/sluice/internal/sink"
)

// writerFunc is a Writer that reserves nothing (a nil reservation is one
// Release ignores) and answers every write with f.
type writerFunc func(context.Context, *sink.Request) error

func (f writerFunc) Reserve(context.Context, int) (*sink.Reservation, error) { return nil, nil }

func (f writerFunc) WriteReserved(ctx context.Context, _ *sink.Reservation, r *sink.Request) error {
	return f(ctx, r)
}

// TestMetricsMove checks that each outcome of an ingest request moves its
// metric: rows accepted by kind, body bytes by kind, and refusals by kind
// and reason, and nothing else.
func TestMetricsMove(t *testing.T) {
	now := time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC)
	reading := `{"device_id":"d1","ts":"2026-11-22T11:00:00Z","metrics":{"a":1}}` + "\n"
	event := `{"stream":"s1","event_id":"e1","ts":"2026-11-22T11:00:00Z","actor":"x","action":"y"}` + "\n"
	tests := []struct {
		name      string
		audit     bool
		ct, body  string
		err       error // from the pipeline
		status    int
		accepted  float64
		rejection string // the reason label expected, or "" for none
	}{
		{name: "accepted readings", ct: "application/x-ndjson", body: reading + reading, status: http.StatusAccepted, accepted: 2},
		{name: "accepted audit", audit: true, ct: "application/x-ndjson", body: event, status: http.StatusAccepted, accepted: 1},
		{name: "invalid", ct: "application/x-ndjson", body: `{"device_id": 7}` + "\n", status: http.StatusBadRequest, rejection: "invalid"},
		{name: "content type", ct: "text/csv-or-not", body: reading, status: http.StatusUnsupportedMediaType, rejection: "content_type"},
		{name: "too many rows", ct: "application/x-ndjson", body: strings.Repeat(reading, 3), status: http.StatusRequestEntityTooLarge, rejection: "too_many_rows"},
		{name: "body too large", ct: "application/x-ndjson", body: strings.Repeat(" ", 5000) + reading, status: http.StatusRequestEntityTooLarge, rejection: "body"},
		{name: "busy", ct: "application/x-ndjson", body: reading, err: &sink.BusyError{RetryAfter: time.Second, Reason: "full"}, status: http.StatusServiceUnavailable, rejection: "busy"},
		{name: "shutdown", ct: "application/x-ndjson", body: reading, err: sink.ErrClosed, status: http.StatusServiceUnavailable, rejection: "shutdown"},
		{name: "store", ct: "application/x-ndjson", body: reading, err: errors.New("disk full"), status: http.StatusInternalServerError, rejection: "store"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			lim := decode.DefaultLimits()
			lim.MaxRows = 2
			w := writerFunc(func(context.Context, *sink.Request) error { return tc.err })
			h := New(Config{MaxBodyBytes: 4096, MaxDecompressedBytes: 4096, Limits: lim}, w,
				func() time.Time { return now }, slog.New(slog.DiscardHandler), prometheus.NewRegistry())
			kind, serve := "readings", h.Readings
			if tc.audit {
				kind, serve = "audit", h.Audit
			}
			req := httptest.NewRequest(http.MethodPost, "/v1/"+kind, strings.NewReader(tc.body))
			req.Header.Set("Content-Type", tc.ct)
			req = req.WithContext(httpx.WithTenant(req.Context(), "acme"))
			rec := httptest.NewRecorder()
			serve(rec, req)
			if rec.Code != tc.status {
				t.Fatalf("status %d, want %d: %s", rec.Code, tc.status, rec.Body)
			}
			if got := testutil.ToFloat64(h.m.accepted.WithLabelValues(kind)); got != tc.accepted {
				t.Errorf("accepted %v, want %v", got, tc.accepted)
			}
			rejected := testutil.CollectAndCount(h.m.rejected)
			switch {
			case tc.rejection == "" && rejected != 0:
				t.Errorf("%d rejection series, want none", rejected)
			case tc.rejection != "":
				if got := testutil.ToFloat64(h.m.rejected.WithLabelValues(kind, tc.rejection)); got != 1 || rejected != 1 {
					t.Errorf("rejected{%s,%s} = %v among %d series, want 1 alone", kind, tc.rejection, got, rejected)
				}
			}
			// Bytes count what was read, for every request that got that far.
			if tc.rejection == "" || tc.err != nil {
				if got := testutil.ToFloat64(h.m.bytes.WithLabelValues(kind)); got != float64(len(tc.body)) {
					t.Errorf("body bytes %v, want %d", got, len(tc.body))
				}
			}
		})
	}
}
