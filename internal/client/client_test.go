package client_test

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/sluicehq/sluice/internal/client"
	"github.com/sluicehq/sluice/internal/client/clienttest"
	"github.com/sluicehq/sluice/internal/model"
)

const token = "secret-token"

var base = time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC)

func at(d time.Duration) int64 { return base.Add(d).UnixMilli() }

func testTenant() clienttest.Tenant {
	day, _ := model.ParseDay("2026-11-22")
	var t clienttest.Tenant
	for i := range 5 {
		r := model.Reading{DeviceID: "pump-17", TS: at(time.Duration(i) * 250 * time.Millisecond),
			Metrics: []model.Metric{{Name: "rpm", Value: float64(1180 + i)}, {Name: "temp_c", Value: 21.5}}}
		if i%2 == 0 {
			r.Seq, r.HasSeq = int64(40+i), true
		}
		t.Readings = append(t.Readings, r)
	}
	// Another device in the same tenant, which must never be returned.
	t.Readings = append(t.Readings, model.Reading{DeviceID: "pump-18", TS: at(0), Metrics: []model.Metric{{Name: "rpm", Value: 1}}})
	t.Events = []model.AuditEvent{
		{EventID: "e1", Stream: "billing-api", TS: at(0), Actor: "user:42", Action: "invoice.refund",
			Resource: "invoice:981", Outcome: "success", Attributes: []byte(`{"amount":12.5}`)},
		{EventID: "e2", Stream: "billing-api", TS: at(time.Second), Action: "login"},
	}
	t.Partitions = []model.PartitionInfo{
		{Key: model.PartitionKey{Kind: model.KindReadings, Series: "pump-17", Day: day}, State: "single",
			Closed: true, Rows: 10, Bytes: 400, MinTS: at(0), MaxTS: at(time.Hour)},
		{Key: model.PartitionKey{Kind: model.KindAudit, Series: "billing-api", Day: day}, State: "single",
			Rows: 2, Bytes: 90, MinTS: at(0), MaxTS: at(time.Second)},
	}
	return t
}

// newClient starts a fake server with the test tenant and returns a client
// for it that retries busy answers without waiting.
func newClient(t *testing.T, hook func(http.ResponseWriter, *http.Request) bool) (*client.Client, *clienttest.Server) {
	t.Helper()
	srv := clienttest.New(t, clienttest.Config{
		Tenants: map[string]clienttest.Tenant{token: testTenant()},
		Now:     func() time.Time { return base.Add(time.Hour) },
		Hook:    hook,
	})
	c, err := client.NewClient(srv.URL, token, nil)
	if err != nil {
		t.Fatal(err)
	}
	c.Retry.MinWait = 0
	return c, srv
}

