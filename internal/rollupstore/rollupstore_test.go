package rollupstore

import (
	"cmp"
	"context"
	"encoding/binary"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/cockroachdb/pebble/v2"
	gocmp "github.com/google/go-cmp/cmp"

	"github.com/sluicehq/sluice/internal/model"
	"github.com/sluicehq/sluice/internal/rollup"
	"github.com/sluicehq/sluice/internal/store"
)

func row(tenant, device, metric string, minute int64, count uint64, version uint64) rollup.Row {
	return rollup.Row{Key: rollup.Key{Tenant: tenant, Device: device, Metric: metric, Minute: minute},
		Count: count, Sum: float64(count), Min: 1, Max: 1, Version: version}
}

func open(t *testing.T) *Store {
	t.Helper()
	s, err := Open(t.TempDir(), slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

const day = model.MillisPerDay

// Rows are found across days (with empty days between), per tenant, metric
// and device, and the highest version wins.
func TestRowsAcrossDays(t *testing.T) {
	s := open(t)
	ctx := context.Background()
	base := int64(20000) * day
	rows := []rollup.Row{
		row("acme", "d1", "temp", base, 1, 1),
		row("acme", "d1", "temp", base+5*day+60_000, 2, 1),
		row("acme", "d2", "temp", base+5*day, 3, 1),
		row("acme", "d1", "rpm", base+day, 4, 1),
		row("beta", "d1", "temp", base+day, 5, 1),
		row("acme", "d1", "temp", base, 9, 0), // older version: ignored
	}
	if err := s.Insert(ctx, rows); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		f    rollup.Filter
		want []uint64 // counts, in key order
	}{
		{rollup.Filter{Tenant: "acme", Device: "d1", Metric: "temp", From: base, To: base + 10*day}, []uint64{1, 2}},
		{rollup.Filter{Tenant: "acme", Metric: "temp", From: base, To: base + 10*day}, []uint64{1, 2, 3}},
		{rollup.Filter{Tenant: "acme", Device: "d1", Metric: "temp", From: base + 60_000, To: base + 10*day}, []uint64{2}},
		{rollup.Filter{Tenant: "beta", Device: "d1", Metric: "temp", From: base, To: base + 10*day}, []uint64{5}},
		{rollup.Filter{Tenant: "acme", Device: "d1", Metric: "rpm", From: base, To: base + day}, nil},
	}
	for _, tt := range tests {
		got, err := s.Rows(ctx, tt.f)
		if err != nil {
			t.Fatal(err)
		}
		var counts []uint64
		for _, r := range got {
			counts = append(counts, r.Count)
		}
		if len(counts) != len(tt.want) {
			t.Errorf("%+v: counts %v, want %v", tt.f, counts, tt.want)
			continue
		}
		for i := range counts {
			if counts[i] != tt.want[i] {
				t.Errorf("%+v: counts %v, want %v", tt.f, counts, tt.want)
				break
			}
		}
	}
}

// A day of every tenant is one bucket, dropped with one range delete that
// leaves the other days intact.
func TestRetention(t *testing.T) {
	s := open(t)
	ctx := context.Background()
	base := int64(20000) * day
	var rows []rollup.Row
	for d := range int64(5) {
		for i := range int64(30) {
			rows = append(rows, row("acme", "d1", "temp", base+d*day+i*60_000, 1, 1), row("beta", "d9", "rpm", base+d*day+i*60_000, 1, 1))
		}
	}
	if err := s.Insert(ctx, rows); err != nil {
		t.Fatal(err)
	}
	buckets, err := s.Buckets(ctx, model.Day(20003))
	if err != nil {
		t.Fatal(err)
	}
	if len(buckets) != 3 || buckets[0].Day != 20000 || buckets[2].Day != 20002 || buckets[0].Kind != store.BucketRollups {
		t.Fatalf("buckets before day 20003: %+v", buckets)
	}
	size, err := s.Measure(ctx, buckets[1])
	if err != nil || size.Rows != 60 {
		t.Fatalf("measure: %+v %v, want 60 rows", size, err)
	}
	for _, b := range buckets {
		n, err := s.DropData(ctx, b)
		if err != nil || n != 1 {
			t.Fatalf("drop %v: %d deletes, %v", b, n, err)
		}
	}
	left, err := s.Rows(ctx, rollup.Filter{Tenant: "acme", Device: "d1", Metric: "temp", From: base, To: base + 5*day})
	if err != nil {
		t.Fatal(err)
	}
	if len(left) != 60 || left[0].Minute != base+3*day {
		t.Fatalf("after the drop: %d rows from %d, want 60 from day 20003", len(left), left[0].Minute)
	}
	if again, _ := s.Buckets(ctx, model.Day(20003)); len(again) != 0 {
		t.Errorf("dropped days still listed: %+v", again)
	}
}

// The highest version of a row wins whatever the order of the inserts, in
// one batch or across batches, across a flush to disk, and across a reopen;
// a tombstone of a higher version retracts the row.
func TestInsertKeepsHighestVersion(t *testing.T) {
	base := int64(20000) * day
	r := func(count, version uint64) rollup.Row { return row("acme", "d1", "temp", base, count, version) }
	tests := []struct {
		name    string
		batches [][]rollup.Row
		want    []uint64 // counts read back
	}{
		{"newer later", [][]rollup.Row{{r(1, 1)}, {r(2, 2)}}, []uint64{2}},
		{"older later", [][]rollup.Row{{r(2, 2)}, {r(1, 1)}}, []uint64{2}},
		{"one batch, older last", [][]rollup.Row{{r(3, 3), r(1, 1), r(2, 2)}}, []uint64{3}},
		{"tombstone wins", [][]rollup.Row{{r(2, 2)}, {r(0, 3)}}, nil},
		{"older than tombstone", [][]rollup.Row{{r(0, 3)}, {r(2, 2)}}, nil},
	}
	for _, tt := range tests {
		for _, flush := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/flush=%v", tt.name, flush), func(t *testing.T) {
				dir := t.TempDir()
				s, err := Open(dir, slog.New(slog.DiscardHandler))
				if err != nil {
					t.Fatal(err)
				}
				ctx := context.Background()
				for _, b := range tt.batches {
					if err := s.Insert(ctx, b); err != nil {
						t.Fatal(err)
					}
					if flush {
						if err := s.db.Flush(); err != nil {
							t.Fatal(err)
						}
					}
				}
				if err := s.Close(); err != nil {
					t.Fatal(err)
				}
				if s, err = Open(dir, slog.New(slog.DiscardHandler)); err != nil {
					t.Fatal(err)
				}
				defer s.Close()
				rows, err := s.Rows(ctx, rollup.Filter{Tenant: "acme", Device: "d1", Metric: "temp", From: base, To: base + day})
				if err != nil {
					t.Fatal(err)
				}
				var got []uint64
				for _, r := range rows {
					got = append(got, r.Count)
				}
				if !slices.Equal(got, tt.want) {
					t.Fatalf("counts %v, want %v", got, tt.want)
				}
			})
		}
	}
}

