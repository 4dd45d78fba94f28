package rollupfeed

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/sluicehq/sluice/internal/model"
	"github.com/sluicehq/sluice/internal/reader"
	"github.com/sluicehq/sluice/internal/rollup"
	"github.com/sluicehq/sluice/internal/store"
	"github.com/sluicehq/sluice/internal/wire"
)

// Raw is what rebuild and verify need of the raw store: range reads, and
// the devices of a day, listed from its partition catalogue.
type Raw interface {
	reader.Store
	// EachSeries calls fn with every device (kind readings) of tenant
	// that has a catalogue entry on day, once each, in byte order.
	EachSeries(ctx context.Context, tenant string, kind model.Kind, day model.Day, fn func(series string) error) error
}

// Backend is a rollup store that rebuild can replace rows in.
type Backend interface {
	Inserter
	Rows(ctx context.Context, f rollup.Filter) ([]rollup.Row, error)
	// Devices lists, sorted, the devices of tenant with rollups on day.
	Devices(ctx context.Context, tenant string, day model.Day) ([]string, error)
}

// Progress reports one finished device-day of a rebuild.
type Progress struct {
	Done, Total int
	Device      string
	Day         model.Day
}

// RebuildResult sums up a rebuild.
type RebuildResult = wire.RebuildResult

// Rebuild recomputes the rollups of tenant's devices (or of device alone)
// over the whole minutes that overlap [from, to) from the raw store, and
// replaces what the backend holds there: the recomputed rows are written
// with writer rollup.RebuildWriter and version, and every other live row of
// those minutes gets a tombstone of that version. version must be higher
// than any version written before (the current time in ns). from and to
// must lie in the valid time range (model.CheckTime); how many days they
// may span is the caller's limit (the rollup API checks read.max_days
// before it starts). The rebuild stops when ctx ends.
//
// The devices of a day are those with a catalogue entry in the raw store or
// rollups in the backend. Only one day's device names are held at a time:
// the days after the first are counted before the rebuild starts, for
// progress, and listed again when their turn comes (a device that appears
// meanwhile raises Progress.Total then). Rows are stored a batch of
// devices at a time, and a device-day reported (progress) once its rows
// are; on an error the result also counts the rows gathered and not yet
// stored.
func Rebuild(ctx context.Context, raw Raw, dst Backend, tenant, device string, from, to int64, version uint64, progress func(Progress)) (RebuildResult, error) {
	if _, err := model.SpanDays(from, to); err != nil {
		return RebuildResult{}, fmt.Errorf("rebuild range: %w", err)
	}
	from = rollup.MinuteOf(from)
	if m := rollup.MinuteOf(to); m < to {
		to = m + rollup.MinuteMillis
	}
	first := model.DayOf(from)
	counted := make([]int, model.DayOf(to-1)-first+1)
	total := 0
	for i := 1; i < len(counted); i++ {
		n := 0
		if err := eachDevice(ctx, raw, dst, tenant, first+model.Day(i), device, func(string, bool) error { n++; return nil }); err != nil {
			return RebuildResult{}, err
		}
		counted[i] = n
		total += n
	}
	rb := rebuilder{raw: raw, dst: dst, tenant: tenant, version: version, total: total,
		batch: rebuildBatch{dst: dst, progress: progress}}
	for i := range counted {
		day := first + model.Day(i)
		var devs []string
		var rolled []bool
		if err := eachDevice(ctx, raw, dst, tenant, day, device, func(d string, hasRollups bool) error {
			devs, rolled = append(devs, d), append(rolled, hasRollups)
			return nil
		}); err != nil {
			return rb.res, err
		}
		rb.total += len(devs) - counted[i]
		lo, hi := max(from, day.Start()), min(to, day.End())
		// A rebuild of every device takes their readings from one pass
		// over the day where the store can make one (DayScanner); a
		// device that pass cannot hand over whole, and every device
		// elsewhere, is read on its own.
		var pass dayPass
		if sc, ok := raw.(DayScanner); ok && device == "" {
			pass = newDayPass(ctx, sc, tenant, day, store.Range{From: lo, To: hi})
		}
		err := rb.day(ctx, &pass, day, lo, hi, devs, rolled)
		pass.close()
		if err != nil {
			return rb.res, err
		}
	}
	return rb.res, rb.batch.flush(ctx)
}

