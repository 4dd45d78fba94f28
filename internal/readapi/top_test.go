package readapi_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/hotparts"
	"github.com/sluicehq/sluice/internal/model"
	"github.com/sluicehq/sluice/internal/readapi"
	"github.com/sluicehq/sluice/internal/server"
	"github.com/sluicehq/sluice/internal/store"
	"github.com/sluicehq/sluice/internal/store/pebblestore"
	"github.com/sluicehq/sluice/internal/wire"
)

// topServer serves GET /v1/partitions/top over a store holding, for tenant
// acme on 2026-11-22, 50 devices with partitions of 1..50 (×3 for two
// devices' second partitions) rows, one entry still ahead, and neighbours
// of another tenant and day.
func topServer(t *testing.T, hottest readapi.HottestFunc) (*httptest.Server, model.Day) {
	t.Helper()
	st, err := pebblestore.Open(t.TempDir(), pebblestore.Options{}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	d, _ := model.ParseDay("2026-11-22")
	var b store.Batch
	for i := 1; i <= 50; i++ {
		sd := model.SeriesDay{Kind: model.KindReadings, Tenant: "acme", Series: fmt.Sprintf("dev-%02d", i), Day: d}
		b.Catalogue = append(b.Catalogue, model.PartitionInfo{Key: sd.Partition(0), Rows: int64(i), Bytes: int64(1000 - i), MinTS: d.Start(), MaxTS: d.Start(), State: "single", Ahead: i == 49})
	}
	other := model.SeriesDay{Kind: model.KindReadings, Tenant: "other", Series: "dev-big", Day: d}
	b.Catalogue = append(b.Catalogue, model.PartitionInfo{Key: other.Partition(0), Rows: 1e6, Bytes: 1e9, State: "single"})
	next := model.SeriesDay{Kind: model.KindReadings, Tenant: "acme", Series: "dev-big", Day: d + 1}
	b.Catalogue = append(b.Catalogue, model.PartitionInfo{Key: next.Partition(0), Rows: 1e6, Bytes: 1e9, State: "single"})
	if err := st.Commit(context.Background(), &b); err != nil {
		t.Fatal(err)
	}
	now := time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC)
	opts := []readapi.Option{}
	if hottest != nil {
		opts = append(opts, readapi.WithHottest(hottest))
	}
	h := readapi.New(st, func() time.Time { return now }, slog.New(slog.DiscardHandler), opts...)
	srv := httptest.NewServer(server.Handler([]server.Token{{Token: "read-token", Tenant: "acme"}}, server.Routes{
		Extra: map[string]http.HandlerFunc{"GET /v1/partitions/top": h.TopPartitions},
	}))
	t.Cleanup(srv.Close)
	return srv, d
}

func getTop(t *testing.T, srv *httptest.Server, query string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, srv.URL+"/v1/partitions/top?"+query, nil)
	req.Header.Set("Authorization", "Bearer read-token")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

func TestTopPartitions(t *testing.T) {
	srv, d := topServer(t, func(tenant string, kind model.Kind, day model.Day, n int) []hotparts.Rate {
		sd := model.SeriesDay{Kind: kind, Tenant: tenant, Series: "dev-07", Day: day}
		return []hotparts.Rate{{Key: sd.Partition(0), RowsPerSecond: 12.5}}[:min(n, 1)]
	})
	tests := []struct {
		query     string
		series    []string
		unsettled bool
	}{
		{"day=2026-11-22&limit=3", []string{"dev-50", "dev-49", "dev-48"}, true},
		{"day=2026-11-22&by=rows&limit=1", []string{"dev-50"}, false},
		{"day=2026-11-22&by=bytes&limit=2", []string{"dev-01", "dev-02"}, false},
		{"day=2026-11-22&by=rate", []string{"dev-07"}, false},
		{"day=2026-11-22&kind=audit", nil, false},
		{"day=2026-11-21", nil, false},
		{"limit=2", []string{"dev-50", "dev-49"}, true}, // today, by the handler's clock
	}
	for _, tc := range tests {
		t.Run(tc.query, func(t *testing.T) {
			status, body := getTop(t, srv, tc.query)
			if status != 200 {
				t.Fatalf("got %d %s", status, body)
			}
			var page wire.TopPartitionsPage
			if err := json.Unmarshal([]byte(body), &page); err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, p := range page.Partitions {
				got = append(got, p.Series)
			}
			if fmt.Sprint(got) != fmt.Sprint(tc.series) || page.Unsettled != tc.unsettled {
				t.Errorf("ranked %v (unsettled %v), want %v (%v): %s", got, page.Unsettled, tc.series, tc.unsettled, body)
			}
		})
	}
	// by=rate carries the catalogue entry and the rate.
	_, body := getTop(t, srv, "day=2026-11-22&by=rate")
	if !strings.Contains(body, `"rows":7`) || !strings.Contains(body, `"rows_per_second":12.5`) || !strings.Contains(body, `"day":"`+d.String()+`"`) {
		t.Errorf("by=rate: %s", body)
	}
}