// Devices lists the devices of one tenant-day with live rows: not a device
// whose only row was retracted, not another day's, not a tenant whose name
// extends this one's.
func TestDevices(t *testing.T) {
	ctx := context.Background()
	s := open(t)
	day := model.Day(20_000)
	m := day.Start() + 5*rollup.MinuteMillis
	if err := s.Insert(ctx, []rollup.Row{
		row("acme", "d2", "temp", m, 3, 1),
		row("acme", "d1", "rpm", m, 1, 1),
		row("acme", "d1", "temp", m+rollup.MinuteMillis, 2, 1),
		row("acme", "d3", "temp", m, 4, 1),
		row("acme", "d3", "temp", m, 0, 2), // retracted
		row("acme", "d4", "temp", (day + 1).Start(), 1, 1),
		row("acmex", "d9", "temp", m, 1, 1),
	}); err != nil {
		t.Fatal(err)
	}
	got, err := s.Devices(ctx, "acme", day)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"d1", "d2"}; !slices.Equal(got, want) {
		t.Errorf("Devices(acme, %s) = %v, want %v", day, got, want)
	}
	if got, _ := s.Devices(ctx, "nobody", day); len(got) != 0 {
		t.Errorf("Devices of an unknown tenant = %v, want none", got)
	}
}

