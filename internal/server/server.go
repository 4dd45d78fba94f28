// Package server assembles the gateway's HTTP surface: bearer-token
// authentication that picks the tenant, the ingest and read endpoints,
// /metrics, /healthz and /readyz, and the InfluxDB-compatible write
// endpoints with the ways Influx clients send their token (influx.go).
package server

import (
	"crypto/subtle"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/sluicehq/sluice/internal/httpx"
	"github.com/sluicehq/sluice/internal/reqid"
)

// Token maps one bearer token to its tenant.
type Token struct {
	Token  string
	Tenant string
}

// Routes are the handlers the server exposes.
type Routes struct {
	PostReadings  http.HandlerFunc
	PostAudit     http.HandlerFunc
	GetReadings   http.HandlerFunc
	GetAudit      http.HandlerFunc
	GetPartitions http.HandlerFunc
	// InfluxV1 and InfluxV2, when set, serve POST /write and POST
	// /api/v2/write; GET /ping and GET /health are served with them.
	InfluxV1 http.HandlerFunc
	InfluxV2 http.HandlerFunc
	// Extra routes by pattern (e.g. "GET /v1/deadletters"), all authenticated.
	Extra   map[string]http.HandlerFunc
	Metrics http.Handler
	// Ready reports nil when the gateway accepts writes.
	Ready func() error
	// Log, when set, gets one line per request (debug; warn for a 5xx),
	// with its request id.
	Log *slog.Logger
}

// Handler returns the gateway's HTTP handler. Every request gets a request
// id (see package reqid): in the X-Request-Id response header, in error
// bodies and on the log lines written with the request's context.
func Handler(tokens []Token, rt Routes) http.Handler {
	return reqid.Middleware(accessLog(rt.Log, mux(tokens, rt)))
}

func mux(tokens []Token, rt Routes) http.Handler {
	mux := http.NewServeMux()
	auth := func(h http.HandlerFunc) http.Handler { return authenticate(tokens, h) }
	mux.Handle("POST /v1/readings", auth(rt.PostReadings))
	mux.Handle("POST /v1/audit", auth(rt.PostAudit))
	mux.Handle("GET /v1/readings", auth(rt.GetReadings))
	mux.Handle("GET /v1/audit", auth(rt.GetAudit))
	mux.Handle("GET /v1/partitions", auth(rt.GetPartitions))
	for pattern, h := range rt.Extra {
		mux.Handle(pattern, auth(h))
	}
	routeInflux(mux, tokens, rt)
	if rt.Metrics != nil {
		mux.Handle("GET /metrics", rt.Metrics)
	}
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		httpx.JSON(w, http.StatusOK, map[string]string{"status": "ok"})
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		if rt.Ready != nil {
			if err := rt.Ready(); err != nil {
				httpx.Error(w, http.StatusServiceUnavailable, err.Error())
				return
			}
		}
		httpx.JSON(w, http.StatusOK, map[string]string{"status": "ready"})
	})
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		httpx.Error(w, http.StatusNotFound, "no such endpoint: "+r.Method+" "+r.URL.Path)
	})
	return mux
}

// authenticate resolves the bearer token to a tenant, comparing against
// every configured token in constant time.
func authenticate(tokens []Token, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := r.Header.Get("Authorization")
		scheme, tok, ok := strings.Cut(h, " ")
		if !ok || !strings.EqualFold(scheme, "Bearer") || tok == "" {
			w.Header().Set("WWW-Authenticate", `Bearer realm="sluice"`)
			httpx.Error(w, http.StatusUnauthorized, "missing bearer token: send Authorization: Bearer <token>")
			return
		}
		tenant := tenantOf(tokens, tok)
		if tenant == "" {
			w.Header().Set("WWW-Authenticate", `Bearer realm="sluice", error="invalid_token"`)
			httpx.Error(w, http.StatusUnauthorized, "invalid bearer token")
			return
		}
		next.ServeHTTP(w, r.WithContext(httpx.WithTenant(r.Context(), tenant)))
	})
}

// tenantOf returns the tenant of tok, or "" if no token matches, comparing
// against every configured token in constant time.
func tenantOf(tokens []Token, tok string) string {
	tenant := ""
	for _, t := range tokens {
		if subtle.ConstantTimeCompare([]byte(t.Token), []byte(tok)) == 1 {
			tenant = t.Tenant
		}
	}
	return tenant
}

// statusWriter records the status of a response for the access log.
type statusWriter struct {
	http.ResponseWriter
	status int
}

func (s *statusWriter) WriteHeader(code int) {
	if s.status == 0 {
		s.status = code
	}
	s.ResponseWriter.WriteHeader(code)
}

func (s *statusWriter) Write(b []byte) (int, error) {
	if s.status == 0 {
		s.status = http.StatusOK
	}
	return s.ResponseWriter.Write(b)
}

// Unwrap lets http.ResponseController reach the connection.
func (s *statusWriter) Unwrap() http.ResponseWriter { return s.ResponseWriter }

// accessLog logs each request once it is answered: the route it matched
// (the mux's pattern, e.g. "GET /v1/readings"; never the path or the query
// string as sent, which a client may fill with anything, secrets included),
// status and duration; the request id comes from the context. Never a
// header: the bearer token stays out of the logs.
func accessLog(logger *slog.Logger, next http.Handler) http.Handler {
	if logger == nil {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		sw := &statusWriter{ResponseWriter: w}
		next.ServeHTTP(sw, r)
		level := slog.LevelDebug
		if sw.status >= 500 {
			level = slog.LevelWarn
		}
		logger.Log(r.Context(), level, "http request", "route", r.Pattern,
			"status", sw.status, "duration", time.Since(start).Round(time.Microsecond))
	})
}
