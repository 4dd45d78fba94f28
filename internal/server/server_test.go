package server

import (
	"bytes"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/sluicehq/sluice/internal/httpx"
	"github.com/sluicehq/sluice/internal/reqid"
)

func testHandler(ready func() error, log *slog.Logger) http.Handler {
	ok := func(w http.ResponseWriter, _ *http.Request) {
		httpx.JSON(w, http.StatusAccepted, map[string]int{"accepted": 1})
	}
	fail := func(w http.ResponseWriter, r *http.Request) {
		log.ErrorContext(r.Context(), "write request", "err", "disk on fire")
		httpx.Error(w, http.StatusInternalServerError, "write failed")
	}
	return Handler([]Token{{Token: "secret-token-1", Tenant: "acme"}}, Routes{
		PostReadings: ok, PostAudit: fail, GetReadings: ok, GetAudit: ok, GetPartitions: ok,
		Ready: ready, Log: log,
	})
}

func do(t *testing.T, h http.Handler, method, path, token, id string) (*http.Response, map[string]any) {
	t.Helper()
	req := httptest.NewRequest(method, path, nil)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if id != "" {
		req.Header.Set(reqid.Header, id)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	var body map[string]any
	if err := json.Unmarshal(rec.Body.Bytes(), &body); err != nil {
		t.Fatalf("%s %s: body %q: %v", method, path, rec.Body.String(), err)
	}
	return rec.Result(), body
}

func TestHealthAndReadiness(t *testing.T) {
	var reason atomic.Value
	reason.Store("")
	ready := func() error {
		if r := reason.Load().(string); r != "" {
			return errors.New(r)
		}
		return nil
	}
	h := testHandler(ready, slog.New(slog.DiscardHandler))
	tests := []struct {
		name, reason string
		path         string
		status       int
		key, want    string
	}{
		{"healthz", "", "/healthz", 200, "status", "ok"},
		{"readyz ready", "", "/readyz", 200, "status", "ready"},
		{"readyz store down", "store: not writable", "/readyz", 503, "error", "store: not writable"},
		{"healthz while unready", "store: not writable", "/healthz", 200, "status", "ok"},
		{"readyz back", "", "/readyz", 200, "status", "ready"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			reason.Store(tt.reason)
			resp, body := do(t, h, "GET", tt.path, "", "")
			if resp.StatusCode != tt.status || body[tt.key] != tt.want {
				t.Fatalf("%s: %d %v, want %d %s=%q", tt.path, resp.StatusCode, body, tt.status, tt.key, tt.want)
			}
		})
	}
}

func TestRequestID(t *testing.T) {
	var logs bytes.Buffer
	log := slog.New(reqid.LogHandler{Handler: slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug})})
	h := testHandler(nil, log)
	tests := []struct {
		name, method, path, token, sent string
		status                          int
		route                           string
	}{
		{"accepted, id kept", "GET", "/v1/readings", "secret-token-1", "client-id-1", 202, "GET /v1/readings"},
		{"unauthenticated, id made", "GET", "/v1/readings", "wrong-token-9", "", 401, "GET /v1/readings"},
		{"unknown endpoint, bad id replaced", "GET", "/nope/secret-token-1", "", "bad id", 404, "/"},
		{"handler error", "POST", "/v1/audit", "secret-token-1", "client-id-2", 500, "POST /v1/audit"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			logs.Reset()
			resp, body := do(t, h, tt.method, tt.path, tt.token, tt.sent)
			id := resp.Header.Get(reqid.Header)
			if resp.StatusCode != tt.status || !reqid.Valid(id) {
				t.Fatalf("status %d, id %q", resp.StatusCode, id)
			}
			if reqid.Valid(tt.sent) && id != tt.sent {
				t.Fatalf("id %q, sent %q", id, tt.sent)
			}
			if tt.status >= 400 && body["request_id"] != id {
				t.Fatalf("error body %v lacks request_id %q", body, id)
			}
			if tt.status < 400 && body["request_id"] != nil {
				t.Fatalf("success body %v has a request_id", body)
			}
			lines := strings.Split(strings.TrimSpace(logs.String()), "\n")
			if len(lines) == 0 || lines[0] == "" {
				t.Fatal("nothing logged")
			}
			for _, l := range lines {
				if !strings.Contains(l, `"request_id":"`+id+`"`) {
					t.Errorf("log line without the request id %s: %s", id, l)
				}
				if strings.Contains(l, `"msg":"http request"`) && !strings.Contains(l, `"route":"`+tt.route+`"`) {
					t.Errorf("access log line without the route %q: %s", tt.route, l)
				}
				if strings.Contains(l, "secret-token-1") || strings.Contains(l, "wrong-token-9") {
					t.Errorf("log line with a token: %s", l)
				}
			}
		})
	}
}
