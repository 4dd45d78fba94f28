package readapi_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"log/slog"
	"math"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/cursor"
	"github.com/sluicehq/sluice/internal/model"
	"github.com/sluicehq/sluice/internal/readapi"
	"github.com/sluicehq/sluice/internal/server"
	"github.com/sluicehq/sluice/internal/store"
	"github.com/sluicehq/sluice/internal/store/pebblestore"
)

// get sends a GET as token and returns the status and the body.
func get(t *testing.T, base, token, path string) (int, map[string]any) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, base+path, nil)
	req.Header.Set("Authorization", "Bearer "+token)
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second) // a hostile cursor used to hang the read
	defer cancel()
	resp, err := http.DefaultClient.Do(req.WithContext(ctx))
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	defer resp.Body.Close()
	var body map[string]any
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	return resp.StatusCode, body
}

// Cursors are sealed: an edited one, another tenant's, one for another
// series or kind, or one made under another key is refused with 400
// naming the cursor, and one for a different range too.
func TestCursorsAreSealed(t *testing.T) {
	st, err := pebblestore.Open(t.TempDir(), pebblestore.Options{}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	now := time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC)
	base := now.Add(-time.Hour).UnixMilli()
	var b store.Batch
	for _, tenant := range []string{"acme", "other"} {
		pk := model.SeriesDay{Kind: model.KindReadings, Tenant: tenant, Series: "d", Day: model.DayOf(base)}.Partition(0)
		pa := model.SeriesDay{Kind: model.KindAudit, Tenant: tenant, Series: "d", Day: model.DayOf(base)}.Partition(0)
		pw := store.PartitionWrite{Key: pk}
		aw := store.PartitionWrite{Key: pa}
		for i := range 5 {
			pw.Readings = append(pw.Readings, model.ReadingRow{TS: base + int64(i), Metric: "v", Value: float64(i)})
			aw.Events = append(aw.Events, model.AuditEvent{EventID: fmt.Sprint("e", i), Stream: "d", TS: base + int64(i), Actor: "a", Action: "x", Resource: "r", Outcome: "ok"})
			b.DeadLetters = append(b.DeadLetters, model.DeadLetter{Tenant: tenant, TS: base + int64(i), ID: fmt.Sprint("m", i), Source: "mqtt", Reason: "invalid_json", Error: "e"})
		}
		b.Partitions = append(b.Partitions, pw, aw)
		b.Catalogue = append(b.Catalogue,
			model.PartitionInfo{Key: pk, Rows: 5, Bytes: 100, MinTS: base, MaxTS: base + 4, State: "single"},
			model.PartitionInfo{Key: pa, Rows: 5, Bytes: 100, MinTS: base, MaxTS: base + 4, State: "single"})
	}
	b.Version = 1
	if err := st.Commit(t.Context(), &b); err != nil {
		t.Fatal(err)
	}
	clock := func() time.Time { return now }
	serve := func(key string) string {
		k, err := cursor.New([]byte(strings.Repeat(key, cursor.KeySize)))
		if err != nil {
			t.Fatal(err)
		}
		quiet := slog.New(slog.DiscardHandler)
		opt := readapi.WithCursorKeys(k)
		h := readapi.New(st, clock, quiet, opt)
		srv := httptest.NewServer(server.Handler([]server.Token{{Token: "acme-token", Tenant: "acme"}, {Token: "other-token", Tenant: "other"}}, server.Routes{
			GetReadings: h.Readings, GetAudit: h.Audit,
			Extra: map[string]http.HandlerFunc{"GET /v1/deadletters": readapi.New(nil, clock, quiet, opt).DeadLetters(st)},
		}))
		t.Cleanup(srv.Close)
		return srv.URL
	}
	srv, otherKey := serve("k"), serve("q")

	for _, ep := range []struct{ path, list string }{
		{"/v1/readings?device=d&limit=2", "readings"},
		{"/v1/audit?stream=d&limit=2", "events"},
		{"/v1/deadletters?limit=2", "dead_letters"},
	} {
		t.Run(ep.list, func(t *testing.T) {
			// Paging follows the cursor, with or without repeating the range.
			status, body := get(t, srv, "acme-token", ep.path)
			c, _ := body["next_cursor"].(string)
			if status != 200 || c == "" {
				t.Fatalf("first page: %d %v", status, body)
			}
			seen := len(body[ep.list].([]any))
			for next := c; next != ""; {
				status, body = get(t, srv, "acme-token", ep.path+"&cursor="+next)
				if status != 200 {
					t.Fatalf("next page: %d %v", status, body)
				}
				seen += len(body[ep.list].([]any))
				next, _ = body["next_cursor"].(string)
			}
			if seen != 5 {
				t.Errorf("paged through %d rows, want 5", seen)
			}
			from := url.QueryEscape(now.Add(-24*time.Hour + time.Millisecond).Format(time.RFC3339Nano))
			to := fmt.Sprint(now.UnixMilli() + 1)
			if status, body := get(t, srv, "acme-token", ep.path+"&from="+from+"&to="+to+"&cursor="+c); status != 200 {
				t.Errorf("cursor with its own range: %d %v", status, body)
			}

			raw, _ := base64.RawURLEncoding.DecodeString(c)
			edited := func(i int) string {
				e := append([]byte(nil), raw...)
				e[i] ^= 0x10
				return base64.RawURLEncoding.EncodeToString(e)
			}
			other := strings.Replace(strings.Replace(ep.path, "device=d", "device=e", 1), "stream=d", "stream=e", 1)
			refused := []struct{ name, base, token, path, want string }{
				{"edited range", srv, "acme-token", ep.path + "&cursor=" + edited(2), "parameter cursor: invalid cursor: not issued by this gateway"},
				{"edited position", srv, "acme-token", ep.path + "&cursor=" + edited(len(raw)-40), "parameter cursor: invalid cursor"},
				{"another tenant's", srv, "other-token", ep.path + "&cursor=" + c, "parameter cursor: invalid cursor: not issued by this gateway"},
				{"another key's", otherKey, "acme-token", ep.path + "&cursor=" + c, "parameter cursor: invalid cursor"},
				{"another range", srv, "acme-token", ep.path + "&from=0&to=1000&cursor=" + c, "parameter cursor: it continues a read of"},
				{"garbage", srv, "acme-token", ep.path + "&cursor=%21%21", "parameter cursor: invalid cursor: not base64url"},
				{"huge", srv, "acme-token", ep.path + "&cursor=" + strings.Repeat("A", cursor.MaxLen+1), "parameter cursor: invalid cursor: longer than"},
			}
			if other != ep.path {
				refused = append(refused, struct{ name, base, token, path, want string }{"another series'", srv, "acme-token", other + "&cursor=" + c, "parameter cursor: invalid cursor"})
			}
			for _, tc := range refused {
				status, body := get(t, tc.base, tc.token, tc.path)
				if msg, _ := body["error"].(string); status != 400 || !strings.HasPrefix(msg, tc.want) {
					t.Errorf("%s: got %d %v, want 400 %q", tc.name, status, body, tc.want)
				}
			}
		})
	}

	// A cursor in the old unsealed form, its position 2^31 days ahead (it
	// used to hang the read), and one for another kind are refused.
	legacy := base64.RawURLEncoding.EncodeToString(fmt.Appendf(nil, `{"v":1,"k":"readings","s":"d","t":%d,"e":true}`, int64(math.MaxInt32+1)*model.MillisPerDay))
	deadLegacy := base64.RawURLEncoding.EncodeToString([]byte("9223372036854775807.x"))
	_, rb := get(t, srv, "acme-token", "/v1/readings?device=d&limit=2")
	for _, path := range []string{
		"/v1/readings?device=d&cursor=" + legacy,
		"/v1/deadletters?cursor=" + deadLegacy,
		"/v1/audit?stream=d&cursor=" + rb["next_cursor"].(string),
		"/v1/deadletters?cursor=" + rb["next_cursor"].(string),
	} {
		if status, body := get(t, srv, "acme-token", path); status != 400 || !strings.HasPrefix(body["error"].(string), "parameter cursor: ") {
			t.Errorf("%s: got %d %v, want 400 parameter cursor", path, status, body)
		}
	}
}
