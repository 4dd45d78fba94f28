package server

import (
	"net/http"
	"strings"

	"github.com/sluicehq/sluice/internal/httpx"
)

// routeInflux adds the InfluxDB-compatible endpoints, when configured:
// POST /write (1.x) and POST /api/v2/write (2.x), each behind the token
// schemes its clients use, POST /query for the CREATE DATABASE that 1.x
// writers send first, and the unauthenticated GET /ping and GET /health
// that Influx clients may probe.
func routeInflux(mux *http.ServeMux, tokens []Token, rt Routes) {
	if rt.InfluxV1 == nil && rt.InfluxV2 == nil {
		return
	}
	if rt.InfluxV1 != nil {
		mux.Handle("POST /write", authenticateInflux(tokens, false, rt.InfluxV1))
		mux.Handle("POST /query", authenticateInflux(tokens, false, http.HandlerFunc(createDatabase)))
	}
	if rt.InfluxV2 != nil {
		mux.Handle("POST /api/v2/write", authenticateInflux(tokens, true, rt.InfluxV2))
	}
	// InfluxDB answers /ping with 204 and its version; 1.x clients read
	// the header to tell that a server is there.
	ping := func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("X-Influxdb-Version", "sluice")
		w.WriteHeader(http.StatusNoContent)
	}
	mux.HandleFunc("GET /ping", ping)
	mux.HandleFunc("HEAD /ping", ping)
	mux.HandleFunc("GET /health", func(w http.ResponseWriter, _ *http.Request) {
		type health struct {
			Name    string `json:"name"`
			Message string `json:"message"`
			Status  string `json:"status"`
		}
		if rt.Ready != nil {
			if err := rt.Ready(); err != nil {
				httpx.JSON(w, http.StatusServiceUnavailable, health{"sluice", err.Error(), "fail"})
				return
			}
		}
		httpx.JSON(w, http.StatusOK, health{"sluice", "ready for writes", "pass"})
	})
}

// authenticateInflux resolves the token of an InfluxDB write to a tenant.
// Both APIs take "Authorization: Token <token>" (and Bearer, as the rest
// of Sluice). The 1.x API also takes the token as the password: of Basic
// authentication, or in the p query parameter (u, the user name, is
// ignored), as InfluxDB 1.x clients send it.
func authenticateInflux(tokens []Token, v2 bool, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tok, how := influxToken(r, v2)
		if tok == "" {
			w.Header().Set("WWW-Authenticate", `Token realm="sluice"`)
			msg := "missing token: send Authorization: Token <token>"
			if !v2 {
				msg += ", Basic authentication with the token as password, or the p query parameter"
			}
			httpx.InfluxError(w, v2, http.StatusUnauthorized, 0, msg)
			return
		}
		tenant := tenantOf(tokens, tok)
		if tenant == "" {
			w.Header().Set("WWW-Authenticate", `Token realm="sluice", error="invalid_token"`)
			httpx.InfluxError(w, v2, http.StatusUnauthorized, 0, "invalid token ("+how+")")
			return
		}
		next.ServeHTTP(w, r.WithContext(httpx.WithTenant(r.Context(), tenant)))
	})
}

// influxToken returns the token of r and how it was sent, or "".
func influxToken(r *http.Request, v2 bool) (tok, how string) {
	if h := r.Header.Get("Authorization"); h != "" {
		scheme, rest, _ := strings.Cut(h, " ")
		switch {
		case strings.EqualFold(scheme, "Token"), strings.EqualFold(scheme, "Bearer"):
			return strings.TrimSpace(rest), "Authorization: " + scheme
		case !v2 && strings.EqualFold(scheme, "Basic"):
			if _, p, ok := r.BasicAuth(); ok {
				return p, "Basic authentication password"
			}
		}
		return "", ""
	}
	if !v2 {
		if p := r.URL.Query().Get("p"); p != "" {
			return p, "p query parameter"
		}
	}
	return "", ""
}

// maxQueryBytes bounds the body of POST /query (a CREATE DATABASE
// statement is a few dozen bytes).
const maxQueryBytes = 64 << 10

// createDatabase answers InfluxDB 1.x's POST /query for CREATE DATABASE,
// which Telegraf's outputs.influxdb and 1.x clients send before writing,
// with the success InfluxDB gives, and does nothing: a token's tenant is
// where its writes go, and db is not used. Any other statement is
// refused: Sluice's read path is its own API and the query tool.
func createDatabase(w http.ResponseWriter, r *http.Request) {
	r.Body = http.MaxBytesReader(w, r.Body, maxQueryBytes)
	if err := r.ParseForm(); err != nil {
		httpx.InfluxError(w, false, http.StatusBadRequest, 0, "read the query: "+err.Error())
		return
	}
	q := strings.TrimSpace(r.Form.Get("q"))
	if fields := strings.Fields(q); len(fields) >= 3 && strings.EqualFold(fields[0], "CREATE") && strings.EqualFold(fields[1], "DATABASE") &&
		!strings.Contains(q, ";") {
		httpx.JSON(w, http.StatusOK, map[string]any{"results": []map[string]int{{"statement_id": 0}}})
		return
	}
	httpx.InfluxError(w, false, http.StatusBadRequest, 0,
		"sluice takes writes on this API and answers only CREATE DATABASE (a no-op) on /query; read data with the query tool or GET /v1/readings")
}