// Rows of one device without a metric find the device under every metric
// (jumping from metric to metric), and only that device.
// TestRowsOfDevices reads one device, and devices by range of names
// across every metric and within one (d1 is a prefix of d10; "" ends are
// open).
func TestRowsOfDevices(t *testing.T) {
	ctx := context.Background()
	s := open(t)
	day := model.Day(20_000)
	m := day.Start()
	var all []rollup.Row
	for _, metric := range []string{"a", "rpm", "temp"} {
		for _, dev := range []string{"d0", "d1", "d10", "d2"} {
			all = append(all, row("acme", dev, metric, m, 1, 1), row("acme", dev, metric, m+rollup.MinuteMillis, 2, 1))
		}
	}
	all = append(all, row("acme", "d1", "rpm", (day+1).Start(), 3, 1)) // the next day
	if err := s.Insert(ctx, all); err != nil {
		t.Fatal(err)
	}
	got, err := s.Rows(ctx, rollup.Filter{Tenant: "acme", Device: "d1", From: m, To: (day + 2).Start()})
	if err != nil {
		t.Fatal(err)
	}
	var want []rollup.Row
	for _, r := range all {
		if r.Device == "d1" {
			want = append(want, r)
		}
	}
	key := func(r rollup.Row) string { return fmt.Sprint(r.Minute, r.Metric) }
	slices.SortFunc(got, func(a, b rollup.Row) int { return strings.Compare(key(a), key(b)) })
	slices.SortFunc(want, func(a, b rollup.Row) int { return strings.Compare(key(a), key(b)) })
	if len(got) != len(want) {
		t.Fatalf("Rows(d1) = %d rows, want %d: %+v", len(got), len(want), got)
	}
	for i := range want {
		if got[i].Key != want[i].Key || got[i].Count != want[i].Count {
			t.Errorf("row %d = %+v, want %+v", i, got[i].Key, want[i].Key)
		}
	}
	for _, tc := range []struct{ metric, from, to string }{
		{"", "d1", "d2"}, {"", "", "d1"}, {"", "d10", ""}, {"", "d1", "d10"}, {"", "", ""},
		{"rpm", "d1", "d2"}, {"rpm", "d2", ""}, {"temp", "", "d0"},
	} {
		f := rollup.Filter{Tenant: "acme", Metric: tc.metric, From: m, To: day.End(), DeviceFrom: tc.from, DeviceTo: tc.to}
		got, err := s.Rows(ctx, f)
		if err != nil {
			t.Fatal(err)
		}
		var want []string
		for _, r := range all {
			if r.Minute < day.End() && (tc.metric == "" || r.Metric == tc.metric) && r.Device >= tc.from && (tc.to == "" || r.Device < tc.to) {
				want = append(want, r.Metric+"/"+r.Device)
			}
		}
		var names []string
		for _, r := range got {
			names = append(names, r.Metric+"/"+r.Device)
		}
		slices.Sort(want)
		slices.Sort(names)
		if !slices.Equal(names, want) {
			t.Errorf("metric %q, devices [%q, %q): got %v, want %v", tc.metric, tc.from, tc.to, names, want)
		}
	}
}

// A store written with Pebble's default merge operator (the first
// versions) does not open: the error says what to do.
func TestOpenOldStore(t *testing.T) {
	dir := t.TempDir()
	db, err := pebble.Open(dir, &pebble.Options{FormatMajorVersion: pebble.FormatNewest})
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	_, err = Open(dir, slog.New(slog.DiscardHandler))
	if err == nil || !strings.Contains(err.Error(), "move the directory aside") {
		t.Fatalf("Open of an old store = %v, want the advice to move it aside", err)
	}
}

