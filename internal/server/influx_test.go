package server

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/internal/httpx"
)

func TestInfluxRoutes(t *testing.T) {
	tenantOK := func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Tenant", httpx.Tenant(r.Context()))
		w.WriteHeader(http.StatusNoContent)
	}
	ready := errors.New("store not open")
	var readyErr error
	h := Handler([]Token{{Token: "secret-token-1", Tenant: "acme"}}, Routes{
		InfluxV1: tenantOK, InfluxV2: tenantOK, Ready: func() error { return readyErr },
	})
	tests := []struct {
		name, method, path string
		header             map[string]string
		basic              bool
		status             int
		tenant             string
	}{
		{name: "v2 token", method: "POST", path: "/api/v2/write?bucket=b", header: map[string]string{"Authorization": "Token secret-token-1"}, status: 204, tenant: "acme"},
		{name: "v2 bearer", method: "POST", path: "/api/v2/write", header: map[string]string{"Authorization": "Bearer secret-token-1"}, status: 204, tenant: "acme"},
		{name: "v2 basic refused", method: "POST", path: "/api/v2/write", basic: true, status: 401},
		{name: "v2 p refused", method: "POST", path: "/api/v2/write?p=secret-token-1", status: 401},
		{name: "v1 p", method: "POST", path: "/write?db=x&u=me&p=secret-token-1", status: 204, tenant: "acme"},
		{name: "v1 basic", method: "POST", path: "/write?db=x", basic: true, status: 204, tenant: "acme"},
		{name: "v1 token", method: "POST", path: "/write", header: map[string]string{"Authorization": "Token secret-token-1"}, status: 204, tenant: "acme"},
		{name: "v1 wrong token", method: "POST", path: "/write", header: map[string]string{"Authorization": "Token nope"}, status: 401},
		{name: "v1 unknown scheme", method: "POST", path: "/write?p=secret-token-1", header: map[string]string{"Authorization": "Digest x"}, status: 401},
		{name: "ping", method: "GET", path: "/ping", status: 204},
		{name: "ping head", method: "HEAD", path: "/ping", status: 204},
		{name: "health", method: "GET", path: "/health", status: 200},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req := httptest.NewRequest(tt.method, tt.path, strings.NewReader("m v=1"))
			for k, v := range tt.header {
				req.Header.Set(k, v)
			}
			if tt.basic {
				req.SetBasicAuth("telegraf", "secret-token-1")
			}
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, req)
			if rec.Code != tt.status || rec.Header().Get("X-Tenant") != tt.tenant {
				t.Fatalf("%d tenant %q %s, want %d tenant %q", rec.Code, rec.Header().Get("X-Tenant"), rec.Body, tt.status, tt.tenant)
			}
			if tt.status == 401 {
				v2 := strings.HasPrefix(tt.path, "/api/v2/")
				if v2 && !strings.Contains(rec.Body.String(), `"code":"unauthorized"`) || !v2 && !strings.Contains(rec.Body.String(), `"error":`) {
					t.Errorf("401 body %s", rec.Body)
				}
			}
		})
	}
	readyErr = ready
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", "/health", nil))
	if rec.Code != http.StatusServiceUnavailable || !strings.Contains(rec.Body.String(), `"status":"fail"`) {
		t.Errorf("health while not ready: %d %s", rec.Code, rec.Body)
	}
	// Without the Influx routes, none of their paths is served.
	h = Handler(nil, Routes{})
	for _, p := range []string{"/ping", "/health"} {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest("GET", p, nil))
		if rec.Code != http.StatusNotFound {
			t.Errorf("GET %s without Influx routes: %d", p, rec.Code)
		}
	}
}

// Telegraf's outputs.influxdb and 1.x clients send CREATE DATABASE to
// /query before they write: it succeeds, as InfluxDB answers it, and does
// nothing; any other statement is refused.
func TestInfluxCreateDatabase(t *testing.T) {
	h := Handler([]Token{{Token: "secret-token-1", Tenant: "acme"}}, Routes{
		InfluxV1: func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusNoContent) },
	})
	tests := []struct {
		name, path, form string
		auth             bool
		status           int
		body             string
	}{
		{"form, as Telegraf sends it", "/query", `q=CREATE+DATABASE+"telegraf"`, true, 200, `{"results":[{"statement_id":0}]}`},
		{"query string", "/query?q=create%20database%20mydb", "", true, 200, `{"results":[{"statement_id":0}]}`},
		{"another statement", "/query", "q=SELECT+*+FROM+cpu", true, 400, `"error":"sluice takes writes`},
		{"two statements", "/query", "q=CREATE+DATABASE+a;DROP+DATABASE+b", true, 400, `"error":`},
		{"no statement", "/query", "", true, 400, `"error":`},
		{"no token", "/query", `q=CREATE+DATABASE+"telegraf"`, false, 401, `"error":`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req := httptest.NewRequest("POST", tt.path, strings.NewReader(tt.form))
			req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
			if tt.auth {
				req.SetBasicAuth("telegraf", "secret-token-1")
			}
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, req)
			if rec.Code != tt.status || !strings.Contains(rec.Body.String(), tt.body) {
				t.Errorf("%d %s, want %d with %s", rec.Code, rec.Body, tt.status, tt.body)
			}
		})
	}
}
