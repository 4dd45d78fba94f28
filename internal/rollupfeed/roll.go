package rollupfeed

import (
	"cmp"
	"context"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/sluicehq/sluice/internal/model"
	"github.com/sluicehq/sluice/internal/outbox"
	"github.com/sluicehq/sluice/internal/reader"
	"github.com/sluicehq/sluice/internal/rollmarks"
	"github.com/sluicehq/sluice/internal/rollup"
)

// runGap is how far apart (in ms) two marked minutes of one device may be
// and still be recomputed from one range read: the minutes between them
// are read for nothing, which costs less than another read up to about a
// quarter of an hour of a device's readings.
const runGap = 15 * rollup.MinuteMillis

// roller recomputes due minutes every FlushInterval, and at once when the
// pending set weighs more than MaxPending.
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
		for {
			if more, _ := f.roll(f.rollCtx, false); !more {
				break
			}
			select {
			case <-f.stopRoll:
				return
			default:
			}
		}
		f.persistLost(false)
	}
}

// maxFailures is how many recomputes of a device may fail in a row before
// its minutes are given up (counted, their days marked dirty for a
// rebuild): a device that can never be read must not hold its marks, and
// every later generation's, forever.
const maxFailures = 10

// retryAfter is how long a device waits after its n-th failed recompute.
func retryAfter(n int) time.Duration {
	return min(time.Duration(1<<min(n, 10))*100*time.Millisecond, time.Minute)
}

// finalRoll recomputes every pending minute, due or not, until none is left,
// a pass makes no progress (the raw store fails), or ctx ends; the marks
// of the rest stay for the next start.
func (f *Feed) finalRoll(ctx context.Context) {
	for ctx.Err() == nil {
		f.mu.Lock()
		left, carried := f.pending.minutes, len(f.carried.b)
		f.mu.Unlock()
		if left == 0 && carried == 0 {
			break
		}
		if _, done := f.roll(ctx, true); done == 0 {
			f.logger.Error("rollups of these minutes stay pending until the next start: the raw store fails", "minutes", left)
			break
		}
	}
	f.persistLost(true)
}

// roll takes the due devices (all with force), recomputes their marked
// minutes from the raw store and stores the rows, then forgets the marks
// no pending or in-flight minute needs; it also stores the carried rows
// (WithCarriedMinutes). It reports whether it stopped at its limit with
// more due, and how many devices it recomputed (one more when it stored
// carried rows).
func (f *Feed) roll(ctx context.Context, force bool) (more bool, done int) {
	now := f.now()
	f.mu.Lock()
	// Marks written from now on are in a new generation, which this roll
	// does not forget.
	f.gen++
	gen := f.gen
	due := now.Add(-f.cfg.RollDelay)
	// A recompute's rows (a few per minute) are held until stored: take
	// about a batch's worth of rows at a time.
	limit := max(1, f.cfg.BatchRows/8)
	devs := f.pending.take(now, due, f.cfg.MaxPending, limit, force)
	carried := f.takeCarried()
	taken := countMinutes(devs)
	// Only a roll cut short by its limit calls for another at once (a
	// device waiting to retry must not make the roller spin).
	more = taken >= limit && !f.pending.empty()
	f.m.pending.Set(float64(f.pending.minutes))
	f.room.Broadcast()
	f.mu.Unlock()
	if len(devs) > 0 || len(carried.b) > 0 {
		// Carried rows are of commits that are durable, and older than
		// any recompute of this roll, or a later one, that reads another
		// commit of their minute (WithCarriedMinutes): they take the
		// lower version.
		var carriedVersion uint64
		if len(carried.b) > 0 {
			carriedVersion = f.version()
		}
		// Every commit that became durable before this moment is read
		// below; the rows carry it as their version, so that of two
		// gateways' recomputes of a minute the later read wins, whichever
		// is stored last. It is kept first, so that a restart never goes
		// below it.
		version := f.version()
		if err := f.marks.SetVersion(version); err != nil {
			f.logger.Error("keep the rollup version; recompute retried on the next roll", "err", err)
			f.mu.Lock()
			f.putCarriedBack(carried)
			f.mu.Unlock()
			f.requeue(devs, gen, now, false)
			return false, 0
		}
		if len(carried.b) > 0 {
			buf, err := f.storeCarried(carried, carriedVersion)
			f.mu.Lock()
			if err != nil {
				// Not expected (a bug): the marks of these minutes are
				// kept, and the next start recomputes them; carrying stops.
				f.logger.Error("store carried rollups; their minutes are recomputed at the next start", "minutes", carried.minutes, "err", err)
				f.carry = false
				f.carryHold = min(f.carryHold, carried.gen)
			}
			f.carrySpare = buf[:0]
			f.mu.Unlock()
			done++
		}
		rows, failed := f.recompute(ctx, devs, version)
		for _, r := range rows {
			f.store(r)
			f.putRows(r)
		}
		done += len(devs) - len(failed)
		f.requeue(failed, gen, now, true)
	}
	f.forget()
	return more && ctx.Err() == nil, done
}

