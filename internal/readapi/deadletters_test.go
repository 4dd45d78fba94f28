package readapi_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/model"
	"github.com/sluicehq/sluice/internal/readapi"
	"github.com/sluicehq/sluice/internal/server"
	"github.com/sluicehq/sluice/internal/store"
	"github.com/sluicehq/sluice/internal/store/pebblestore"
)

// Dead letters are read back per tenant, in time order, paged by cursor,
// with binary payloads in base64.
func TestDeadLettersPaging(t *testing.T) {
	st, err := pebblestore.Open(t.TempDir(), pebblestore.Options{}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	now := time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC)
	var b store.Batch
	const n = 25
	for i := range n {
		ts := now.Add(-time.Duration(n-i) * time.Hour) // spans two days
		payload := []byte(fmt.Sprintf(`{"bad":%d`, i))
		if i == 3 {
			payload = []byte{0xff, 0x00, 0x01}
		}
		b.DeadLetters = append(b.DeadLetters,
			model.DeadLetter{Tenant: "acme", TS: ts.UnixMilli(), ID: fmt.Sprintf("m%03d", i), Source: "mqtt",
				Topic: "devices/d1/readings", Reason: "invalid_json", Error: "unexpected end", Payload: payload},
			model.DeadLetter{Tenant: "other", TS: ts.UnixMilli(), ID: "x", Source: "mqtt", Reason: "invalid_json", Error: "e"})
	}
	if err := st.Commit(context.Background(), &b); err != nil {
		t.Fatal(err)
	}
	h := readapi.New(nil, func() time.Time { return now }, slog.New(slog.DiscardHandler)).DeadLetters(st)
	srv := httptest.NewServer(server.Handler([]server.Token{{Token: "read-token", Tenant: "acme"}}, server.Routes{
		Extra: map[string]http.HandlerFunc{"GET /v1/deadletters": h},
	}))
	defer srv.Close()

	type page struct {
		DeadLetters []readapi.DeadLetter `json:"dead_letters"`
		NextCursor  string               `json:"next_cursor"`
	}
	var got []readapi.DeadLetter
	cursor := ""
	for range 10 {
		url := srv.URL + "/v1/deadletters?from=" + now.Add(-48*time.Hour).Format(time.RFC3339) + "&limit=10"
		if cursor != "" {
			url += "&cursor=" + cursor
		}
		req, _ := http.NewRequest(http.MethodGet, url, nil)
		req.Header.Set("Authorization", "Bearer read-token")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var p page
		err = json.NewDecoder(resp.Body).Decode(&p)
		resp.Body.Close()
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("status %d, decode %v", resp.StatusCode, err)
		}
		got = append(got, p.DeadLetters...)
		if cursor = p.NextCursor; cursor == "" {
			break
		}
	}
	if len(got) != n {
		t.Fatalf("got %d dead letters, want %d (tenant isolation or paging broken)", len(got), n)
	}
	for i, dl := range got {
		if dl.ID != fmt.Sprintf("m%03d", i) || dl.Reason != "invalid_json" || dl.Topic != "devices/d1/readings" {
			t.Fatalf("dead letter %d = %+v", i, dl)
		}
	}
	if got[3].Payload != "" || got[3].PayloadBase64 != "/wAB" {
		t.Errorf("binary payload = %q / %q, want base64 /wAB", got[3].Payload, got[3].PayloadBase64)
	}
	if got[4].Payload != `{"bad":4` {
		t.Errorf("text payload = %q", got[4].Payload)
	}
}
