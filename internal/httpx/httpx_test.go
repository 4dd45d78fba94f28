package httpx

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

func TestReadTimeoutStopped(t *testing.T) {
	rt := ReadTimeout{Timeout: 30 * time.Second}
	gone, cancel := context.WithCancel(context.Background())
	cancel()
	for _, tc := range []struct {
		name    string
		ctx     context.Context
		err     error
		stopped bool
		status  int
	}{
		{"deadline passed", context.Background(), context.DeadlineExceeded, true, http.StatusGatewayTimeout},
		{"wrapped deadline", context.Background(), errors.Join(errors.New("scan"), context.DeadlineExceeded), true, http.StatusGatewayTimeout},
		{"client gone", gone, context.Canceled, true, http.StatusOK}, // nothing written
		{"other error", context.Background(), errors.New("disk"), false, http.StatusOK},
	} {
		rec := httptest.NewRecorder()
		r := httptest.NewRequest(http.MethodGet, "/", nil).WithContext(tc.ctx)
		if got := rt.Stopped(rec, r, "the read", tc.err); got != tc.stopped || rec.Code != tc.status {
			t.Errorf("%s: Stopped = %v with %d, want %v with %d", tc.name, got, rec.Code, tc.stopped, tc.status)
		}
		if tc.status == http.StatusGatewayTimeout && !strings.Contains(rec.Body.String(), "read.timeout (30s)") {
			t.Errorf("%s: body %s does not name read.timeout", tc.name, rec.Body)
		}
	}
}
