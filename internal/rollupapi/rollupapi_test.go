package rollupapi

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/sluicehq/sluice/internal/httpx"
	"github.com/sluicehq/sluice/internal/model"
	"github.com/sluicehq/sluice/internal/outbox"
	"github.com/sluicehq/sluice/internal/rollupstore"
	"github.com/sluicehq/sluice/internal/store"
	"github.com/sluicehq/sluice/internal/store/pebblestore"
)

// The dirty marks of a tenant's day go once every device of that tenant
// was rebuilt over the whole day: not for a partial day, not for a rebuild
// of one device, and never another tenant's.
func TestRebuildClearsDirtyDays(t *testing.T) {
	ctx := context.Background()
	quiet := slog.New(slog.DiscardHandler)
	dir := t.TempDir()
	raw, err := pebblestore.Open(filepath.Join(dir, "raw"), pebblestore.Options{}, quiet)
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	dst, err := rollupstore.Open(filepath.Join(dir, "rollups"), quiet)
	if err != nil {
		t.Fatal(err)
	}
	defer dst.Close()
	ob, err := outbox.Open(filepath.Join(dir, "outbox"), 1<<20, quiet)
	if err != nil {
		t.Fatal(err)
	}
	defer ob.Close()

	now := time.Now().UTC()
	d1 := model.DayOf(now.Add(-72 * time.Hour).UnixMilli())
	d2, d3 := d1+1, d1+2
	for _, tenant := range []string{"acme", "bulk"} {
		pk := model.SeriesDay{Kind: model.KindReadings, Tenant: tenant, Series: "d", Day: d1}.Partition(0)
		ts := d1.Start() + 1000
		if err := raw.Commit(ctx, &store.Batch{
			Partitions: []store.PartitionWrite{{Key: pk, Readings: []model.ReadingRow{{TS: ts, Metric: "x", Value: 1}}}},
			Catalogue:  []model.PartitionInfo{{Key: pk, Rows: 1, Bytes: 30, MinTS: ts, MaxTS: ts, State: "single"}},
			Version:    1,
		}); err != nil {
			t.Fatal(err)
		}
	}
	if err := ob.MarkDirty([]outbox.DirtyDay{{Tenant: "acme", Day: d1}, {Tenant: "acme", Day: d2}, {Tenant: "acme", Day: d3}, {Tenant: "bulk", Day: d1}}); err != nil {
		t.Fatal(err)
	}

	h := New(raw, dst, OutboxStatus("embedded", ob, quiet), time.Now, quiet)
	h.ClearOnRebuild(ob)
	call := func(method, path string, q url.Values) *httptest.ResponseRecorder {
		req := httptest.NewRequest(method, path+"?"+q.Encode(), nil)
		req = req.WithContext(httpx.WithTenant(req.Context(), "acme"))
		rec := httptest.NewRecorder()
		h.Routes()[method+" "+path](rec, req)
		if rec.Code != http.StatusOK {
			t.Fatalf("%s %s: %d %s", method, path, rec.Code, rec.Body)
		}
		return rec
	}
	status := func() []string {
		var st StatusJSON
		if err := json.Unmarshal(call(http.MethodGet, "/v1/rollups/status", nil).Body.Bytes(), &st); err != nil {
			t.Fatal(err)
		}
		return st.DirtyDays
	}
	rebuild := func(from, to int64, device string) {
		q := url.Values{"from": {time.UnixMilli(from).UTC().Format(time.RFC3339)}, "to": {time.UnixMilli(to).UTC().Format(time.RFC3339)}}
		if device != "" {
			q.Set("device", device)
		}
		body := call(http.MethodPost, "/v1/rollups/rebuild", q).Body.String()
		if !slices.ContainsFunc(strings.Split(strings.TrimSpace(body), "\n"), func(l string) bool {
			var pl ProgressLine
			return json.Unmarshal([]byte(l), &pl) == nil && pl.Result != nil
		}) {
			t.Fatalf("rebuild answered no result: %s", body)
		}
	}
	days := func(ds ...model.Day) []string {
		var out []string
		for _, d := range ds {
			out = append(out, d.String())
		}
		return out
	}

	if diff := cmp.Diff(days(d1, d2, d3), status()); diff != "" {
		t.Fatalf("acme's dirty days before any rebuild (-want +got):\n%s", diff)
	}
	rebuild(d1.Start(), d2.Start(), "d") // one device: nothing cleared
	rebuild(d2.Start()+time.Hour.Milliseconds(), d3.Start(), "")
	if diff := cmp.Diff(days(d1, d2, d3), status()); diff != "" {
		t.Fatalf("dirty days after a one-device rebuild and a partial day (-want +got):\n%s", diff)
	}
	rebuild(d1.Start(), d3.Start(), "") // every device, d1 and d2 whole
	if diff := cmp.Diff(days(d3), status()); diff != "" {
		t.Errorf("acme's dirty days after rebuilding d1 and d2 (-want +got):\n%s", diff)
	}
	marks, err := ob.Dirty()
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]outbox.DirtyDay{{Tenant: "bulk", Day: d1}, {Tenant: "acme", Day: d3}}, marks); diff != "" {
		t.Errorf("marks left (-want +got): another tenant's must stay\n%s", diff)
	}
}
