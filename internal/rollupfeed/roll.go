package rollupfeed

import (
	"cmp"
	"context"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/sluicehq/sluice/internal/reader"
	"github.com/sluicehq/sluice/internal/rollup"
)

// runGap is how far apart (in ms) two marked minutes of one device may be
// and still be recomputed from one range read: the minutes between them
// are read for nothing, which costs less than another read up to about a
// quarter of an hour of a device's readings.
const runGap = 15 * rollup.MinuteMillis

// roller recomputes due minutes every FlushInterval, and at once when more
// than MaxPending are pending.
func (f *Feed) roller() {
	defer close(f.rollDone)
	tick := time.NewTicker(f.cfg.FlushInterval)
	defer tick.Stop()
	for {
		select {
		case <-f.stopRoll:
			return
		case <-tick.C:
		case <-f.rollNow:
		}
		// A roll takes at most BatchRows minutes; keep rolling while there
		// were more due.
		for f.roll(f.shipCtx, false) {
			select {
			case <-f.stopRoll:
				return
			default:
			}
		}
		f.persistLost(false)
	}
}

// finalRoll recomputes every pending minute, due or not, until none is left
// or ctx ends (the marks of the rest stay for the next start).
func (f *Feed) finalRoll(ctx context.Context) {
	for ctx.Err() == nil {
		f.mu.Lock()
		left := f.pending.minutes
		f.mu.Unlock()
		if left == 0 {
			break
		}
		f.roll(ctx, true)
	}
	f.persistLost(true)
}

// roll takes the due devices (all with all), recomputes their marked
// minutes from the raw store and stores the rows, then forgets the marks
// no pending or in-flight minute needs. It reports whether it stopped at
// its limit with more due.
func (f *Feed) roll(ctx context.Context, all bool) bool {
	f.mu.Lock()
	// Marks written from now on are in a new generation, which this roll
	// does not forget.
	f.gen++
	due := f.now().Add(-f.cfg.RollDelay)
	if all {
		due = time.Unix(1<<40, 0)
	}
	// A recompute's rows (a few per minute) are held until stored: take
	// about a batch's worth of rows at a time.
	devs := f.pending.take(due, f.cfg.MaxPending, max(1, f.cfg.BatchRows/8))
	more := f.pending.head != nil && (!f.pending.head.since.After(due) || f.pending.minutes > f.cfg.MaxPending)
	f.m.pending.Set(float64(f.pending.minutes))
	f.room.Broadcast()
	f.mu.Unlock()
	if len(devs) > 0 {
		// Every commit that became durable before this moment is read
		// below; the rows carry it as their version, so that of two
		// gateways' recomputes of a minute the later read wins, whichever
		// is stored last.
		version := f.version()
		rows, failed := f.recompute(ctx, devs, version)
		f.m.emitted.Add(float64(len(rows)))
		f.store(rows)
		if len(failed) > 0 {
			f.mu.Lock()
			for _, d := range failed {
				f.pending.put(d)
			}
			f.mu.Unlock()
		}
	}
	f.forget()
	return more && ctx.Err() == nil
}

// version returns the current time in ns, strictly above every version this
// feed returned before.
func (f *Feed) version() uint64 {
	v := Version(f.now())
	if v <= f.lastVersion {
		v = f.lastVersion + 1
	}
	f.lastVersion = v
	return v
}

// recompute reads the marked minutes of devs from the raw store,
// ReadConcurrency devices at a time, and returns their rows and the devices
// whose read failed.
func (f *Feed) recompute(ctx context.Context, devs []*pendingDevice, version uint64) ([]rollup.Row, []*pendingDevice) {
	type result struct {
		rows []rollup.Row
		err  error
	}
	// In key order, each worker a contiguous share: a worker's reads then
	// move forward through the store, so that nearby devices share the
	// blocks read for them.
	slices.SortFunc(devs, func(a, b *pendingDevice) int {
		return cmp.Or(strings.Compare(a.tenant, b.tenant), strings.Compare(a.device, b.device))
	})
	results := make([]result, len(devs))
	workers := min(f.cfg.ReadConcurrency, len(devs))
	var wg sync.WaitGroup
	for w := range workers {
		lo, hi := w*len(devs)/workers, (w+1)*len(devs)/workers
		wg.Go(func() {
			var raw reader.Store = f.raw
			var err error
			if f.sessions != nil {
				var s ReadSession
				if s, err = f.sessions(ctx); err == nil {
					defer s.Close()
					raw = s
				}
			}
			for i := lo; i < hi; i++ {
				if err != nil {
					results[i].err = err
					continue
				}
				results[i].rows, results[i].err = f.recomputeDevice(ctx, raw, devs[i], version)
			}
		})
	}
	wg.Wait()
	n := 0
	for _, r := range results {
		n += len(r.rows)
	}
	rows := make([]rollup.Row, 0, n)
	var failed []*pendingDevice
	for i, r := range results {
		if r.err != nil {
			failed = append(failed, devs[i])
			f.m.rollErrors.Inc()
			if f.now().Sub(f.rollLogged) > 30*time.Second {
				f.logger.Error("recompute rollups from the raw store; will retry", "tenant", devs[i].tenant, "device", devs[i].device, "err", r.err)
				f.rollLogged = f.now()
			}
			continue
		}
		rows = append(rows, r.rows...)
	}
	return rows, failed
}

// recomputeDevice reads d's marked minutes, a run of nearby minutes per
// range read, and aggregates them whole.
func (f *Feed) recomputeDevice(ctx context.Context, raw reader.Store, d *pendingDevice, version uint64) ([]rollup.Row, error) {
	minutes := d.sortedMinutes()
	var out []rollup.Row
	for _, run := range runs(minutes, runGap) {
		readings, err := readAll(ctx, raw, d.tenant, d.device, run[0], run[1]+rollup.MinuteMillis)
		if err != nil {
			return nil, err
		}
		f.m.rawReads.Inc()
		f.m.rawReadings.Add(float64(len(readings)))
		for _, r := range rollup.Compute(d.tenant, d.device, readings, version) {
			if _, marked := slices.BinarySearch(minutes, r.Minute); marked {
				out = append(out, r)
			}
		}
	}
	f.m.rolled.Add(float64(len(minutes)))
	return out, nil
}

// forget deletes the marks of every generation below the oldest one a
// pending minute or a commit in flight belongs to.
func (f *Feed) forget() {
	f.mu.Lock()
	below := f.gen
	if g, ok := f.pending.oldestGen(); ok {
		below = min(below, g)
	}
	for g := range f.inflight {
		below = min(below, g)
	}
	done := below <= f.forgot
	f.mu.Unlock()
	if done {
		return
	}
	if err := f.marks.Forget(below); err != nil {
		f.logger.Error("forget rollup marks; retried on the next roll", "err", err)
		return
	}
	f.mu.Lock()
	f.forgot = max(f.forgot, below)
	f.mu.Unlock()
}