// A store written before values left out their key (each value a whole
// row) still reads back, beside rows inserted since, and a newer version
// inserted now replaces an old row; the new values are smaller.
func TestLegacyValuesReadBack(t *testing.T) {
	s := open(t)
	ctx := context.Background()
	const minute = 20_000*model.MillisPerDay + 5*60_000
	old := []rollup.Row{
		row("acme", "pump-1", "temp", minute, 3, 5),
		row("acme", "pump-2", "temp", minute, 4, 5),
	}
	old[0].Writer, old[0].Part, old[0].FirstTS, old[0].LastTS = 2, 77, minute+1, minute+9
	for i := range old { // as the earlier version wrote them
		if err := s.db.Merge(legacyKeyOnDisk(old[i]), rollup.EncodeRow(nil, &old[i]), pebble.Sync); err != nil {
			t.Fatal(err)
		}
	}
	newer := row("acme", "pump-2", "temp", minute, 6, 9)
	fresh := row("acme", "pump-3", "humidity", minute, 1, 9)
	fresh.Writer, fresh.Part = 1, 1<<40
	if err := s.Insert(ctx, []rollup.Row{newer, fresh}); err != nil {
		t.Fatal(err)
	}
	got, err := s.Rows(ctx, rollup.Filter{Tenant: "acme", From: minute, To: minute + 60_000})
	if err != nil {
		t.Fatal(err)
	}
	byDevice := map[string]rollup.Row{}
	for _, r := range got {
		byDevice[r.Device] = r
	}
	for _, want := range []rollup.Row{old[0], newer, fresh} {
		if g := byDevice[want.Device]; g != want {
			t.Errorf("%s: got %+v, want %+v", want.Device, g, want)
		}
	}
	if len(got) != 3 {
		t.Errorf("got %d rows, want 3: %+v", len(got), got)
	}
	devices, err := s.Devices(ctx, "acme", model.DayOf(minute))
	if err != nil || !slices.Equal(devices, []string{"pump-1", "pump-2", "pump-3"}) {
		t.Errorf("Devices = %v, %v", devices, err)
	}
	if lean, whole := len(rollup.EncodeValue(nil, &fresh)), len(rollup.EncodeRow(nil, &fresh)); lean*3 > whole*2 {
		t.Errorf("a value is %d bytes, a whole row %d: want it at most two thirds", lean, whole)
	}
}

// Typed rows (ints past int64, bools, strings, a metric whose type
// changes) read back whole, fold into series and top lists, and replace
// float rows of lower versions (and are replaced by higher ones).
func TestTypedRows(t *testing.T) {
	s := open(t)
	ctx := context.Background()
	const minute = 20_000*model.MillisPerDay + 5*60_000
	readings := []model.Reading{
		{TS: minute, Metrics: []model.Metric{model.IntMetric("n", math.MaxInt64), model.BoolMetric("on", true), model.StringMetric("state", "idle")}},
		{TS: minute + 1000, Metrics: []model.Metric{model.IntMetric("n", math.MaxInt64), model.BoolMetric("on", false), model.Metric{Name: "state", Value: 2}}},
		{TS: minute + 61_000, Metrics: []model.Metric{model.IntMetric("n", 2), model.StringMetric("state", "run")}},
	}
	rows := rollup.Compute("acme", "pump-1", readings, 5)
	// A float row of a lower version, replaced; a typed one replaced by a
	// higher float version.
	older := row("acme", "pump-1", "n", minute, 1, 4)
	later := row("acme", "pump-1", "on", minute, 1, 6)
	older.Writer, later.Writer = rollup.RebuildWriter, rollup.RebuildWriter
	if err := s.Insert(ctx, []rollup.Row{older}); err != nil {
		t.Fatal(err)
	}
	if err := s.Insert(ctx, rows); err != nil {
		t.Fatal(err)
	}
	got, err := s.Rows(ctx, rollup.Filter{Tenant: "acme", From: minute, To: minute + 3_600_000})
	if err != nil {
		t.Fatal(err)
	}
	sortRows := func(rs []rollup.Row) {
		slices.SortFunc(rs, func(a, b rollup.Row) int {
			return cmp.Or(strings.Compare(a.Metric, b.Metric), cmp.Compare(a.Minute, b.Minute))
		})
	}
	sortRows(got)
	want := slices.Clone(rows)
	sortRows(want)
	if diff := gocmp.Diff(want, got); diff != "" {
		t.Errorf("typed rows (-want +got):\n%s", diff)
	}
	series, err := s.Series(ctx, rollup.Filter{Tenant: "acme", Device: "pump-1", Metric: "n", From: minute, To: minute + 3_600_000}, rollup.StepHour)
	if err != nil || len(series) != 1 || series[0].IntSum.String() != "18446744073709551616" || series[0].IntCount != 3 {
		t.Errorf("hour of n = %+v, %v", series, err)
	}
	top, err := s.Top(ctx, rollup.Filter{Tenant: "acme", Metric: "state", From: minute, To: minute + 3_600_000}, rollup.ByCount, 5)
	if err != nil || len(top) != 1 || top[0].Count != 3 || top[0].Agg.StrCount != 2 || top[0].Agg.StrLast != "run" {
		t.Errorf("top of state = %+v, %v", top, err)
	}
	if err := s.Insert(ctx, []rollup.Row{later}); err != nil {
		t.Fatal(err)
	}
	got, err = s.Rows(ctx, rollup.Filter{Tenant: "acme", Metric: "on", From: minute, To: minute + 60_000})
	if err != nil || len(got) != 1 || got[0] != later {
		t.Errorf("on after a later float version = %+v, %v", got, err)
	}
}

