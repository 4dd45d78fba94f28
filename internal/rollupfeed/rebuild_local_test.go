package rollupfeed

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/sluicehq/sluice/internal/model"
	"github.com/sluicehq/sluice/internal/rollup"
	"github.com/sluicehq/sluice/internal/rollupstore"
	"github.com/sluicehq/sluice/internal/store"
	"github.com/sluicehq/sluice/internal/store/pebblestore"
)

// A minute that has no readings any more loses every rollup row on
// rebuild: a live gateway's row and the row of an earlier rebuild alike.
func TestRebuildRetractsMinutesWithoutReadings(t *testing.T) {
	ctx := context.Background()
	raw, dst := openRawAndRollups(t)

	day := model.DayOf(base.UnixMilli())
	m1, m2 := base.UnixMilli(), base.UnixMilli()+rollup.MinuteMillis
	pk := model.SeriesDay{Kind: model.KindReadings, Tenant: "acme", Series: "d", Day: day}.Partition(0)
	if err := raw.Commit(ctx, &store.Batch{
		Partitions: []store.PartitionWrite{{Key: pk, Readings: []model.ReadingRow{{TS: m1, Metric: "x", Value: 1}}}},
		Catalogue:  []model.PartitionInfo{{Key: pk, Rows: 1, Bytes: 30, MinTS: m1, MaxTS: m1, State: "single"}},
		Version:    1,
	}); err != nil {
		t.Fatal(err)
	}
	k2 := rollup.Key{Tenant: "acme", Device: "d", Metric: "x", Minute: m2}
	if err := dst.Insert(ctx, []rollup.Row{
		{Key: k2, Writer: 1, Part: 5, Count: 3, Sum: 3, Min: 1, Max: 1, Version: 1},           // a gateway's
		{Key: k2, Writer: rollup.RebuildWriter, Count: 2, Sum: 2, Min: 1, Max: 1, Version: 1}, // an earlier rebuild's
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := Rebuild(ctx, raw, dst, "acme", "", day.Start(), day.End(), 2, nil); err != nil {
		t.Fatal(err)
	}
	rows, err := dst.Rows(ctx, rollup.Filter{Tenant: "acme", Device: "d", From: day.Start(), To: day.End()})
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 1 || rows[0].Minute != m1 || rows[0].Count != 1 {
		t.Fatalf("rows after the rebuild: %+v, want only minute %d with count 1", rows, m1)
	}
}

// A rebuild of two days lists each day's devices from the raw store's
// catalogue and from the rollups (a device with rollups and no readings
// has them retracted), and its progress counts every device-day of the
// range from the first step on.
func TestRebuildEveryDeviceOfEachDay(t *testing.T) {
	ctx := t.Context()
	raw, dst := openRawAndRollups(t)

	day1 := model.DayOf(base.UnixMilli())
	day2 := day1 + 1
	write := func(day model.Day, device string, n int) {
		t.Helper()
		pk := model.SeriesDay{Kind: model.KindReadings, Tenant: "acme", Series: device, Day: day}.Partition(0)
		var rows []model.ReadingRow
		for i := range n {
			rows = append(rows, model.ReadingRow{TS: day.Start() + int64(i)*1000, Metric: "x", Value: float64(i)})
		}
		if err := raw.Commit(ctx, &store.Batch{
			Partitions: []store.PartitionWrite{{Key: pk, Readings: rows}},
			Catalogue:  []model.PartitionInfo{{Key: pk, Rows: int64(n), Bytes: int64(30 * n), MinTS: rows[0].TS, MaxTS: rows[n-1].TS, State: "single"}},
			Version:    1,
		}); err != nil {
			t.Fatal(err)
		}
	}
	write(day1, "b", 3)
	write(day1, "a", 2)
	write(day2, "c", 4)
	write(day2, "b", 1)
	ghost := rollup.Key{Tenant: "acme", Device: "z", Metric: "x", Minute: day2.Start()}
	if err := dst.Insert(ctx, []rollup.Row{{Key: ghost, Writer: 1, Count: 2, Sum: 2, Min: 1, Max: 1, Version: 1}}); err != nil {
		t.Fatal(err)
	}
	v, err := Verify(ctx, raw, dst, "acme", day2)
	if err != nil {
		t.Fatal(err)
	}
	want := []Mismatch{
		{Device: "b", Metric: "x", Raw: 1, Diffs: []string{"count: raw 1, rollup 0", "float_count: raw 1, rollup 0"}},
		{Device: "c", Metric: "x", Raw: 4, Diffs: []string{"count: raw 4, rollup 0", "float_count: raw 4, rollup 0"}},
		{Device: "z", Metric: "x", Rollup: 2, Diffs: []string{"count: raw 0, rollup 2", "float_count: raw 0, rollup 2"}},
	}
	if v.Devices != 3 || v.RawRows != 5 || v.RollupRows != 2 || !cmp.Equal(v.Mismatches, want) {
		t.Errorf("verify of day 2 before the rebuild: %+v, want 3 devices, 5 raw, 2 counted by rollups, mismatches %+v", v, want)
	}

	var steps []Progress
	res, err := Rebuild(ctx, raw, dst, "acme", "", day1.Start(), day2.End(), 2, func(p Progress) { steps = append(steps, p) })
	if err != nil {
		t.Fatal(err)
	}
	wantSteps := []Progress{
		{Done: 1, Total: 5, Device: "a", Day: day1},
		{Done: 2, Total: 5, Device: "b", Day: day1},
		{Done: 3, Total: 5, Device: "b", Day: day2},
		{Done: 4, Total: 5, Device: "c", Day: day2},
		{Done: 5, Total: 5, Device: "z", Day: day2},
	}
	if !slices.Equal(steps, wantSteps) {
		t.Errorf("progress %+v, wantSteps %+v", steps, wantSteps)
	}
	if res.DeviceDays != 5 || res.Readings != 10 || res.Retracted != 1 {
		t.Errorf("rebuild result %+v, want 5 device-days, 10 readings, 1 row retracted", res)
	}
	for _, day := range []model.Day{day1, day2} {
		v, err := Verify(ctx, raw, dst, "acme", day)
		if err != nil {
			t.Fatal(err)
		}
		if v.Devices != 2 || v.RawRows != v.RollupRows || len(v.Mismatches) != 0 {
			t.Errorf("verify of %s after the rebuild: %+v, want 2 devices and no mismatch", day, v)
		}
	}
}

// commitDay commits rows to partition sub of device's day on the raw
// store, with a catalogue entry that spans the day.
func commitDay(t *testing.T, raw *pebblestore.Store, device string, day model.Day, sub uint32, rows ...model.ReadingRow) {
	t.Helper()
	pk := model.SeriesDay{Kind: model.KindReadings, Tenant: "acme", Series: device, Day: day}.Partition(sub)
	if err := raw.Commit(t.Context(), &store.Batch{
		Partitions: []store.PartitionWrite{{Key: pk, Readings: rows}},
		Catalogue:  []model.PartitionInfo{{Key: pk, Rows: int64(len(rows)), Bytes: 1 << 20, MinTS: day.Start(), MaxTS: day.End() - 1, State: "single"}},
		Version:    1,
	}); err != nil {
		t.Fatal(err)
	}
}

// openRawAndRollups opens an embedded raw store and rollup store, closed
// when the test ends.
func openRawAndRollups(t *testing.T) (*pebblestore.Store, *rollupstore.Store) {
	t.Helper()
	raw := openRaw(t, t.TempDir())
	dst, err := rollupstore.Open(filepath.Join(t.TempDir(), "rollups"), quiet)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = dst.Close() })
	return raw, dst
}

