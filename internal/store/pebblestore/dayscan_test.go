package pebblestore

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/sluicehq/sluice/internal/model"
	"github.com/sluicehq/sluice/internal/reader"
	"github.com/sluicehq/sluice/internal/store"
)

// A day read in one pass gives every device with a key that day, in
// order, and for each device held in one partition exactly what the
// reader gives it; a device split over partitions (with readings in both,
// some written twice) or holding per-metric keys of an older store is
// handed over as not whole, for the reader. Devices of another tenant or
// day, and readings outside the range, are left out; a new iterator at
// each device changes nothing.
func TestEachSeriesReadingsMatchesReader(t *testing.T) {
	ctx := t.Context()
	s, err := Open(t.TempDir(), Options{}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	rng := rand.New(rand.NewPCG(7, 11))
	day := model.Day(20_400)
	metrics := []string{"a", "rpm", "state", "temp_c"}
	row := func(ts int64, m string) model.ReadingRow {
		r := model.ReadingRow{TS: ts, Metric: m}
		switch rng.IntN(4) {
		case 0:
			r.Type, r.Int = model.TypeInt, rng.Int64N(1000)-500
		case 1:
			r.Type, r.Str = model.TypeString, fmt.Sprint("s", rng.IntN(9))
		default:
			r.Value = rng.Float64() * 100
		}
		if rng.IntN(5) == 0 {
			r.Seq, r.HasSeq = rng.Int64N(1000), true
		}
		return r
	}
	write := func(tenant, device string, d model.Day, sub uint32, n int) {
		t.Helper()
		pk := model.SeriesDay{Kind: model.KindReadings, Tenant: tenant, Series: device, Day: d}.Partition(sub)
		var rows []model.ReadingRow
		for range n {
			ts := d.Start() + rng.Int64N(model.MillisPerDay)
			for _, m := range metrics[:1+rng.IntN(len(metrics))] {
				rows = append(rows, row(ts, m))
			}
		}
		if err := s.Commit(ctx, &store.Batch{
			Partitions: []store.PartitionWrite{{Key: pk, Readings: store.LastOfEachCell(rows)}},
			Catalogue:  []model.PartitionInfo{{Key: pk, Rows: int64(len(rows)), Bytes: 1 << 20, MinTS: d.Start(), MaxTS: d.End() - 1, State: "single"}},
			Version:    1,
		}); err != nil {
			t.Fatal(err)
		}
	}
	notWhole := map[string]bool{}
	var devices []string
	for i := range 40 {
		device := fmt.Sprintf("dev-%d", rng.IntN(1_000_000))
		if slices.Contains(devices, device) {
			continue
		}
		devices = append(devices, device)
		var sub uint32
		if i%8 == 3 { // one partition, another writer's single one: whole
			sub = 3 << 16
		}
		write("acme", device, day, sub, 1+rng.IntN(30))
		switch i % 8 {
		case 1: // split: a second partition, some readings written to both
			write("acme", device, day, 1<<24|1, 1+rng.IntN(10))
			notWhole[device] = true
		case 2: // a per-metric key of a store written before reading keys
			pk := model.SeriesDay{Kind: model.KindReadings, Tenant: "acme", Series: device, Day: day}.Partition(0)
			r := row(day.Start()+5, "legacy")
			if err := s.db.Set(append(appendTS(partitionPrefix(nil, pk), r.TS), r.Metric...), encodeReading(nil, r), nil); err != nil {
				t.Fatal(err)
			}
			notWhole[device] = true
		}
	}
	// Readings at the partial range's edges, in both of a split device's
	// partitions and in a whole one.
	from, to := day.Start()+3_600_000, day.Start()+9*3_600_000
	for _, device := range []string{"edge", "edge-split"} {
		for sub, ts := range map[uint32][]int64{0: {from - 1, from, to - 1, to}, 1<<24 | 1: {from, to - 1}} {
			if sub != 0 && device == "edge" {
				continue
			}
			pk := model.SeriesDay{Kind: model.KindReadings, Tenant: "acme", Series: device, Day: day}.Partition(sub)
			var rows []model.ReadingRow
			for _, at := range ts {
				rows = append(rows, row(at, "a"))
			}
			if err := s.Commit(ctx, &store.Batch{
				Partitions: []store.PartitionWrite{{Key: pk, Readings: rows}},
				Catalogue:  []model.PartitionInfo{{Key: pk, Rows: int64(len(rows)), Bytes: 1 << 20, MinTS: day.Start(), MaxTS: day.End() - 1, State: "single"}},
				Version:    1,
			}); err != nil {
				t.Fatal(err)
			}
		}
	}
	devices = append(devices, "edge", "edge-split")
	notWhole["edge-split"] = true
	write("acme", "dev-other-day", day+1, 0, 5)
	write("other", "dev-other-tenant", day, 0, 5)
	slices.Sort(devices)

	// A new iterator at every device, or one for the whole pass.
	defer func(d time.Duration) { dayScanReopen = d }(dayScanReopen)
	for _, reopen := range []time.Duration{0, time.Hour} {
		dayScanReopen = reopen
		eachRange(t, s, day, devices, notWhole)
	}

	// fn's error ends the scan and is returned as it is.
	stop := fmt.Errorf("enough")
	calls := 0
	err = s.EachSeriesReadings(ctx, "acme", day, store.Range{From: day.Start(), To: day.End()}, func(string, []model.Reading, bool) error {
		calls++
		return stop
	})
	if err != stop || calls != 1 {
		t.Errorf("after fn's error: %v, %d calls; want it returned after one", err, calls)
	}
}

// eachRange reads day in one pass over the whole day and over part of it,
// and checks each device against the reader.
func eachRange(t *testing.T, s *Store, day model.Day, devices []string, notWhole map[string]bool) {
	t.Helper()
	ctx := t.Context()
	for _, r := range []store.Range{{From: day.Start(), To: day.End()}, {From: day.Start() + 3_600_000, To: day.Start() + 9*3_600_000}} {
		var got []string
		err := s.EachSeriesReadings(ctx, "acme", day, r, func(series string, readings []model.Reading, whole bool) error {
			got = append(got, series)
			if whole == notWhole[series] {
				t.Errorf("%s: whole %v, want %v", series, whole, !notWhole[series])
			}
			if !whole {
				if readings != nil {
					t.Errorf("%s: not whole but %d readings", series, len(readings))
				}
				return nil
			}
			want := readAll(t, s, series, r)
			if !cmp.Equal(readings, want) {
				t.Errorf("%s over %v: one pass gives %d readings, the reader %d:\n%s", series, r, len(readings), len(want), cmp.Diff(want, readings))
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(got, devices) {
			t.Errorf("devices %q, want %q", got, devices)
		}
	}
}

// readAll reads a device's readings over r through the reader, page by page.
func readAll(t *testing.T, s *Store, device string, r store.Range) []model.Reading {
	t.Helper()
	var out []model.Reading
	q := reader.Query{Tenant: "acme", Series: device, From: r.From, To: r.To, Limit: 7}
	for {
		page, next, err := reader.Readings(context.Background(), s, q)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, page...)
		if next == "" {
			return out
		}
		q.Cursor = next
	}
}