// legacyKeyOnDisk is r's key as stores written before the hour came into the key
// laid it out: day tenant 0 metric 0 device 0 minute writer part. Spelled
// out here rather than built with the store's helpers, so that the test
// holds the layout such stores have on disk.
func legacyKeyOnDisk(r rollup.Row) []byte {
	b := binary.BigEndian.AppendUint32(nil, uint32(model.DayOf(r.Minute))^(1<<31))
	for _, part := range []string{r.Tenant, r.Metric, r.Device} {
		b = append(append(b, part...), 0)
	}
	b = binary.BigEndian.AppendUint64(b, uint64(r.Minute)^(1<<63))
	b = binary.BigEndian.AppendUint16(b, r.Writer)
	return binary.BigEndian.AppendUint64(b, r.Part)
}

// hourKeyOnDisk is r's key as stores written before the device-minute came
// into the key laid it out: day 0 hour tenant 0 metric 0 device 0 minute
// writer part, spelled out as legacyKeyOnDisk is.
func hourKeyOnDisk(r rollup.Row) []byte {
	d := model.DayOf(r.Minute)
	b := binary.BigEndian.AppendUint32(nil, uint32(d)^(1<<31))
	b = append(b, 0, byte((r.Minute-d.Start())/3_600_000))
	for _, part := range []string{r.Tenant, r.Metric, r.Device} {
		b = append(append(b, part...), 0)
	}
	b = binary.BigEndian.AppendUint64(b, uint64(r.Minute)^(1<<63))
	b = binary.BigEndian.AppendUint16(b, r.Writer)
	return binary.BigEndian.AppendUint64(b, r.Part)
}

// Stores written in the layouts before the device-minute one (legacy: no
// hour in the key; by hour: one key per metric) read back: their rows are
// found by every kind of filter beside rows written since; of a row in two
// layouts the highest version wins, a tombstone included; Devices,
// Buckets, Measure and DropData see all of them. "both" writes the old
// rows alternately in the two old layouts, as a store upgraded twice holds
// them.
func TestLegacyLayoutReadBack(t *testing.T) {
	for _, layout := range []struct {
		name string
		key  func(i int, r rollup.Row) []byte
	}{
		{"legacy", func(_ int, r rollup.Row) []byte { return legacyKeyOnDisk(r) }},
		{"by hour", func(_ int, r rollup.Row) []byte { return hourKeyOnDisk(r) }},
		{"both", func(i int, r rollup.Row) []byte {
			if i%2 == 0 {
				return legacyKeyOnDisk(r)
			}
			return hourKeyOnDisk(r)
		}},
	} {
		t.Run(layout.name, func(t *testing.T) { testOldLayoutReadBack(t, layout.key) })
	}
}

