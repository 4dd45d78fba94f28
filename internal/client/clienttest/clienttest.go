// Package clienttest serves a fake of Sluice's read API for tests: GET
// /v1/readings, /v1/audit and /v1/partitions with bearer-token tenants, the
// documented parameters, defaults, limits, cursors and error bodies, over
// data held in memory.
//
// It writes its JSON independently of internal/render and internal/client,
// so tests that pass against it check both against the contract rather than
// against each other.
package clienttest

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/model"
	"github.com/sluicehq/sluice/internal/wire"
)

// Tenant is the data one token can read. Readings and Events must be sorted
// by timestamp (events by timestamp, then event id).
type Tenant struct {
	Readings   []model.Reading
	Events     []model.AuditEvent
	Partitions []model.PartitionInfo
}

// Config sets up a Server.
type Config struct {
	// Tenants maps bearer tokens to data.
	Tenants map[string]Tenant
	// Now is the server's clock, for the default range; nil means time.Now.
	Now func() time.Time
	// Hook, if set, sees every request first; if it returns true it has
	// answered and the contract handling is skipped. Tests use it to inject
	// errors such as 503 busy.
	Hook func(w http.ResponseWriter, r *http.Request) bool
}

// Server is a running fake read API.
type Server struct {
	URL string
	cfg Config

	mu       sync.Mutex
	requests []url.URL
}

// New starts a Server and stops it when the test ends.
func New(t testing.TB, cfg Config) *Server {
	t.Helper()
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	s := &Server{cfg: cfg}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/readings", s.auth(s.readings))
	mux.HandleFunc("GET /v1/audit", s.auth(s.audit))
	mux.HandleFunc("GET /v1/partitions", s.auth(s.partitions))
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		s.requests = append(s.requests, *r.URL)
		s.mu.Unlock()
		if cfg.Hook != nil && cfg.Hook(w, r) {
			return
		}
		mux.ServeHTTP(w, r)
	}))
	t.Cleanup(hs.Close)
	s.URL = hs.URL
	return s
}

// Requests returns the URLs (path and query) of the requests served so far.
func (s *Server) Requests() []url.URL {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]url.URL(nil), s.requests...)
}

// Error writes the read API's error body {"error": msg} with status.
func Error(w http.ResponseWriter, status int, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]string{"error": msg})
}

// Busy writes 503 with Retry-After (in seconds) and an error body.
func Busy(w http.ResponseWriter, retryAfterSeconds int) {
	w.Header().Set("Retry-After", strconv.Itoa(retryAfterSeconds))
	Error(w, http.StatusServiceUnavailable, "busy, retry later")
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(v)
}

func (s *Server) auth(h func(http.ResponseWriter, *http.Request, Tenant)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		tok, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		t, known := s.cfg.Tenants[tok]
		if !ok || !known {
			Error(w, http.StatusUnauthorized, "invalid or missing bearer token")
			return
		}
		h(w, r, t)
	}
}

const timeFormat = "2006-01-02T15:04:05.000Z07:00"

func ts(ms int64) string { return time.UnixMilli(ms).UTC().Format(timeFormat) }

func parseTime(s string) (int64, error) {
	if ms, err := strconv.ParseInt(s, 10, 64); err == nil {
		return ms, nil
	}
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return 0, fmt.Errorf("%q is neither RFC 3339 nor epoch milliseconds", s)
	}
	return t.UnixMilli(), nil
}

// rangeQuery is the parsed series, range, limit and cursor offset.
type rangeQuery struct {
	series   string
	from, to int64
	limit    int
	offset   int
}

func (s *Server) parseRange(v url.Values, seriesParam string) (rangeQuery, error) {
	q := rangeQuery{series: v.Get(seriesParam), limit: 1000}
	if q.series == "" {
		return q, fmt.Errorf("parameter %s is required", seriesParam)
	}
	q.to = s.cfg.Now().UnixMilli() + 1
	if p := v.Get("to"); p != "" {
		t, err := parseTime(p)
		if err != nil {
			return q, fmt.Errorf("parameter to: %w", err)
		}
		q.to = t
	}
	q.from = q.to - model.MillisPerDay
	if p := v.Get("from"); p != "" {
		t, err := parseTime(p)
		if err != nil {
			return q, fmt.Errorf("parameter from: %w", err)
		}
		q.from = t
	}
	if q.to <= q.from {
		return q, fmt.Errorf("parameter to must be after from")
	}
	if p := v.Get("limit"); p != "" {
		n, err := strconv.Atoi(p)
		if err != nil || n < 1 || n > 10000 {
			return q, fmt.Errorf("parameter limit: must be 1..10000, got %q", p)
		}
		q.limit = n
	}
	if c := v.Get("cursor"); c != "" {
		off, err := decodeCursor(c, seriesParam+"="+q.series)
		if err != nil {
			return q, fmt.Errorf("parameter cursor: %w", err)
		}
		q.offset = off
	}
	return q, nil
}