// rebuilder is the state of one Rebuild.
type rebuilder struct {
	raw     Raw
	dst     Backend
	tenant  string
	version uint64
	total   int // device-days to rebuild, as known so far
	res     RebuildResult
	batch   rebuildBatch
}

// day rebuilds devs of day over [lo, hi) (rolled[j] says the backend
// listed devs[j] with rollups), their readings taken from pass.
func (rb *rebuilder) day(ctx context.Context, pass *dayPass, day model.Day, lo, hi int64, devs []string, rolled []bool) error {
	for j, d := range devs {
		if err := ctx.Err(); err != nil {
			return err
		}
		readings, have, err := pass.take(d)
		if err != nil {
			return fmt.Errorf("read the readings of %s: %w", day, err)
		}
		if !have {
			if readings, err = readAll(ctx, rb.raw, rb.tenant, d, lo, hi); err != nil {
				return err
			}
		}
		rows, err := rebuildDevice(ctx, rb.dst, rb.tenant, d, day, lo, hi, rb.version, rolled[j], readings, &rb.res)
		if err != nil {
			return err
		}
		if err := rb.batch.add(ctx, rows, Progress{Done: rb.res.DeviceDays, Total: rb.total, Device: d, Day: day}); err != nil {
			return err
		}
	}
	return nil
}

// DayScanner is a raw store that reads a tenant's readings of a day in one
// pass, device by device (the embedded store: pebblestore.Store). A rebuild
// of every device of a day, and a verification, use it instead of reading
// each device's catalogue and partitions in turn; a device it cannot hand
// over whole (whole false) is read through the reader.
type DayScanner interface {
	EachSeriesReadings(ctx context.Context, tenant string, day model.Day, r store.Range, fn func(series string, readings []model.Reading, whole bool) error) error
}

// rebuildBatchRows is how many rows a rebuild gathers, of as many devices
// as it takes, before it inserts them: one synced insert per device made a
// rebuild of many small devices wait on a sync each.
const rebuildBatchRows = 50_000

// rebuildBatch gathers the rows of consecutive device-days and inserts
// them together; a device-day's progress is reported once its rows are
// stored.
type rebuildBatch struct {
	dst      Inserter
	progress func(Progress)
	rows     []rollup.Row
	done     []Progress
}

// add gathers one device-day's rows, inserting what was gathered once it
// reaches rebuildBatchRows (a device-day that large alone is inserted
// from its own slice, not copied).
func (b *rebuildBatch) add(ctx context.Context, rows []rollup.Row, p Progress) error {
	b.done = append(b.done, p)
	if len(b.rows) == 0 && len(rows) >= rebuildBatchRows {
		return b.insert(ctx, rows)
	}
	b.rows = append(b.rows, rows...)
	// Device-days without rows (none in the range) end a batch too, now
	// and then: their progress is neither held back nor gathered without
	// bound.
	if len(b.rows) < rebuildBatchRows && len(b.done) < rebuildBatchDays {
		return nil
	}
	return b.flush(ctx)
}

// rebuildBatchDays is the most device-days a batch gathers.
const rebuildBatchDays = 4096

// flush inserts the rows gathered, then reports their device-days.
func (b *rebuildBatch) flush(ctx context.Context) error { return b.insert(ctx, b.rows) }

// insert inserts rows, the rows of the device-days gathered in done, then
// reports those device-days.
func (b *rebuildBatch) insert(ctx context.Context, rows []rollup.Row) error {
	for c := range slices.Chunk(rows, rebuildBatchRows) {
		if err := b.dst.Insert(ctx, c); err != nil {
			first, last := b.done[0], b.done[len(b.done)-1]
			return fmt.Errorf("write rebuilt rollups of %q on %s to %q on %s: %w", first.Device, first.Day, last.Device, last.Day, err)
		}
	}
	if b.progress != nil {
		for _, p := range b.done {
			b.progress(p)
		}
	}
	b.rows, b.done = b.rows[:0], b.done[:0]
	return nil
}

