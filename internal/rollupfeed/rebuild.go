package rollupfeed

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/sluicehq/sluice/internal/model"
	"github.com/sluicehq/sluice/internal/reader"
	"github.com/sluicehq/sluice/internal/rollup"
	"github.com/sluicehq/sluice/internal/wire"
)

// Raw is what rebuild and verify need of the raw store: range reads, and
// the devices that have readings on a day.
type Raw interface {
	reader.Store
	Series(ctx context.Context, tenant string, kind model.Kind, day model.Day) ([]string, error)
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
func Rebuild(ctx context.Context, raw Raw, dst Backend, tenant, device string, from, to int64, version uint64, progress func(Progress)) (RebuildResult, error) {
	if _, err := model.SpanDays(from, to); err != nil {
		return RebuildResult{}, fmt.Errorf("rebuild range: %w", err)
	}
	from = rollup.MinuteOf(from)
	if m := rollup.MinuteOf(to); m < to {
		to = m + rollup.MinuteMillis
	}
	type job struct {
		day    model.Day
		device string
	}
	var jobs []job
	for day := model.DayOf(from); day.Start() < to; day++ {
		if err := ctx.Err(); err != nil {
			return RebuildResult{}, err
		}
		devs, err := devicesOf(ctx, raw, dst, tenant, day, device)
		if err != nil {
			return RebuildResult{}, err
		}
		for _, d := range devs {
			jobs = append(jobs, job{day, d})
		}
	}
	var res RebuildResult
	for i, j := range jobs {
		if err := ctx.Err(); err != nil {
			return res, err
		}
		lo, hi := max(from, j.day.Start()), min(to, j.day.End())
		readings, err := readAll(ctx, raw, tenant, j.device, lo, hi)
		if err != nil {
			return res, err
		}
		rows := rollup.Compute(tenant, j.device, readings, version)
		old, err := dst.Rows(ctx, rollup.Filter{Tenant: tenant, Device: j.device, From: lo, To: hi})
		if err != nil {
			return res, fmt.Errorf("read rollups of %q on %s: %w", j.device, j.day, err)
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
		for c := range slices.Chunk(rows, 50_000) {
			if err := dst.Insert(ctx, c); err != nil {
				return res, fmt.Errorf("write rebuilt rollups of %q on %s: %w", j.device, j.day, err)
			}
		}
		for _, r := range readings {
			res.Readings += int64(len(r.Metrics))
		}
		res.Written += len(rows)
		res.DeviceDays++
		if progress != nil {
			progress(Progress{Done: i + 1, Total: len(jobs), Device: j.device, Day: j.day})
		}
	}
	return res, nil
}

// devicesOf lists the devices with raw readings or rollups on a day.
func devicesOf(ctx context.Context, raw Raw, dst Backend, tenant string, day model.Day, only string) ([]string, error) {
	if only != "" {
		return []string{only}, nil
	}
	devs, err := raw.Series(ctx, tenant, model.KindReadings, day)
	if err != nil {
		return nil, fmt.Errorf("list devices of %s: %w", day, err)
	}
	withRollups, err := dst.Devices(ctx, tenant, day)
	if err != nil {
		return nil, fmt.Errorf("list devices with rollups on %s: %w", day, err)
	}
	devs = append(devs, withRollups...)
	slices.Sort(devs)
	return slices.Compact(devs), nil
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

// Mismatch is one (device, metric) whose rollup count differs from its raw
// count on the verified day.
type Mismatch = wire.Mismatch

// VerifyResult is the outcome of Verify.
type VerifyResult struct {
	Day        model.Day
	Devices    int
	Metrics    int   // (device, metric) pairs compared
	RawRows    int64 // reading rows in the raw store
	RollupRows int64 // the same, counted by the rollups
	Mismatches []Mismatch
}

// Verify counts the readings of every device and metric of tenant on day in
// the raw store and in the rollups, and lists every difference.
func Verify(ctx context.Context, raw Raw, dst Backend, tenant string, day model.Day) (VerifyResult, error) {
	res := VerifyResult{Day: day}
	rows, err := dst.Rows(ctx, rollup.Filter{Tenant: tenant, From: day.Start(), To: day.End()})
	if err != nil {
		return res, fmt.Errorf("read rollups of %s: %w", day, err)
	}
	devs, err := raw.Series(ctx, tenant, model.KindReadings, day)
	if err != nil {
		return res, fmt.Errorf("list devices of %s: %w", day, err)
	}
	for _, r := range rows {
		devs = append(devs, r.Device)
	}
	slices.Sort(devs)
	devs = slices.Compact(devs)
	type dm struct{ device, metric string }
	rawN := map[dm]int64{}
	for _, d := range devs {
		readings, err := readAll(ctx, raw, tenant, d, day.Start(), day.End())
		if err != nil {
			return res, err
		}
		for _, r := range readings {
			for _, m := range r.Metrics {
				rawN[dm{d, m.Name}]++
			}
		}
	}
	rollN := map[dm]int64{}
	for _, r := range rows {
		rollN[dm{r.Device, r.Metric}] += int64(r.Count)
	}
	keys := map[dm]struct{}{}
	for k, n := range rawN {
		keys[k] = struct{}{}
		res.RawRows += n
	}
	for k, n := range rollN {
		keys[k] = struct{}{}
		res.RollupRows += n
	}
	for k := range keys {
		if rawN[k] != rollN[k] {
			res.Mismatches = append(res.Mismatches, Mismatch{Device: k.device, Metric: k.metric, Raw: rawN[k], Rollup: rollN[k]})
		}
	}
	slices.SortFunc(res.Mismatches, func(a, b Mismatch) int {
		if a.Device != b.Device {
			if a.Device < b.Device {
				return -1
			}
			return 1
		}
		if a.Metric < b.Metric {
			return -1
		}
		if a.Metric > b.Metric {
			return 1
		}
		return 0
	})
	res.Devices, res.Metrics = len(devs), len(keys)
	return res, nil
}

// Version returns a rebuild version for time t: its nanoseconds.
func Version(t time.Time) uint64 { return uint64(t.UnixNano()) }