func TestTopPartitionsParameters(t *testing.T) {
	srv, _ := topServer(t, nil)
	tests := []struct {
		query string
		want  string
	}{
		{"by=size", "parameter by: must be rows, bytes or rate"},
		{"by=rate", "parameter by: rate is measured by a running gateway"},
		{"limit=0", "parameter limit: must be 1..100"},
		{"limit=101", "parameter limit: must be 1..100"},
		{"limit=ten", "parameter limit"},
		{"day=2026-13-01", "parameter day"},
		{"day=" + strings.Repeat("9", 80), "parameter day"},
		{"kind=metrics", "parameter kind"},
	}
	for _, tc := range tests {
		t.Run(tc.query, func(t *testing.T) {
			status, body := getTop(t, srv, tc.query)
			if status != 400 || !strings.Contains(body, tc.want) {
				t.Errorf("got %d %s, want 400 containing %q", status, body, tc.want)
			}
		})
	}
}

// A ranked entry that is a claim is settled (for its series-day only) and
// listed as it then stands; one that cannot be settled stays marked.
func TestTopPartitionsSettlesRanked(t *testing.T) {
	st, err := pebblestore.Open(t.TempDir(), pebblestore.Options{}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	d, _ := model.ParseDay("2026-11-22")
	sd := model.SeriesDay{Kind: model.KindReadings, Tenant: "acme", Series: "dev-1", Day: d}
	claim := model.PartitionInfo{Key: sd.Partition(0), Rows: 146, Bytes: 4000, MinTS: d.Start(), MaxTS: d.Start(), State: "single", Ahead: true}
	if err := st.Commit(context.Background(), &store.Batch{Catalogue: []model.PartitionInfo{claim}, Version: 1}); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name      string
		settle    func(ctx context.Context, sds ...model.SeriesDay) error
		want      string
		unsettled bool
	}{
		{"cannot settle", func(context.Context, ...model.SeriesDay) error { return errors.New("stopping") }, `"rows":146`, true},
		{"settled", func(ctx context.Context, sds ...model.SeriesDay) error {
			if len(sds) != 1 || sds[0] != sd {
				return fmt.Errorf("asked to settle %v, want only %v", sds, sd)
			}
			exact := claim
			exact.Rows, exact.Ahead = 100, false
			return st.Commit(ctx, &store.Batch{Catalogue: []model.PartitionInfo{exact}, Version: 2})
		}, `"rows":100`, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := readapi.New(st, time.Now, slog.New(slog.DiscardHandler), readapi.WithSettle(tc.settle))
			srv := httptest.NewServer(server.Handler([]server.Token{{Token: "read-token", Tenant: "acme"}}, server.Routes{
				Extra: map[string]http.HandlerFunc{"GET /v1/partitions/top": h.TopPartitions},
			}))
			defer srv.Close()
			status, body := getTop(t, srv, "day=2026-11-22")
			if status != 200 || !strings.Contains(body, tc.want) || strings.Contains(body, `"unsettled":true`) != tc.unsettled {
				t.Errorf("got %d %s, want %s, unsettled %v", status, body, tc.want, tc.unsettled)
			}
		})
	}
}