// rebuildDevice recomputes device's rollups over [lo, hi), whole minutes of
// day, from its readings there, returns the rows that replace what the
// backend holds there, and adds them to res. hasRollups says the backend
// listed the device among those with rollups on day when the rebuild
// listed that day; one it did not list has no rows to replace or retract,
// so they are not read (on the embedded store, two thirds of a first
// rebuild's CPU went into reading each device's hours for nothing;
// docs/benchmarks.md, item 35). Rows the feed stores for the device
// meanwhile carry the rebuild's writer and part, so of those and the
// rebuild's own the higher version stands, as when they were read. Rows
// of another writer or part (earlier versions of Sluice wrote such) that
// reach the backend after the listing, from such a gateway's outbox, are
// not retracted.
func rebuildDevice(ctx context.Context, dst Backend, tenant, device string, day model.Day, lo, hi int64, version uint64,
	hasRollups bool, readings []model.Reading, res *RebuildResult) ([]rollup.Row, error) {
	rows := rollup.Compute(tenant, device, readings, version)
	var old []rollup.Row
	if hasRollups {
		var err error
		if old, err = dst.Rows(ctx, rollup.Filter{Tenant: tenant, Device: device, From: lo, To: hi}); err != nil {
			return nil, fmt.Errorf("read rollups of %q on %s: %w", device, day, err)
		}
	}
	// The keys rebuilt now, before any retraction is added: a row of an
	// earlier rebuild is replaced when its key is among them, else
	// retracted (its minute has no readings any more).
	rebuilt := make(map[rollup.Key]bool, len(rows))
	for _, r := range rows {
		rebuilt[r.Key] = true
	}
	for _, o := range old {
		if o.Writer == rollup.RebuildWriter && o.Part == 0 && rebuilt[o.Key] {
			continue // replaced by its new version
		}
		rows = append(rows, rollup.Row{Key: o.Key, Writer: o.Writer, Part: o.Part, Version: version})
		res.Retracted++
	}
	for _, r := range readings {
		res.Readings += int64(len(r.Metrics))
	}
	res.Written += len(rows)
	res.DeviceDays++
	return rows, nil
}

// eachDevice calls fn with every device of tenant on day that has a
// catalogue entry in the raw store or rollups in the backend, once each, in
// byte order, and whether the backend listed it; with only set, with only
// alone (taken to have rollups: its rows are read).
func eachDevice(ctx context.Context, raw Raw, dst Backend, tenant string, day model.Day, only string, fn func(device string, hasRollups bool) error) error {
	if only != "" {
		return fn(only, true)
	}
	withRollups, err := dst.Devices(ctx, tenant, day)
	if err != nil {
		return fmt.Errorf("list devices with rollups on %s: %w", day, err)
	}
	return mergeDevices(ctx, raw, tenant, day, withRollups, fn)
}

// mergeDevices calls fn with every device of tenant on day that has a
// catalogue entry in the raw store or is among others, once each, in byte
// order, and whether it is among others, merging the store's listing with
// others as it streams. It sorts others in place.
func mergeDevices(ctx context.Context, raw Raw, tenant string, day model.Day, others []string, fn func(device string, inOthers bool) error) error {
	slices.Sort(others)
	others = slices.Compact(others)
	var ferr error // fn's, returned as it is
	call := func(d string, in bool) error { ferr = fn(d, in); return ferr }
	i := 0
	err := raw.EachSeries(ctx, tenant, model.KindReadings, day, func(d string) error {
		for ; i < len(others) && others[i] < d; i++ {
			if err := call(others[i], true); err != nil {
				return err
			}
		}
		in := i < len(others) && others[i] == d
		if in {
			i++
		}
		return call(d, in)
	})
	if ferr != nil {
		return ferr
	}
	if err != nil {
		return fmt.Errorf("list devices of %s: %w", day, err)
	}
	for _, d := range others[i:] {
		if err := fn(d, true); err != nil {
			return err
		}
	}
	return nil
}

func readAll(ctx context.Context, raw reader.Store, tenant, device string, from, to int64) ([]model.Reading, error) {
	var out []model.Reading
	q := reader.Query{Tenant: tenant, Series: device, From: from, To: to, Limit: reader.MaxLimit}
	for {
		page, next, err := reader.Readings(ctx, raw, q)
		if err != nil {
			return nil, fmt.Errorf("read raw readings of %q: %w", device, err)
		}
		out = append(out, page...)
		if next == "" {
			return out, nil
		}
		q.Cursor = next
	}
}

// Mismatch is one (device, metric) whose rollups differ from its raw
// readings on the verified day.
type Mismatch = wire.Mismatch