func testOldLayoutReadBack(t *testing.T, key func(i int, r rollup.Row) []byte) {
	s := open(t)
	ctx := context.Background()
	d := model.Day(20000)
	m1 := d.Start() + 5*60_000                // hour 0
	m2 := d.Start() + (13*60+7)*60_000        // hour 13
	next := (d + 1).Start() + (2*60+1)*60_000 // a day with legacy rows only
	legacy := []rollup.Row{
		row("acme", "pump-1", "temp", m1, 3, 5),
		row("acme", "pump-2", "temp", m2, 4, 5), // replaced by a higher version
		row("acme", "pump-3", "temp", m1, 2, 9), // beside a lower version
		row("acme", "pump-4", "rpm", m2, 1, 5),  // retracted by a tombstone
		row("beta", "x", "temp", m1, 1, 1),
		row("acme", "pump-1", "temp", next, 8, 5),
		row("acme", "pump-6", "temp", m2, 0, 9), // a tombstone over a lower version
	}
	for i, r := range legacy {
		v := rollup.EncodeValue(nil, &r)
		if i == 0 {
			v = rollup.EncodeRow(nil, &r) // an older value: the whole row
		}
		if err := s.db.Merge(key(i, r), v, pebble.Sync); err != nil {
			t.Fatal(err)
		}
	}
	fresh := []rollup.Row{
		row("acme", "pump-2", "temp", m2, 6, 9),
		row("acme", "pump-3", "temp", m1, 7, 5),
		row("acme", "pump-4", "rpm", m2, 0, 9),
		row("acme", "pump-5", "temp", m2, 1, 9),
		row("acme", "pump-6", "temp", m2, 5, 5),
	}
	if err := s.Insert(ctx, fresh); err != nil {
		t.Fatal(err)
	}
	want := func(rows ...rollup.Row) []rollup.Row { return rows }
	for _, tc := range []struct {
		name string
		f    rollup.Filter
		want []rollup.Row
	}{
		{"tenant", rollup.Filter{Tenant: "acme"}, want(legacy[0], fresh[0], legacy[2], fresh[3])},
		{"every tenant", rollup.Filter{}, want(legacy[0], fresh[0], legacy[2], legacy[4], fresh[3])},
		{"device", rollup.Filter{Tenant: "acme", Device: "pump-1"}, want(legacy[0])},
		{"metric and devices", rollup.Filter{Tenant: "acme", Metric: "temp", DeviceFrom: "pump-2", DeviceTo: "pump-4"}, want(fresh[0], legacy[2])},
		{"devices, every metric", rollup.Filter{Tenant: "acme", DeviceFrom: "pump-3"}, want(legacy[2], fresh[3])},
		{"hour 13 only", rollup.Filter{Tenant: "acme", From: m2, To: m2 + 60_000}, want(fresh[0], fresh[3])},
	} {
		f := tc.f
		if f.From == 0 {
			f.From, f.To = d.Start(), d.End()
		}
		got, err := s.Rows(ctx, f)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		sortRows(got)
		sortRows(tc.want)
		if diff := gocmp.Diff(tc.want, got); diff != "" {
			t.Errorf("%s (-want +got):\n%s", tc.name, diff)
		}
	}
	devices, err := s.Devices(ctx, "acme", d)
	if err != nil || !slices.Equal(devices, []string{"pump-1", "pump-2", "pump-3", "pump-5"}) {
		t.Errorf("Devices = %v, %v", devices, err)
	}
	buckets, err := s.Buckets(ctx, d+2)
	if err != nil || len(buckets) != 2 || buckets[0].Day != d || buckets[1].Day != d+1 {
		t.Fatalf("Buckets = %+v, %v", buckets, err)
	}
	if size, err := s.Measure(ctx, buckets[0]); err != nil || size.Rows != 11 {
		t.Errorf("Measure = %+v, %v; want the 6 legacy and 5 new rows", size, err)
	}
	if _, err := s.DropData(ctx, buckets[0]); err != nil {
		t.Fatal(err)
	}
	if got, err := s.Rows(ctx, rollup.Filter{From: d.Start(), To: (d + 2).Start()}); err != nil || len(got) != 1 || got[0] != legacy[5] {
		t.Errorf("after dropping the first day: %+v, %v; want the next day's legacy row", got, err)
	}
	if devices, err := s.Devices(ctx, "acme", d); err != nil || len(devices) != 0 {
		t.Errorf("Devices of the dropped day = %v, %v", devices, err)
	}
}

func sortRows(rows []rollup.Row) {
	slices.SortFunc(rows, func(a, b rollup.Row) int {
		return cmp.Or(strings.Compare(a.Tenant, b.Tenant), strings.Compare(a.Metric, b.Metric), strings.Compare(a.Device, b.Device), cmp.Compare(a.Minute, b.Minute))
	})
}