// requeue returns devices whose recompute did not happen. Their minutes are
// marked again in generation gen, so that their older generations can be
// forgotten; a device that failed maxFailures times in a row is given up:
// its minutes are counted as dropped and their days marked dirty.
func (f *Feed) requeue(devs []*pendingDevice, gen uint64, now time.Time, failed bool) {
	if len(devs) == 0 {
		return
	}
	var again []rollmarks.Minute
	lost := map[outbox.DirtyDay]struct{}{}
	dropped := 0
	keep := devs[:0]
	for _, d := range devs {
		if failed {
			d.failures++
		}
		if d.failures >= maxFailures {
			for _, m := range d.minutes {
				lost[outbox.DirtyDay{Tenant: d.tenant, Day: model.DayOf(m.minute)}] = struct{}{}
			}
			dropped += len(d.minutes)
			continue
		}
		for _, m := range d.minutes {
			again = append(again, rollmarks.Minute{Tenant: d.tenant, Device: d.device, Minute: m.minute})
		}
		keep = append(keep, d)
	}
	if dropped > 0 {
		f.m.dropped.WithLabelValues("recompute_failed").Add(float64(dropped))
		f.markLost(lost)
		f.logger.Error("rollup minutes given up after repeated failures to read the raw store: rebuild their days", "minutes", dropped, "days", len(lost))
	}
	reGen := f.marks.Add(gen, again) == nil
	f.mu.Lock()
	// Marked on the roller's goroutine, which alone forgets: noted before
	// its next forget.
	f.markedTo = max(f.markedTo, gen+1)
	for _, d := range keep {
		if reGen {
			d.gen = gen
		}
		f.pending.put(d, now.Add(retryAfter(d.failures)))
	}
	f.mu.Unlock()
}

// version returns the current time in ns, strictly above every version this
// feed used before, in this run or an earlier one (Marks.Version).
func (f *Feed) version() uint64 {
	v := Version(f.now())
	if v <= f.lastVersion {
		v = f.lastVersion + 1
	}
	f.lastVersion = v
	return v
}

// countMinutes counts the marked minutes of devs.
func countMinutes(devs []*pendingDevice) int {
	n := 0
	for _, d := range devs {
		n += len(d.minutes)
	}
	return n
}