// VerifyResult is the outcome of Verify.
type VerifyResult struct {
	Day        model.Day
	Devices    int
	Metrics    int   // (device, metric) pairs compared
	RawRows    int64 // values in the raw store (a reading of n metrics counts n)
	RollupRows int64 // the same, counted by the rollups
	Mismatches []Mismatch
}

// Verify aggregates the readings of every device and metric of tenant on
// day in the raw store and in the rollups, and lists every difference: of
// the count of values, the count of each type (float, int, bool, string),
// the exact int sum and the count of true bools. (Float sums, extremes and
// first and last values are not compared: a sum's rounding depends on the
// order of its terms, which partial rows of earlier gateways change.) The
// devices are those with a catalogue entry in the raw store or rollups on
// day; their raw readings are read a device at a time (from one pass over
// the day on a DayScanner, which then reads the day as it was when the
// pass began: verify a day that is over), their rollups verifyChunk
// devices at a time, folded as they are read on a backend that streams
// them, so that memory holds those of a chunk rather than the day's (a day
// of a million devices has millions of rows). A SessionStore's chunks are
// read through a session each.
func Verify(ctx context.Context, raw Raw, dst Backend, tenant string, day model.Day) (VerifyResult, error) {
	return verify(ctx, raw, dst, tenant, day, verifyChunk, sessionsOf(raw))
}

func verify(ctx context.Context, raw Raw, dst Backend, tenant string, day model.Day, verifyChunk int,
	sessions func(ctx context.Context) (ReadSession, error)) (VerifyResult, error) {
	res := VerifyResult{Day: day}
	rolled, err := dst.Devices(ctx, tenant, day)
	if err != nil {
		return res, fmt.Errorf("verify %s: %w", day, err)
	}
	// On a store that reads a day in one pass, the devices' readings come
	// from that pass, in the same order as the chunks take them.
	var pass dayPass
	if sc, ok := raw.(DayScanner); ok {
		pass = newDayPass(ctx, sc, tenant, day, store.Range{From: day.Start(), To: day.End()})
	}
	defer pass.close()
	// The devices are taken verifyChunk at a time, in order, with the
	// rollups of their range of names: memory holds a chunk's rollups, not
	// the day's.
	// The ranges tile the names: the first starts at "", each ends where
	// the next chunk starts, the last is open.
	var chunk []string
	from := ""
	flush := func(next string) error {
		if len(chunk) == 0 {
			return nil
		}
		f := rollup.Filter{Tenant: tenant, From: day.Start(), To: day.End(), DeviceFrom: from, DeviceTo: next}
		from = next
		agg, err := rollupAggregates(ctx, dst, f)
		if err != nil {
			return err
		}
		// A device whose first rollups came after the list was read is in
		// its range too: verified with the others.
		listed := len(chunk)
		for d := range agg {
			if _, found := slices.BinarySearch(chunk[:listed], d); !found {
				chunk = append(chunk, d)
			}
		}
		slices.Sort(chunk)
		var src reader.Store = raw
		if sessions != nil {
			s, err := sessions(ctx)
			if err != nil {
				return fmt.Errorf("verify %s: open a read session: %w", day, err)
			}
			defer func() { _ = s.Close() }() // read-only: nothing to lose
			src = s
		}
		for _, d := range chunk {
			readings, have, err := pass.take(d)
			if err != nil {
				return fmt.Errorf("verify %s: %w", day, err)
			}
			if !have {
				if readings, err = readAll(ctx, src, tenant, d, day.Start(), day.End()); err != nil {
					return err
				}
			}
			verifyDevice(tenant, d, readings, agg[d], &res)
		}
		chunk = chunk[:0]
		return nil
	}
	prev, first := "", true
	err = mergeDevices(ctx, raw, tenant, day, rolled, func(d string, _ bool) error {
		// The ranges hold only if the names come in order.
		if !first && d <= prev {
			return fmt.Errorf("verify %s: device %q listed after %q: the raw store's devices are not in order", day, d, prev)
		}
		prev, first = d, false
		if len(chunk) == verifyChunk {
			if err := flush(d); err != nil {
				return err
			}
		}
		chunk = append(chunk, d)
		return nil
	})
	if err == nil {
		err = flush("")
	}
	if err != nil {
		return VerifyResult{Day: day}, err
	}
	return res, nil
}