// A cursor is the offset into the filtered rows, bound to the series.
func encodeCursor(series string, off int) string {
	return base64.RawURLEncoding.EncodeToString([]byte(series + "\x00" + strconv.Itoa(off)))
}

func decodeCursor(c, series string) (int, error) {
	b, err := base64.RawURLEncoding.DecodeString(c)
	if err != nil {
		return 0, fmt.Errorf("invalid cursor")
	}
	s, off, ok := strings.Cut(string(b), "\x00")
	n, err := strconv.Atoi(off)
	if !ok || err != nil || n < 0 {
		return 0, fmt.Errorf("invalid cursor")
	}
	if s != series {
		return 0, fmt.Errorf("invalid cursor: it belongs to another query")
	}
	return n, nil
}

// page cuts matches to q's page and returns the next cursor, if any.
func page[T any](matches []T, q rangeQuery, key string) ([]T, string) {
	start := min(q.offset, len(matches))
	end := min(start+q.limit, len(matches))
	next := ""
	if end < len(matches) {
		next = encodeCursor(key, end)
	}
	return matches[start:end], next
}

func (s *Server) readings(w http.ResponseWriter, r *http.Request, t Tenant) {
	q, err := s.parseRange(r.URL.Query(), "device")
	if err != nil {
		Error(w, http.StatusBadRequest, err.Error())
		return
	}
	var matches []model.Reading
	for _, rd := range t.Readings {
		if rd.DeviceID == q.series && rd.TS >= q.from && rd.TS < q.to {
			matches = append(matches, rd)
		}
	}
	rows, next := page(matches, q, "device="+q.series)
	out := map[string]any{}
	list := make([]map[string]any, len(rows))
	for i, rd := range rows {
		m := map[string]any{"device_id": rd.DeviceID, "ts": ts(rd.TS)}
		if rd.HasSeq {
			m["seq"] = rd.Seq
		}
		metrics := map[string]wire.Value{}
		for _, mt := range rd.Metrics {
			metrics[mt.Name] = wire.Value(mt)
		}
		m["metrics"] = metrics
		list[i] = m
	}
	out["readings"] = list
	if next != "" {
		out["next_cursor"] = next
	}
	writeJSON(w, out)
}

func (s *Server) audit(w http.ResponseWriter, r *http.Request, t Tenant) {
	q, err := s.parseRange(r.URL.Query(), "stream")
	if err != nil {
		Error(w, http.StatusBadRequest, err.Error())
		return
	}
	var matches []model.AuditEvent
	for _, e := range t.Events {
		if e.Stream == q.series && e.TS >= q.from && e.TS < q.to {
			matches = append(matches, e)
		}
	}
	rows, next := page(matches, q, "stream="+q.series)
	list := make([]map[string]any, len(rows))
	for i, e := range rows {
		m := map[string]any{"event_id": e.EventID, "stream": e.Stream, "ts": ts(e.TS), "action": e.Action}
		for k, v := range map[string]string{"actor": e.Actor, "resource": e.Resource, "outcome": e.Outcome} {
			if v != "" {
				m[k] = v
			}
		}
		if len(e.Attributes) > 0 {
			m["attributes"] = json.RawMessage(e.Attributes)
		}
		list[i] = m
	}
	out := map[string]any{"events": list}
	if next != "" {
		out["next_cursor"] = next
	}
	writeJSON(w, out)
}

func (s *Server) partitions(w http.ResponseWriter, r *http.Request, t Tenant) {
	v := r.URL.Query()
	kind, err := model.ParseKind(v.Get("kind"))
	if err != nil {
		Error(w, http.StatusBadRequest, "parameter kind: "+err.Error())
		return
	}
	series := v.Get("series")
	if series == "" {
		Error(w, http.StatusBadRequest, "parameter series is required")
		return
	}
	day, err := model.ParseDay(v.Get("day"))
	if err != nil {
		Error(w, http.StatusBadRequest, "parameter day: "+err.Error())
		return
	}
	list := []map[string]any{}
	for _, p := range t.Partitions {
		if p.Key.Kind != kind || p.Key.Series != series || p.Key.Day != day {
			continue
		}
		list = append(list, map[string]any{
			"kind": p.Key.Kind.String(), "series": p.Key.Series, "day": p.Key.Day.String(),
			"sub_bucket": p.Key.Sub, "state": p.State, "closed": p.Closed, "rows": p.Rows, "bytes": p.Bytes,
			"min_ts": ts(p.MinTS), "max_ts": ts(p.MaxTS),
		})
	}
	writeJSON(w, map[string]any{"partitions": list})
}