func TestNewClient(t *testing.T) {
	for _, tc := range []struct {
		url     string
		wantErr string
	}{
		{"http://127.0.0.1:8080", ""},
		{"https://sluice.example.com/prefix/", ""},
		{"127.0.0.1:8080", "want http://host[:port]"},
		{"ftp://host", "want http://host[:port]"},
		{"http://", "want http://host[:port]"},
		{"http://host?x=1", "must not have a query"},
		{"http://a b", "parse base URL"},
	} {
		t.Run(tc.url, func(t *testing.T) {
			_, err := client.NewClient(tc.url, "t", nil)
			if tc.wantErr == "" {
				if err != nil {
					t.Fatalf("NewClient: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("NewClient error = %v, want it to contain %q", err, tc.wantErr)
			}
		})
	}
}

func TestReadings(t *testing.T) {
	c, srv := newClient(t, nil)
	ctx := context.Background()
	page, err := c.Readings(ctx, client.ReadingsQuery{Device: "pump-17", Range: client.Range{
		From: base, To: base.Add(time.Second), Limit: 2}})
	if err != nil {
		t.Fatal(err)
	}
	want := testTenant().Readings[:2]
	if diff := cmp.Diff(want, page.Readings); diff != "" {
		t.Errorf("readings (-want +got):\n%s", diff)
	}
	if page.NextCursor == "" {
		t.Error("NextCursor is empty, want a cursor (3 more readings)")
	}
	reqs := srv.Requests()
	if got, want := reqs[len(reqs)-1].RawQuery,
		"device=pump-17&from=2026-11-22T10%3A00%3A00.000Z&limit=2&to=2026-11-22T10%3A00%3A01.000Z"; got != want {
		t.Errorf("query = %s, want %s", got, want)
	}

	// Zero bounds and limit are left to the server; the server's default
	// range (the day before its now) holds all five readings.
	page, err = c.Readings(ctx, client.ReadingsQuery{Device: "pump-17"})
	if err != nil {
		t.Fatal(err)
	}
	if len(page.Readings) != 5 || page.NextCursor != "" {
		t.Errorf("got %d readings, cursor %q; want 5 and none", len(page.Readings), page.NextCursor)
	}
	reqs = srv.Requests()
	if got := reqs[len(reqs)-1].RawQuery; got != "device=pump-17" {
		t.Errorf("query = %s, want device=pump-17", got)
	}
}

func TestAuditAndPartitions(t *testing.T) {
	c, _ := newClient(t, nil)
	ctx := context.Background()
	page, err := c.Audit(ctx, client.AuditQuery{Stream: "billing-api"})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(testTenant().Events, page.Events); diff != "" {
		t.Errorf("events (-want +got):\n%s", diff)
	}
	day, _ := model.ParseDay("2026-11-22")
	ps, err := c.Partitions(ctx, client.PartitionsQuery{Kind: model.KindAudit, Series: "billing-api", Day: day})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(testTenant().Partitions[1:], ps); diff != "" {
		t.Errorf("partitions (-want +got):\n%s", diff)
	}
}

func TestErrors(t *testing.T) {
	for _, tc := range []struct {
		name    string
		hook    func(http.ResponseWriter, *http.Request) bool
		token   string
		query   client.ReadingsQuery
		want    *client.APIError
		wantMsg string
	}{
		{
			name:    "bad parameter names it",
			query:   client.ReadingsQuery{Device: "pump-17", Range: client.Range{Cursor: "!!"}},
			want:    &client.APIError{Status: 400, Message: "parameter cursor: invalid cursor"},
			wantMsg: "parameter cursor: invalid cursor (HTTP 400)",
		},
		{
			name:    "bad token",
			token:   "wrong",
			query:   client.ReadingsQuery{Device: "pump-17"},
			want:    &client.APIError{Status: 401, Message: "invalid or missing bearer token"},
			wantMsg: "invalid or missing bearer token (HTTP 401)",
		},
		{
			name: "body that is not JSON",
			hook: func(w http.ResponseWriter, r *http.Request) bool {
				http.Error(w, "<html>\n  bad gateway\n</html>", http.StatusBadGateway)
				return true
			},
			query: client.ReadingsQuery{Device: "pump-17"},
			want:  &client.APIError{Status: 502, Message: "<html> bad gateway </html>"},
		},
		{
			name: "empty body",
			hook: func(w http.ResponseWriter, r *http.Request) bool {
				w.WriteHeader(http.StatusInternalServerError)
				return true
			},
			query:   client.ReadingsQuery{Device: "pump-17"},
			want:    &client.APIError{Status: 500, Message: "internal server error"},
			wantMsg: "internal server error (HTTP 500)",
		},
		{
			name: "busy on every try",
			hook: func(w http.ResponseWriter, r *http.Request) bool {
				clienttest.Busy(w, 0)
				return true
			},
			query:   client.ReadingsQuery{Device: "pump-17"},
			want:    &client.APIError{Status: 503, Message: "busy, retry later"},
			wantMsg: "busy, retry later (HTTP 503)",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, srv := newClient(t, tc.hook)
			if tc.token != "" {
				var err error
				if c, err = client.NewClient(srv.URL, tc.token, nil); err != nil {
					t.Fatal(err)
				}
			}
			_, err := c.Readings(context.Background(), tc.query)
			var apiErr *client.APIError
			if !errors.As(err, &apiErr) {
				t.Fatalf("error = %v (%T), want *client.APIError", err, err)
			}
			if diff := cmp.Diff(tc.want, apiErr); diff != "" {
				t.Errorf("APIError (-want +got):\n%s", diff)
			}
			if tc.wantMsg != "" && err.Error() != tc.wantMsg {
				t.Errorf("Error() = %q, want %q", err.Error(), tc.wantMsg)
			}
		})
	}
}

func TestRetryBusy(t *testing.T) {
	for _, tc := range []struct {
		name      string
		busyTimes int
		attempts  int
		wantErr   bool
		wantReqs  int
	}{
		{name: "succeeds after two busy answers", busyTimes: 2, attempts: 3, wantReqs: 3},
		{name: "gives up after attempts", busyTimes: 5, attempts: 3, wantErr: true, wantReqs: 3},
		{name: "no retry with one attempt", busyTimes: 1, attempts: 1, wantErr: true, wantReqs: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			busy := tc.busyTimes
			c, srv := newClient(t, func(w http.ResponseWriter, r *http.Request) bool {
				if busy > 0 {
					busy--
					clienttest.Busy(w, 0)
					return true
				}
				return false
			})
			c.Retry.Attempts = tc.attempts
			var notified int
			c.Retry.Notify = func(err *client.APIError, wait time.Duration) {
				notified++
				if err.Status != http.StatusServiceUnavailable || wait != 0 {
					t.Errorf("Notify(%v, %v), want a 503 and no wait", err, wait)
				}
			}
			_, err := c.Readings(context.Background(), client.ReadingsQuery{Device: "pump-17"})
			if (err != nil) != tc.wantErr {
				t.Fatalf("error = %v, want error: %v", err, tc.wantErr)
			}
			if got := len(srv.Requests()); got != tc.wantReqs {
				t.Errorf("server saw %d requests, want %d", got, tc.wantReqs)
			}
			if notified != tc.wantReqs-1 {
				t.Errorf("Notify called %d times, want %d", notified, tc.wantReqs-1)
			}
		})
	}
}