// recompute reads the marked minutes of devs from the raw store,
// ReadConcurrency devices at a time, and returns their rows, a slice per
// reader, and the devices whose read failed. Each reader appends
// its devices' rows to one slice sized for them, so that no row is copied
// after it is computed (a row is 320 bytes, and at 10,000 devices a day
// copying them into one slice was 7% of the gateway's CPU).
func (f *Feed) recompute(ctx context.Context, devs []*pendingDevice, version uint64) ([][]rollup.Row, []*pendingDevice) {
	// In key order, each worker a contiguous share: a worker's reads then
	// move forward through the store, so that nearby devices share the
	// blocks read for them.
	slices.SortFunc(devs, func(a, b *pendingDevice) int {
		return cmp.Or(strings.Compare(a.tenant, b.tenant), strings.Compare(a.device, b.device))
	})
	errs := make([]error, len(devs))
	workers := min(f.cfg.ReadConcurrency, len(devs))
	rows := make([][]rollup.Row, workers)
	perMinute := cmp.Or(f.rowsPerMinute, 8)
	var wg sync.WaitGroup
	for w := range workers {
		lo, hi := w*len(devs)/workers, (w+1)*len(devs)/workers
		wg.Go(func() {
			n := countMinutes(devs[lo:hi])
			// A quarter more than the last roll's average, so that a share
			// of devices with a few more metrics does not grow (copy) it;
			// at most a batch's rows, so that a roll after one of many
			// metrics a minute does not reserve what it will not use.
			buf := f.rowBuf(min(int(float64(n)*perMinute*1.25)+16, f.cfg.BatchRows))
			var raw reader.Store = f.raw
			var err error
			if f.sessions != nil {
				var s ReadSession
				if s, err = f.sessions(ctx); err == nil {
					defer s.Close()
					raw = s
				}
			}
			var sc scratch
			for i := lo; i < hi; i++ {
				if err != nil {
					errs[i] = err
					continue
				}
				buf, errs[i] = f.recomputeDevice(ctx, raw, &sc, devs[i], version, buf)
			}
			rows[w] = buf
		})
	}
	wg.Wait()
	made := 0
	for _, r := range rows {
		made += len(r)
	}
	if taken := countMinutes(devs); taken > 0 {
		f.rowsPerMinute = float64(made) / float64(taken)
	}
	var failed []*pendingDevice
	var firstErr error
	for i, err := range errs {
		if err != nil {
			failed = append(failed, devs[i])
			f.m.rollErrors.Inc()
			firstErr = cmp.Or(firstErr, err)
			continue
		}
		devs[i].failures = 0
	}
	if firstErr != nil && f.now().Sub(f.rollLogged) > 30*time.Second {
		f.logger.Error("recompute rollups from the raw store; will retry", "devices_failed", len(failed), "devices", len(devs), "err", firstErr)
		f.rollLogged = f.now()
	}
	return rows, failed
}

// rowBuf returns an empty slice of rows with room for n, recycled from an
// earlier roll when one large enough is at hand: a row is 320 bytes, and
// a roll's slice of them (megabytes) was allocated and zeroed anew, 5% of
// the gateway's CPU at a million devices a day with rollups on.
func (f *Feed) rowBuf(n int) []rollup.Row {
	if p, ok := f.rowBufs.Get().(*[]rollup.Row); ok && cap(*p) >= n {
		return (*p)[:0]
	}
	return make([]rollup.Row, 0, n)
}

// putRows recycles a roll's rows once they are stored (store copies them:
// into the rollup store, or encoded into the outbox).
func (f *Feed) putRows(rows []rollup.Row) {
	clear(rows) // their strings are the devices' of this roll
	rows = rows[:0]
	f.rowBufs.Put(&rows)
}

// recomputeDevice reads d's marked minutes, a run of nearby minutes per
// range read, aggregates them whole, and appends the marked minutes' rows to
// dst. When a read fails it returns dst as it was, and the error.
func (f *Feed) recomputeDevice(ctx context.Context, raw reader.Store, sc *scratch, d *pendingDevice, version uint64, dst []rollup.Row) ([]rollup.Row, error) {
	minutes := d.sortedMinutes()
	base := len(dst)
	st, _ := raw.(streamer)
	for _, run := range runs(minutes, runGap) {
		from, to := run[0], run[1]+rollup.MinuteMillis
		n := len(dst)
		read, folded := false, 0
		var err error
		if st != nil {
			dst, read, folded, err = streamRun(ctx, raw, st, sc, d.tenant, d.device, from, to, version, dst)
		}
		if err == nil && !read {
			var readings []model.Reading
			if readings, err = readAll(ctx, raw, d.tenant, d.device, from, to); err == nil {
				folded = len(readings)
				dst = rollup.AppendCompute(dst, d.tenant, d.device, readings, version)
			}
		}
		if err != nil {
			clear(dst[base:])
			return dst[:base], err
		}
		f.m.rawReads.Inc()
		f.m.rawReadings.Add(float64(folded))
		// Of the run's rows, the marked minutes' (the minutes between
		// them were read only to save reads).
		kept := slices.DeleteFunc(dst[n:], func(r rollup.Row) bool {
			_, marked := slices.BinarySearch(minutes, r.Minute)
			return !marked
		})
		dst = dst[:n+len(kept)]
	}
	f.m.rolled.Add(float64(len(minutes)))
	return dst, nil
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
	if len(f.carried.b) > 0 {
		below = min(below, f.carried.gen)
	}
	below = min(below, f.carryHold)
	done := below <= f.forgot
	if !done && f.markedTo <= f.forgot {
		// No mark in any generation from forgot on: nothing to delete.
		f.forgot = below
		done = true
	}
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