// A claim left by a gateway that is not the one answering is listed with
// the rows its partition holds when WithRecount is set, as a claim
// otherwise.
func TestPartitionsRecountsClaims(t *testing.T) {
	st, err := pebblestore.Open(t.TempDir(), pebblestore.Options{}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	d, _ := model.ParseDay("2026-11-22")
	pk := model.SeriesDay{Kind: model.KindReadings, Tenant: "acme", Series: "dev-1", Day: d}.Partition(1<<24 | 2<<16 | 1)
	var rows []model.ReadingRow
	for i := range 10 {
		rows = append(rows, model.ReadingRow{TS: d.Start() + int64(i), Metric: "a"})
	}
	claim := model.PartitionInfo{Key: pk, Rows: 60, Bytes: 6000, MinTS: d.Start() - 1, MaxTS: d.Start() + 1000, State: "split", Ahead: true}
	if err := st.Commit(context.Background(), &store.Batch{Partitions: []store.PartitionWrite{{Key: pk, Readings: rows}}, Catalogue: []model.PartitionInfo{claim}}); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		opts []readapi.Option
		want []string
	}{
		{"claims listed as such", nil, []string{`"rows":60`, `"ahead":true`, `"unsettled":true`}},
		{"claims counted", []readapi.Option{readapi.WithRecount(1000)}, []string{`"rows":10,"bytes":180`, `"min_ts":"2026-11-22T00:00:00.000Z","max_ts":"2026-11-22T00:00:00.009Z"}]}`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := readapi.New(st, time.Now, slog.New(slog.DiscardHandler), tc.opts...)
			srv := httptest.NewServer(server.Handler([]server.Token{{Token: "read-token", Tenant: "acme"}}, server.Routes{GetPartitions: h.Partitions}))
			defer srv.Close()
			req, _ := http.NewRequest(http.MethodGet, srv.URL+"/v1/partitions?device=dev-1&day=2026-11-22", nil)
			req.Header.Set("Authorization", "Bearer read-token")
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			body, _ := io.ReadAll(resp.Body)
			for _, w := range tc.want {
				if !strings.Contains(string(body), w) {
					t.Errorf("got %s, want it to contain %s", body, w)
				}
			}
		})
	}
}

// The ranking asks the gateway to settle only the claims of its own writer
// slot, and at most a few series-days per call: each costs the sink's
// flusher a catalogue read, and other gateways' claims are theirs to
// settle. The others are listed as stored, marked ahead.
func TestTopPartitionsSettlesOwnClaimsOnly(t *testing.T) {
	st, err := pebblestore.Open(t.TempDir(), pebblestore.Options{}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	d, _ := model.ParseDay("2026-11-22")
	const own, others = 30, 30 // ranked claims of writer 1 (this gateway) and of writer 2
	var b store.Batch
	for i := range own + others {
		writer := uint32(1)
		if i%2 == 1 {
			writer = 2
		}
		sd := model.SeriesDay{Kind: model.KindReadings, Tenant: "acme", Series: fmt.Sprintf("dev-%02d", i), Day: d}
		b.Catalogue = append(b.Catalogue, model.PartitionInfo{Key: sd.Partition(writer << 16), Rows: int64(1000 - i), Bytes: 4000, MinTS: d.Start(), MaxTS: d.Start(), State: "single", Ahead: true})
	}
	if err := st.Commit(context.Background(), &b); err != nil {
		t.Fatal(err)
	}
	var asked []model.SeriesDay
	settle := func(_ context.Context, sds ...model.SeriesDay) error {
		asked = append(asked, sds...)
		return nil
	}
	reconciles := func(sub uint32) bool { return sub>>16 == 1 }
	h := readapi.New(st, time.Now, slog.New(slog.DiscardHandler), readapi.WithSettle(settle), readapi.WithReconciles(reconciles))
	srv := httptest.NewServer(server.Handler([]server.Token{{Token: "read-token", Tenant: "acme"}}, server.Routes{
		Extra: map[string]http.HandlerFunc{"GET /v1/partitions/top": h.TopPartitions},
	}))
	defer srv.Close()
	status, body := getTop(t, srv, "day=2026-11-22&limit=100")
	if status != 200 {
		t.Fatalf("got %d %s", status, body)
	}
	if len(asked) == 0 || len(asked) > 10 {
		t.Errorf("asked to settle %d series-days for one ranking, want 1 to 10", len(asked))
	}
	for _, sd := range asked {
		var i int
		if _, err := fmt.Sscanf(sd.Series, "dev-%d", &i); err != nil || i%2 != 0 {
			t.Errorf("asked to settle %v, a series-day of another gateway's writer slot", sd)
		}
	}
	if n := strings.Count(body, `"ahead":true`); n != own+others {
		t.Errorf("%d entries listed ahead, want all %d (the settle wrote nothing)", n, own+others)
	}
}