// rowsReader is a rollup store that records whose rows a rebuild reads,
// and can store a row of its own before the rebuild's first insert of a
// device's rows, as the feed may while a rebuild runs.
type rowsReader struct {
	*rollupstore.Store
	read     []string
	feedRow  *rollup.Row // stored before the first insert of its device
	injected bool
	inserts  int   // calls of Insert
	fail     error // what Insert returns, if set
}

func (c *rowsReader) Rows(ctx context.Context, f rollup.Filter) ([]rollup.Row, error) {
	c.read = append(c.read, f.Device)
	return c.Store.Rows(ctx, f)
}

func (c *rowsReader) Insert(ctx context.Context, rows []rollup.Row) error {
	c.inserts++
	if c.fail != nil {
		return c.fail
	}
	if c.feedRow != nil && !c.injected && slices.ContainsFunc(rows, func(r rollup.Row) bool { return r.Device == c.feedRow.Device }) {
		c.injected = true
		if err := c.Store.Insert(ctx, []rollup.Row{*c.feedRow}); err != nil {
			return err
		}
	}
	return c.Store.Insert(ctx, rows)
}

// A rebuild reads the stored rows only of the devices the backend listed
// with rollups on the day: the others have nothing to replace or retract.
// Rows the feed stores meanwhile for a device listed without rollups
// (writer RebuildWriter, part 0, a later version) stand against the
// rebuild's, one row per minute, and the day still verifies.
func TestRebuildReadsRowsOfListedDevicesOnly(t *testing.T) {
	ctx := t.Context()
	raw, rs := openRawAndRollups(t)
	day := model.DayOf(base.UnixMilli())
	m1, m2 := day.Start(), day.Start()+rollup.MinuteMillis
	for _, device := range []string{"a", "b", "c"} {
		commitDay(t, raw, device, day, 0, model.ReadingRow{TS: m1, Metric: "x", Value: 1}, model.ReadingRow{TS: m2, Metric: "x", Value: 2})
	}
	// b has a gateway's partial row of minute 1, which the rebuild must
	// retract, and c none; the feed stores c's minute 2 while the rebuild
	// runs, from a later read.
	stale := rollup.Key{Tenant: "acme", Device: "b", Metric: "x", Minute: m1}
	if err := rs.Insert(ctx, []rollup.Row{{Key: stale, Writer: 1, Part: 5, Count: 7, Sum: 7, Min: 1, Max: 1, Version: 1}}); err != nil {
		t.Fatal(err)
	}
	fed := rollup.Row{Key: rollup.Key{Tenant: "acme", Device: "c", Metric: "x", Minute: m2}, Writer: rollup.RebuildWriter,
		Count: 1, Sum: 2, Min: 2, Max: 2, FirstTS: m2, FirstValue: 2, LastTS: m2, LastValue: 2, Version: 9}
	dst := &rowsReader{Store: rs, feedRow: &fed}

	res, err := Rebuild(ctx, raw, dst, "acme", "", day.Start(), day.End(), 3, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(dst.read, []string{"b"}) || !dst.injected {
		t.Errorf("rows read of %q (feed row stored: %v), want only b's", dst.read, dst.injected)
	}
	if res.DeviceDays != 3 || res.Written != 7 || res.Retracted != 1 {
		t.Errorf("first rebuild: %+v, want 3 device-days, 7 rows written (6, and the retraction of b's partial row)", res)
	}
	rows, err := rs.Rows(ctx, rollup.Filter{Tenant: "acme", Device: "c", From: day.Start(), To: day.End()})
	if err != nil {
		t.Fatal(err)
	}
	slices.SortFunc(rows, func(x, y rollup.Row) int { return int(x.Minute - y.Minute) })
	if len(rows) != 2 || rows[0].Version != 3 || rows[1].Version != 9 || rows[1].Count != 1 {
		t.Errorf("c's rows: %+v, want minute 1 of the rebuild and minute 2 of the feed, one each", rows)
	}
	v, err := Verify(ctx, raw, rs, "acme", day)
	if err != nil {
		t.Fatal(err)
	}
	if v.Devices != 3 || v.RawRows != 6 || v.RollupRows != 6 || len(v.Mismatches) != 0 {
		t.Errorf("verify after the rebuild: %+v, want 3 devices, 6 values each side, no mismatch", v)
	}

	// Every device has rollups now: a second rebuild reads them all and
	// replaces its own rows.
	dst.read, dst.feedRow = nil, nil
	res, err = Rebuild(ctx, raw, dst, "acme", "", day.Start(), day.End(), 10, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(dst.read, []string{"a", "b", "c"}) || res.Written != 6 || res.Retracted != 0 {
		t.Errorf("second rebuild read %q and did %+v, want a, b and c read, 6 rows written, none retracted", dst.read, res)
	}
}

// A rebuild inserts the rows of many device-days together, not one synced
// insert each, and reports a device-day done only once its rows are
// stored: when the insert fails, none is reported and the error names the
// device-days whose rows were lost.
func TestRebuildBatchesInserts(t *testing.T) {
	ctx := t.Context()
	raw, rs := openRawAndRollups(t)
	day := model.DayOf(base.UnixMilli())
	for _, device := range []string{"a", "b", "c"} {
		commitDay(t, raw, device, day, 0, model.ReadingRow{TS: day.Start(), Metric: "x", Value: 1})
	}
	dst := &rowsReader{Store: rs, fail: errors.New("disk full")}
	var steps []Progress
	note := func(p Progress) { steps = append(steps, p) }
	_, err := Rebuild(ctx, raw, dst, "acme", "", day.Start(), day.End(), 2, note)
	if err == nil || !strings.Contains(err.Error(), `"a"`) || !strings.Contains(err.Error(), `"c"`) || len(steps) != 0 {
		t.Errorf("rebuild with a failing insert: %v, %d device-days reported; want an error naming a to c and none reported", err, len(steps))
	}
	dst.fail, dst.inserts = nil, 0
	res, err := Rebuild(ctx, raw, dst, "acme", "", day.Start(), day.End(), 3, note)
	if err != nil {
		t.Fatal(err)
	}
	if dst.inserts != 1 || res.DeviceDays != 3 || len(steps) != 3 || steps[2] != (Progress{Done: 3, Total: 3, Device: "c", Day: day}) {
		t.Errorf("rebuild of three devices: %d inserts, %+v, progress %+v; want one insert and three device-days reported", dst.inserts, res, steps)
	}
}

// hideScanner is a raw store without its one-pass day scan.
type hideScanner struct{ Raw }

// catalogueCounter counts the catalogue reads made through it.
type catalogueCounter struct {
	*pebblestore.Store
	reads []string
}

func (c *catalogueCounter) Catalogue(ctx context.Context, sd model.SeriesDay) ([]model.PartitionInfo, error) {
	c.reads = append(c.reads, sd.Series)
	return c.Store.Catalogue(ctx, sd)
}

// A rebuild of every device of the embedded store reads the day in one
// pass and gives exactly what a device-at-a-time rebuild gives: the same
// rows and tombstones, the same result. Only the device split over two
// partitions is read through the reader.
func TestRebuildOnePassMatchesDeviceAtATime(t *testing.T) {
	ctx := t.Context()
	raw, one := openRawAndRollups(t)
	each, err := rollupstore.Open(filepath.Join(t.TempDir(), "each"), quiet)
	if err != nil {
		t.Fatal(err)
	}
	defer each.Close()
	day := model.DayOf(base.UnixMilli())
	write := func(device string, sub uint32, ts ...int64) {
		t.Helper()
		var rows []model.ReadingRow
		for i, at := range ts {
			rows = append(rows, model.ReadingRow{TS: at, Metric: "x", Value: float64(i)}, model.ReadingRow{TS: at, Metric: "y", Type: model.TypeInt, Int: int64(i)})
		}
		commitDay(t, raw, device, day, sub, rows...)
	}
	m := func(i int64) int64 { return day.Start() + i*rollup.MinuteMillis + 7 }
	write("a", 0, m(1), m(1)+5, m(2))
	write("b", 0, m(600), m(1439)) // the second outside the rebuilt range
	write("c", 0, m(3), m(4))
	write("c", 1<<24|1, m(4), m(5)) // split; minute 4 in both partitions
	write("d", 0, m(1000))          // outside the range only
	ghost := rollup.Key{Tenant: "acme", Device: "e", Metric: "x", Minute: m(7) - 7}
	for _, rs := range []*rollupstore.Store{one, each} {
		if err := rs.Insert(ctx, []rollup.Row{{Key: ghost, Writer: 1, Count: 2, Sum: 2, Min: 1, Max: 1, Version: 1}}); err != nil {
			t.Fatal(err)
		}
	}
	from, to := day.Start(), day.Start()+900*rollup.MinuteMillis
	counted := &catalogueCounter{Store: raw}
	gotOne, err := Rebuild(ctx, counted, one, "acme", "", from, to, 5, nil)
	if err != nil {
		t.Fatal(err)
	}
	gotEach, err := Rebuild(ctx, hideScanner{raw}, each, "acme", "", from, to, 5, nil)
	if err != nil {
		t.Fatal(err)
	}
	if gotOne != gotEach || gotOne.DeviceDays != 5 || gotOne.Retracted != 1 {
		t.Errorf("one pass %+v, device at a time %+v; want the same, 5 device-days, the ghost retracted", gotOne, gotEach)
	}
	if !slices.Equal(counted.reads, []string{"c"}) {
		t.Errorf("catalogues read %q, want only the split device's", counted.reads)
	}
	rowsOf := func(rs *rollupstore.Store) []rollup.Row {
		rows, err := rs.Rows(ctx, rollup.Filter{Tenant: "acme", From: day.Start(), To: day.End()})
		if err != nil {
			t.Fatal(err)
		}
		slices.SortFunc(rows, func(x, y rollup.Row) int {
			return strings.Compare(fmt.Sprint(x.Key, x.Writer, x.Part), fmt.Sprint(y.Key, y.Writer, y.Part))
		})
		return rows
	}
	if a, b := rowsOf(one), rowsOf(each); len(a) == 0 || !cmp.Equal(a, b) {
		t.Errorf("rows after a one-pass rebuild:\n%+v\nafter a device-at-a-time one:\n%+v", a, b)
	}

	// Verify reads the day in one pass too, and finds the same: here b's
	// minute 1439, outside the rebuilt range, and d's minute 1000 have no
	// rollups, and a gateway's row of a's minute 1 counts a reading more.
	extra := rollup.Key{Tenant: "acme", Device: "a", Metric: "x", Minute: m(1) - 7}
	if err := one.Insert(ctx, []rollup.Row{{Key: extra, Writer: 3, Count: 1, Sum: 1, Min: 1, Max: 1, Version: 9}}); err != nil {
		t.Fatal(err)
	}
	counted.reads = nil
	vOne, err := Verify(ctx, counted, one, "acme", day)
	if err != nil {
		t.Fatal(err)
	}
	vEach, err := Verify(ctx, hideScanner{raw}, one, "acme", day)
	if err != nil {
		t.Fatal(err)
	}
	if !cmp.Equal(vOne, vEach) || len(vOne.Mismatches) != 5 || vOne.Devices != 4 {
		t.Errorf("verify in one pass:\n%+v\ndevice at a time:\n%+v\nwant the same, 4 devices and 5 mismatches (a's x; b's and d's x and y)", vOne, vEach)
	}
	if !slices.Equal(counted.reads, []string{"c"}) {
		t.Errorf("verify read the catalogues of %q, want only the split device's", counted.reads)
	}
}

// noRows is a rollup store whose Rows fails: what reads through it must
// stream its rows.
type noRows struct{ *rollupstore.Store }

func (noRows) Rows(context.Context, rollup.Filter) ([]rollup.Row, error) {
	return nil, errors.New("rows gathered")
}

// Verify folds the embedded rollup store's rows as it reads them
// (EachRow), never gathering a chunk's rows, and finds what it finds
// otherwise.
func TestVerifyStreamsRollupRows(t *testing.T) {
	ctx := t.Context()
	raw, rs := openRawAndRollups(t)
	day := model.DayOf(base.UnixMilli())
	commitDay(t, raw, "a", day, 0, model.ReadingRow{TS: day.Start(), Metric: "x", Value: 1})
	if err := rs.Insert(ctx, []rollup.Row{{Key: rollup.Key{Tenant: "acme", Device: "a", Metric: "x", Minute: day.Start()}, Writer: rollup.RebuildWriter,
		Count: 2, Sum: 2, Min: 1, Max: 1, Version: 1}}); err != nil {
		t.Fatal(err)
	}
	v, err := Verify(ctx, raw, noRows{rs}, "acme", day)
	if err != nil || v.Devices != 1 || len(v.Mismatches) != 1 || v.Mismatches[0].Rollup != 2 {
		t.Errorf("verify: %+v, %v; want one device whose rollups count 2 values where the raw store has 1", v, err)
	}
}

// failRowsOf is a rollup store whose Rows fails for one device, or, with
// cancel set, cancels the rebuild's context there.
type failRowsOf struct {
	*rollupstore.Store
	device string
	cancel context.CancelFunc
}

func (f failRowsOf) Rows(ctx context.Context, fl rollup.Filter) ([]rollup.Row, error) {
	if fl.Device == f.device {
		if f.cancel == nil {
			return nil, errors.New("rows failed")
		}
		f.cancel()
	}
	return f.Store.Rows(ctx, fl)
}

// A rebuild that fails in the middle of its pass over the day, or is
// cancelled there, leaves no iterator of the raw store open (Close says
// so otherwise) and no goroutine of the pass behind.
func TestRebuildStoppedMidPassLeaksNothing(t *testing.T) {
	for _, cancelled := range []bool{false, true} {
		ctx, cancel := context.WithCancel(t.Context())
		raw, err := pebblestore.Open(filepath.Join(t.TempDir(), "raw"), pebblestore.Options{NoSync: true}, quiet)
		if err != nil {
			t.Fatal(err)
		}
		rs, err := rollupstore.Open(filepath.Join(t.TempDir(), "rollups"), quiet)
		if err != nil {
			t.Fatal(err)
		}
		day := model.DayOf(base.UnixMilli())
		for i := range 30 {
			commitDay(t, raw, fmt.Sprintf("d%02d", i), day, 0, model.ReadingRow{TS: day.Start() + int64(i), Metric: "x", Value: 1})
		}
		// d10 has rollups, so its rows are read: that read fails, or
		// cancels the rebuild, with the pass at d10.
		if err := rs.Insert(ctx, []rollup.Row{{Key: rollup.Key{Tenant: "acme", Device: "d10", Metric: "x", Minute: day.Start()}, Writer: 1, Count: 1, Version: 1}}); err != nil {
			t.Fatal(err)
		}
		goroutines := runtime.NumGoroutine()
		dst := failRowsOf{Store: rs, device: "d10"}
		if cancelled {
			dst.cancel = cancel
		}
		_, err = Rebuild(ctx, raw, dst, "acme", "", day.Start(), day.End(), 2, nil)
		if cancelled && !errors.Is(err, context.Canceled) || !cancelled && err == nil {
			t.Errorf("cancelled %v: rebuild returned %v", cancelled, err)
		}
		if err := raw.Close(); err != nil {
			t.Errorf("cancelled %v: closing the raw store after the rebuild: %v", cancelled, err)
		}
		if err := rs.Close(); err != nil {
			t.Fatal(err)
		}
		for deadline := time.Now().Add(time.Second); runtime.NumGoroutine() > goroutines && time.Now().Before(deadline); {
			time.Sleep(10 * time.Millisecond)
		}
		if n := runtime.NumGoroutine(); n > goroutines {
			t.Errorf("cancelled %v: %d goroutines after the rebuild, %d before", cancelled, n, goroutines)
		}
		cancel()
	}
}

// A device-day of more rows than a batch holds is inserted from its own
// rows, in chunks of a batch.
func TestRebuildLargeDeviceDay(t *testing.T) {
	ctx := t.Context()
	raw, rs := openRawAndRollups(t)
	day := model.DayOf(base.UnixMilli())
	var rows []model.ReadingRow
	for minute := range int64(1440) {
		for m := range 40 {
			rows = append(rows, model.ReadingRow{TS: day.Start() + minute*rollup.MinuteMillis, Metric: fmt.Sprintf("m%02d", m), Value: float64(m)})
		}
	}
	commitDay(t, raw, "big", day, 0, rows...)
	commitDay(t, raw, "small", day, 0, model.ReadingRow{TS: day.Start(), Metric: "x", Value: 1})
	dst := &rowsReader{Store: rs}
	var steps []Progress
	res, err := Rebuild(ctx, raw, dst, "acme", "", day.Start(), day.End(), 2, func(p Progress) { steps = append(steps, p) })
	if err != nil {
		t.Fatal(err)
	}
	// big's 57,600 rows: two inserts of their own; small's one row: one.
	if res.Written != 1440*40+1 || dst.inserts != 3 || len(steps) != 2 {
		t.Errorf("rebuild %+v in %d inserts, %d device-days reported; want 57,601 rows in 3 inserts, 2 reported", res, dst.inserts, len(steps))
	}
	v, err := Verify(ctx, raw, rs, "acme", day)
	if err != nil || len(v.Mismatches) != 0 || v.RawRows != 1440*40+1 {
		t.Errorf("verify after the rebuild: %+v, %v", v, err)
	}
}
