package rollupapi

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/httpx"
	"github.com/sluicehq/sluice/internal/model"
	"github.com/sluicehq/sluice/internal/readapi"
	"github.com/sluicehq/sluice/internal/rollupstore"
	"github.com/sluicehq/sluice/internal/store/pebblestore"
)

// blockingRaw holds every device listing until release is closed or the
// caller's context ends.
type blockingRaw struct {
	*pebblestore.Store
	entered chan struct{}
	release chan struct{}
}

func (b *blockingRaw) EachSeries(ctx context.Context, tenant string, kind model.Kind, day model.Day, fn func(string) error) error {
	select {
	case b.entered <- struct{}{}:
	default:
	}
	select {
	case <-b.release:
	case <-ctx.Done():
		return ctx.Err()
	}
	return b.Store.EachSeries(ctx, tenant, kind, day, fn)
}

func newBounded(t *testing.T, opts ...Option) (*Handler, *blockingRaw) {
	t.Helper()
	quiet := slog.New(slog.DiscardHandler)
	dir := t.TempDir()
	raw, err := pebblestore.Open(filepath.Join(dir, "raw"), pebblestore.Options{}, quiet)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { raw.Close() })
	dst, err := rollupstore.Open(filepath.Join(dir, "rollups"), quiet)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { dst.Close() })
	br := &blockingRaw{Store: raw, entered: make(chan struct{}, 1), release: make(chan struct{})}
	status := func(string) StatusJSON { return StatusJSON{} }
	return New(br, dst, status, time.Now, quiet, opts...), br
}

// serveFor runs one request as tenant acme, giving up after 10 s (an
// overflowing range used to loop forever).
func serveFor(t *testing.T, h http.HandlerFunc, ctx context.Context, method, path string, q url.Values) *httptest.ResponseRecorder {
	t.Helper()
	req := httptest.NewRequest(method, path+"?"+q.Encode(), nil).WithContext(httpx.WithTenant(ctx, "acme"))
	rec := httptest.NewRecorder()
	done := make(chan struct{})
	go func() { h(rec, req); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatalf("%s %s?%s did not answer within 10s", method, path, q.Encode())
	}
	return rec
}

// Every rollup endpoint refuses a time outside years 0000..9999 and a range
// wider than read.max_days with 400 naming the parameter, promptly.
func TestRangesAreBounded(t *testing.T) {
	h, br := newBounded(t, WithReadConfig(readapi.Config{Timeout: time.Second, MaxDays: 30}))
	close(br.release)
	tests := []struct {
		method, path string
		q            url.Values
		want         string
	}{
		{"POST", "/v1/rollups/rebuild", url.Values{"from": {"-9223372036854775808"}, "to": {"9223372036854775807"}}, "parameter to: 9223372036854775807 is outside"},
		{"POST", "/v1/rollups/rebuild", url.Values{"from": {"-9223372036854775808"}, "to": {"0"}}, "parameter from: -9223372036854775808 is outside"},
		{"POST", "/v1/rollups/rebuild", url.Values{"from": {"0"}, "to": {"2678400000"}}, "parameters from, to: the range spans 31 days, more than read.max_days (30)"},
		{"GET", "/v1/rollups", url.Values{"device": {"d"}, "metric": {"m"}, "from": {"0"}, "to": {"9223372036854775807"}}, "parameter to"},
		{"GET", "/v1/top", url.Values{"metric": {"m"}, "from": {"-9223372036854775808"}, "to": {"0"}}, "parameter from"},
		{"GET", "/v1/top", url.Values{"metric": {"m"}, "limit": {"99999999999999999999"}}, "parameter limit"},
		{"GET", "/v1/rollups/verify", url.Values{"day": {"10000-01-01"}}, "parameter day"},
	}
	for _, tc := range tests {
		rec := serveFor(t, h.Routes()[tc.method+" "+tc.path], t.Context(), tc.method, tc.path, tc.q)
		if rec.Code != 400 || !strings.Contains(rec.Body.String(), tc.want) {
			t.Errorf("%s %s?%s: got %d %s, want 400 %q", tc.method, tc.path, tc.q.Encode(), rec.Code, rec.Body, tc.want)
		}
	}
	rec := serveFor(t, h.Rebuild, t.Context(), "POST", "/v1/rollups/rebuild", url.Values{"from": {"0"}, "to": {"2592000000"}})
	if rec.Code != 200 || !strings.Contains(rec.Body.String(), `"result"`) {
		t.Errorf("30-day rebuild: got %d %s, want 200 with a result", rec.Code, rec.Body)
	}
}

// At most rollups.max_rebuilds rebuilds run at once; one more is answered
// 503 with Retry-After, and a rebuild whose client leaves stops.
func TestRebuildsAreBoundedJobs(t *testing.T) {
	h, br := newBounded(t, WithRebuilds(1, time.Minute))
	ctx, cancel := context.WithCancel(t.Context())
	q := url.Values{"from": {"0"}, "to": {"86400000"}}
	first := make(chan *httptest.ResponseRecorder, 1)
	go func() { first <- serveFor(t, h.Rebuild, ctx, "POST", "/v1/rollups/rebuild", q) }()
	<-br.entered
	rec := serveFor(t, h.Rebuild, t.Context(), "POST", "/v1/rollups/rebuild", q)
	if rec.Code != http.StatusServiceUnavailable || rec.Header().Get("Retry-After") == "" || !strings.Contains(rec.Body.String(), "rollups.max_rebuilds") {
		t.Errorf("second rebuild: got %d %s (Retry-After %q), want 503 naming rollups.max_rebuilds", rec.Code, rec.Body, rec.Header().Get("Retry-After"))
	}
	cancel() // the first one's client goes away
	select {
	case rec := <-first:
		if strings.Contains(rec.Body.String(), `"result"`) {
			t.Errorf("cancelled rebuild answered a result: %s", rec.Body)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("a rebuild whose client left did not stop")
	}
	close(br.release)
	if rec := serveFor(t, h.Rebuild, t.Context(), "POST", "/v1/rollups/rebuild", q); !strings.Contains(rec.Body.String(), `"result"`) {
		t.Errorf("rebuild after the first stopped: got %d %s, want a result", rec.Code, rec.Body)
	}
}

// A rebuild stops after rollups.rebuild_timeout and says so.
func TestRebuildTimeout(t *testing.T) {
	h, _ := newBounded(t, WithRebuilds(1, 200*time.Millisecond))
	rec := serveFor(t, h.Rebuild, t.Context(), "POST", "/v1/rollups/rebuild", url.Values{"from": {"0"}, "to": {"86400000"}})
	if !strings.Contains(rec.Body.String(), "rollups.rebuild_timeout (200ms)") {
		t.Errorf("got %d %s, want the error naming rollups.rebuild_timeout", rec.Code, rec.Body)
	}
}