func TestRetryWaitHonoursContext(t *testing.T) {
	c, _ := newClient(t, func(w http.ResponseWriter, r *http.Request) bool {
		clienttest.Busy(w, 60)
		return true
	})
	c.Retry.MaxWait = time.Minute
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := c.Readings(ctx, client.ReadingsQuery{Device: "pump-17"})
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("error = %v, want context.DeadlineExceeded", err)
	}
	var apiErr *client.APIError
	if !errors.As(err, &apiErr) || apiErr.RetryAfter != time.Minute {
		t.Errorf("error = %v, want it to carry the 503 with Retry-After 1m", err)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("took %v; the wait did not stop with the context", d)
	}
}

func TestReadingPagesFollowsCursors(t *testing.T) {
	for _, tc := range []struct {
		name      string
		limit     int
		cursor    string
		stopAfter int // 0: read all pages
		wantPages []int
	}{
		{name: "limit 2 gives 2+2+1", limit: 2, wantPages: []int{2, 2, 1}},
		{name: "exact fit needs no extra page", limit: 5, wantPages: []int{5}},
		{name: "limit 1", limit: 1, wantPages: []int{1, 1, 1, 1, 1}},
		{name: "caller stops early", limit: 2, stopAfter: 1, wantPages: []int{2}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, srv := newClient(t, nil)
			var got []model.Reading
			var sizes []int
			q := client.ReadingsQuery{Device: "pump-17", Range: client.Range{Limit: tc.limit}}
			for page, err := range c.ReadingPages(context.Background(), q) {
				if err != nil {
					t.Fatal(err)
				}
				got = append(got, page.Readings...)
				sizes = append(sizes, len(page.Readings))
				if tc.stopAfter > 0 && len(sizes) == tc.stopAfter {
					break
				}
			}
			if diff := cmp.Diff(tc.wantPages, sizes); diff != "" {
				t.Errorf("page sizes (-want +got):\n%s", diff)
			}
			want := testTenant().Readings[:len(got)]
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("readings (-want +got):\n%s", diff)
			}
			if n := len(srv.Requests()); n != len(tc.wantPages) {
				t.Errorf("server saw %d requests, want %d", n, len(tc.wantPages))
			}
			for i, u := range srv.Requests() {
				if has := u.Query().Has("cursor"); has != (i > 0) {
					t.Errorf("request %d: cursor sent = %v, want %v", i, has, i > 0)
				}
			}
		})
	}
}

func TestAuditPagesFromCursor(t *testing.T) {
	c, _ := newClient(t, nil)
	ctx := context.Background()
	first, err := c.Audit(ctx, client.AuditQuery{Stream: "billing-api", Range: client.Range{Limit: 1}})
	if err != nil {
		t.Fatal(err)
	}
	var got []model.AuditEvent
	q := client.AuditQuery{Stream: "billing-api", Range: client.Range{Limit: 1, Cursor: first.NextCursor}}
	for page, err := range c.AuditPages(ctx, q) {
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, page.Events...)
	}
	if diff := cmp.Diff(testTenant().Events[1:], got); diff != "" {
		t.Errorf("events (-want +got):\n%s", diff)
	}
}

func TestPagesStopOnRepeatedCursor(t *testing.T) {
	c, srv := newClient(t, func(w http.ResponseWriter, r *http.Request) bool {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"readings":[],"next_cursor":"same"}`))
		return true
	})
	var errs []error
	for _, err := range c.ReadingPages(context.Background(), client.ReadingsQuery{Device: "pump-17"}) {
		errs = append(errs, err)
	}
	if len(errs) != 3 || errs[0] != nil || errs[1] != nil || errs[2] == nil {
		t.Fatalf("errors = %v, want two pages and then an error", errs)
	}
	if n := len(srv.Requests()); n != 2 {
		t.Errorf("server saw %d requests, want 2", n)
	}
}

func TestMalformedResponses(t *testing.T) {
	for _, tc := range []struct {
		name, body, wantErr string
	}{
		{"not JSON", "<html>", "decode /v1/readings response"},
		{"bad ts", `{"readings":[{"device_id":"d","ts":"yesterday","metrics":{}}]}`, `reading 0: ts: "yesterday" is not RFC 3339`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, _ := newClient(t, func(w http.ResponseWriter, r *http.Request) bool {
				_, _ = w.Write([]byte(tc.body))
				return true
			})
			_, err := c.Readings(context.Background(), client.ReadingsQuery{Device: "d"})
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("error = %v, want it to contain %q", err, tc.wantErr)
			}
		})
	}
}