// verifyChunk is how many devices Verify compares at a time.
const verifyChunk = 2048

// verifyDevice compares device d's raw readings of the day with its rollups
// (rolled, by metric) and adds the outcome to res.
func verifyDevice(tenant, d string, readings []model.Reading, rolled map[string]*rollup.Bucket, res *VerifyResult) {
	rawAgg := map[string]*rollup.Bucket{}
	for _, r := range rollup.Compute(tenant, d, readings, 0) {
		addRow(rawAgg, r)
	}
	metrics := slices.Collect(maps.Keys(rawAgg))
	for m := range rolled {
		if _, ok := rawAgg[m]; !ok {
			metrics = append(metrics, m)
		}
	}
	slices.Sort(metrics)
	for _, m := range metrics {
		var r, n rollup.Bucket
		if b := rawAgg[m]; b != nil {
			r = *b
		}
		if b := rolled[m]; b != nil {
			n = *b
		}
		res.RawRows += int64(r.Count)
		res.RollupRows += int64(n.Count)
		if diffs := compareAggregates(r, n); len(diffs) > 0 {
			res.Mismatches = append(res.Mismatches, Mismatch{Device: d, Metric: m, Raw: int64(r.Count), Rollup: int64(n.Count), Diffs: diffs})
		}
	}
	res.Devices++
	res.Metrics += len(metrics)
}

// compareAggregates names every aggregate Verify compares that differs
// between raw and rolled up, with both values.
func compareAggregates(raw, rolled rollup.Bucket) []string {
	var out []string
	for _, c := range []struct {
		name string
		r, n uint64
	}{
		{"count", raw.Count, rolled.Count},
		{"float_count", raw.FloatCount(), rolled.FloatCount()},
		{"int_count", raw.IntCount, rolled.IntCount},
		{"bool_count", raw.BoolCount, rolled.BoolCount},
		{"true_count", raw.TrueCount, rolled.TrueCount},
		{"str_count", raw.StrCount, rolled.StrCount},
	} {
		if c.r != c.n {
			out = append(out, fmt.Sprintf("%s: raw %d, rollup %d", c.name, c.r, c.n))
		}
	}
	if raw.IntSum != rolled.IntSum {
		out = append(out, fmt.Sprintf("int_sum: raw %s, rollup %s", raw.IntSum, rolled.IntSum))
	}
	return out
}

// addRow folds r into the aggregate of its metric in agg.
func addRow(agg map[string]*rollup.Bucket, r rollup.Row) {
	b := agg[r.Metric]
	if b == nil {
		b = &rollup.Bucket{}
		agg[r.Metric] = b
	}
	b.Merge(r)
}

// rollupAggregates returns what the rollups of tenant hold on day, by
// device and metric, each folded into one bucket.
func rollupAggregates(ctx context.Context, dst Backend, f rollup.Filter) (map[string]map[string]*rollup.Bucket, error) {
	out := map[string]map[string]*rollup.Bucket{}
	add := func(r rollup.Row) {
		m := out[r.Device]
		if m == nil {
			m = map[string]*rollup.Bucket{}
			out[r.Device] = m
		}
		addRow(m, r)
	}
	var err error
	if rs, ok := dst.(rowStreamer); ok {
		err = rs.EachRow(ctx, f, add)
	} else {
		var rows []rollup.Row
		if rows, err = dst.Rows(ctx, f); err == nil {
			for _, r := range rows {
				add(r)
			}
		}
	}
	if err != nil {
		return nil, fmt.Errorf("read rollups of %s, devices %q to %q: %w", model.DayOf(f.From), f.DeviceFrom, f.DeviceTo, err)
	}
	return out, nil
}

// rowStreamer is a backend that hands its rows over as it reads them (the
// embedded rollup store), so that Verify folds a chunk's rows without
// holding them: 2,048 devices of a day held 2.2 million rows at 10,000
// devices of 200 minutes each, and their collection and the collector's
// work on them made a verification 2.5 times slower than at ten times the
// devices (docs/benchmarks.md, item 35).
type rowStreamer interface {
	EachRow(ctx context.Context, f rollup.Filter, fn func(rollup.Row)) error
}

// Version returns a rebuild version for time t: its nanoseconds.
func Version(t time.Time) uint64 { return uint64(t.UnixNano()) }
