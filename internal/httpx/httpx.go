// Package httpx holds what every HTTP handler of the gateway shares: the
// tenant an authenticated request acts for, and JSON responses.
package httpx

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/sluicehq/sluice/internal/reqid"
)

type tenantKey struct{}

// WithTenant returns ctx carrying the authenticated tenant.
func WithTenant(ctx context.Context, tenant string) context.Context {
	return context.WithValue(ctx, tenantKey{}, tenant)
}

// Tenant returns the authenticated tenant, or "" if the request was not
// authenticated.
func Tenant(ctx context.Context) string {
	t, _ := ctx.Value(tenantKey{}).(string)
	return t
}

// ErrorBody is the JSON body of every error response. Row, Line and Field
// are set for a problem with one row of an ingest request. RequestID is the
// request's id (the X-Request-Id response header), filled in by JSON.
type ErrorBody struct {
	Error     string `json:"error"`
	Row       *int   `json:"row,omitempty"`
	Line      int    `json:"line,omitempty"`
	Field     string `json:"field,omitempty"`
	Reason    string `json:"reason,omitempty"`
	RequestID string `json:"request_id,omitempty"`
}

// JSON writes v with the status. An ErrorBody gets the request id of the
// response (reqid sets it on the response before any handler runs).
func JSON(w http.ResponseWriter, status int, v any) {
	if eb, ok := v.(ErrorBody); ok && eb.RequestID == "" {
		eb.RequestID = w.Header().Get(reqid.Header)
		v = eb
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	// An error here means the client went away; there is nobody to tell.
	_ = json.NewEncoder(w).Encode(v)
}

// Error writes {"error": msg} with the status.
func Error(w http.ResponseWriter, status int, msg string) {
	JSON(w, status, ErrorBody{Error: msg})
}

// Busy writes 503 with Retry-After: retryAfter rounded up to whole seconds
// (at least 1).
func Busy(w http.ResponseWriter, retryAfter time.Duration, msg string) {
	setRetryAfter(w, retryAfter)
	Error(w, http.StatusServiceUnavailable, msg)
}

// TooMany writes 429 with Retry-After: the client is over its quota and
// may try again after retryAfter, rounded up to whole seconds (at least 1).
func TooMany(w http.ResponseWriter, retryAfter time.Duration, msg string) {
	setRetryAfter(w, retryAfter)
	Error(w, http.StatusTooManyRequests, msg)
}

// setRetryAfter sets Retry-After to d rounded up to whole seconds, at least
// 1: a client told to come back sooner than the wait would be refused again.
func setRetryAfter(w http.ResponseWriter, d time.Duration) {
	secs := max(1, int((d+time.Second-1)/time.Second))
	w.Header().Set("Retry-After", strconv.Itoa(secs))
}

// ReadTimeout bounds a read by the read.timeout setting, and answers a read
// that its context stopped: the read API, the rollup API and the audit log
// share it.
type ReadTimeout struct {
	Timeout time.Duration
}

// Deadline returns r's context bounded by the timeout, and its cancel.
func (t ReadTimeout) Deadline(r *http.Request) (context.Context, context.CancelFunc) {
	return context.WithTimeout(r.Context(), t.Timeout)
}

// Stopped answers r if err ended it through its context (see ReadTimeout),
// and says so; false leaves the answer to the caller.
func (t ReadTimeout) Stopped(w http.ResponseWriter, r *http.Request, what string, err error) bool {
	switch {
	case r.Context().Err() != nil:
		return true // the client is gone: nobody to answer
	case errors.Is(err, context.DeadlineExceeded):
		Error(w, http.StatusGatewayTimeout, fmt.Sprintf("%s took longer than read.timeout (%s): narrow the range", what, t.Timeout))
		return true
	}
	return false
}