// Devices finds the devices of every hour of the day, and not one whose
// rows are all tombstones.
func TestDevicesAcrossHours(t *testing.T) {
	s := open(t)
	ctx := context.Background()
	d := model.Day(20000)
	rows := []rollup.Row{
		row("acme", "a", "temp", d.Start(), 1, 1),
		row("acme", "b", "temp", d.Start()+13*3_600_000+60_000, 1, 1),
		row("acme", "c", "rpm", d.End()-60_000, 1, 1),
		row("acme", "gone", "temp", d.Start()+5*3_600_000, 0, 1),
		row("beta", "x", "temp", d.Start()+5*3_600_000, 1, 1),
	}
	if err := s.Insert(ctx, rows); err != nil {
		t.Fatal(err)
	}
	devices, err := s.Devices(ctx, "acme", d)
	if err != nil || !slices.Equal(devices, []string{"a", "b", "c"}) {
		t.Errorf("Devices = %v, %v; want a, b, c", devices, err)
	}
}

// The rows of one device-minute share a key: rows given in several
// inserts, out of metric order or twice in one insert keep of each metric
// its highest version, in the memtable and after compactions merged the
// operands; Measure counts them one per metric.
func TestDeviceMinuteRows(t *testing.T) {
	s := open(t)
	ctx := context.Background()
	d := model.Day(20000)
	m := d.Start() + (7*60+3)*60_000
	inserts := [][]rollup.Row{
		{row("acme", "d1", "rpm", m, 2, 5), row("acme", "d1", "temp", m, 3, 5)},
		{row("acme", "d1", "hum", m, 1, 5)},
		{row("acme", "d1", "temp", m, 9, 6), row("acme", "d1", "rpm", m, 7, 4)},
		// One run, out of order and temp twice: the higher version stays.
		{row("acme", "d2", "temp", m, 1, 7), row("acme", "d2", "hum", m, 2, 7), row("acme", "d2", "temp", m, 3, 8)},
		{row("acme", "d3", "temp", m, 4, 1)},
		{row("acme", "d3", "temp", m, 0, 2)}, // a tombstone: d3 has no live rows
		// A device whose name begins with another's, after it in key
		// order: Devices' skip past d1's keys must not skip it.
		{row("acme", "d1x", "temp", m, 5, 1)},
	}
	for _, rows := range inserts {
		if err := s.Insert(ctx, rows); err != nil {
			t.Fatal(err)
		}
	}
	want := []rollup.Row{
		row("acme", "d1", "hum", m, 1, 5), row("acme", "d1", "rpm", m, 2, 5), row("acme", "d1", "temp", m, 9, 6),
		row("acme", "d2", "hum", m, 2, 7), row("acme", "d2", "temp", m, 3, 8),
		row("acme", "d1x", "temp", m, 5, 1),
	}
	check := func(when string) {
		t.Helper()
		got, err := s.Rows(ctx, rollup.Filter{Tenant: "acme", From: d.Start(), To: d.End()})
		if err != nil {
			t.Fatalf("%s: %v", when, err)
		}
		sortRows(got)
		w := slices.Clone(want)
		sortRows(w)
		if diff := gocmp.Diff(w, got); diff != "" {
			t.Errorf("%s: rows (-want +got):\n%s", when, diff)
		}
		got, err = s.Rows(ctx, rollup.Filter{Tenant: "acme", Metric: "temp", DeviceFrom: "d2", From: d.Start(), To: d.End()})
		if err != nil || len(got) != 1 || got[0] != want[4] {
			t.Errorf("%s: temp of d2 on = %+v, %v", when, got, err)
		}
		devices, err := s.Devices(ctx, "acme", d)
		if err != nil || !slices.Equal(devices, []string{"d1", "d1x", "d2"}) {
			t.Errorf("%s: Devices = %v, %v", when, devices, err)
		}
	}
	check("in the memtable")
	if err := s.db.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := s.db.Compact(ctx, dayPrefix(nil, d), dayPrefix(nil, d+1), false); err != nil {
		t.Fatal(err)
	}
	check("compacted")
	// Compacted, each device-minute is one key holding its metrics: three
	// of d1, two of d2, d3's tombstone, d1x's one.
	if size, err := s.Measure(ctx, store.Bucket{Kind: store.BucketRollups, Day: d}); err != nil || size.Rows != 7 {
		t.Errorf("Measure = %+v, %v; want 7 rows", size, err)
	}
	if err := s.Insert(ctx, []rollup.Row{row("acme", "d4", "", m, 1, 1)}); err == nil {
		t.Error("a row without a metric was inserted")
	}
}
