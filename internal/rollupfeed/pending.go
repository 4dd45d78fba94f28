package rollupfeed

import (
	"cmp"
	"slices"
	"strings"
	"time"
	"unsafe"

	"github.com/sluicehq/sluice/internal/membudget"
	"github.com/sluicehq/sluice/internal/rollmarks"
)

// pendingMinute is one marked minute and when its commit became durable.
type pendingMinute struct {
	minute int64
	at     time.Time
}

// pendingDevice is one device's minutes waiting for their recompute.
type pendingDevice struct {
	tenant, device string
	minutes        []pendingMinute // possibly repeated
	compacted      int             // len(minutes) after the last de-duplication
	gen            uint64          // the lowest generation of their marks
	since          time.Time       // when the oldest of them became pending
	retryAt        time.Time       // after a failed recompute: not before then
	failures       int             // failed recomputes in a row
	index          int             // its place in its queue
	retrying       bool            // in the retry queue, not the due one
}

type deviceKey struct{ tenant, device string }

// pendingSet holds the device-minutes whose commits are durable and whose
// rollups are not recomputed yet. Its devices wait in a queue ordered by
// when their oldest minute became pending (a minute long past counts from
// earlier than its commit: Feed.pastDue), so that the oldest are taken
// first and a roll stops at the first device not due, whatever order the
// minutes arrived in; a device whose recompute failed waits in a second
// queue ordered by its retry time.
type pendingSet struct {
	byDevice map[deviceKey]*pendingDevice
	due      queue          // by since
	retry    queue          // by retryAt
	minutes  int            // len of every device's minutes: an upper bound
	gens     map[uint64]int // devices by their lowest generation
}

// What the pending set holds: a further minute of a device already pending
// (a pendingMinute), and the rest of membudget.PendingBytes, measured for
// a device with one minute, for the device with its map entry, list links
// and names.
const (
	pendingMinuteBytes = int(unsafe.Sizeof(pendingMinute{}))
	pendingDeviceBytes = membudget.PendingBytes - pendingMinuteBytes
)

// weight is what the set holds in units of one device-minute of a device
// of its own (pendingDeviceBytes + pendingMinuteBytes): what
// rollups.max_pending bounds. A device's further minutes count about a
// sixth each, so a fleet of devices with several minutes pending each is
// not held to the minutes of as many single-minute devices.
func (p *pendingSet) weight() int {
	return (len(p.byDevice)*pendingDeviceBytes + p.minutes*pendingMinuteBytes) / (pendingDeviceBytes + pendingMinuteBytes)
}

func newPendingSet() pendingSet {
	return pendingSet{
		byDevice: make(map[deviceKey]*pendingDevice),
		retry:    queue{byRetry: true},
		gens:     make(map[uint64]int),
	}
}

// add records minute m of generation gen, pending from at. A minute
// pending from before its device's oldest (one long past, joining minutes
// of the present) moves the device forward in the queue.
func (p *pendingSet) add(m rollmarks.Minute, gen uint64, at time.Time) {
	d := p.byDevice[deviceKey{m.Tenant, m.Device}]
	if d == nil {
		// Cloned: the batch's strings may share a request body's memory.
		d = &pendingDevice{tenant: strings.Clone(m.Tenant), device: strings.Clone(m.Device), gen: gen, since: at}
		p.insert(d)
	} else {
		if gen < d.gen {
			p.uncount(d.gen)
			d.gen = gen
			p.gens[gen]++
		}
		if at.Before(d.since) {
			d.since = at
			if !d.retrying {
				p.due.rekey(d.index)
			}
		}
	}
	if n := len(d.minutes); n > 0 && d.minutes[n-1].minute == m.Minute {
		d.minutes[n-1].at = at
		return
	}
	d.minutes = append(d.minutes, pendingMinute{m.Minute, at})
	p.minutes++
	if len(d.minutes) >= max(16, 2*d.compacted) {
		// Batches that each cover a few of the same minutes would count
		// them again and again.
		before := len(d.minutes)
		d.compact()
		p.minutes -= before - len(d.minutes)
	}
}

// insert queues d (in the retry queue if it is retrying) and counts it.
func (p *pendingSet) insert(d *pendingDevice) {
	p.byDevice[deviceKey{d.tenant, d.device}] = d
	p.gens[d.gen]++
	p.minutes += len(d.minutes)
	if d.retrying {
		p.retry.push(d)
	} else {
		p.due.push(d)
	}
}

func (p *pendingSet) uncount(gen uint64) {
	if p.gens[gen]--; p.gens[gen] <= 0 {
		delete(p.gens, gen)
	}
}

func (p *pendingSet) remove(d *pendingDevice) {
	if d.retrying {
		p.retry.remove(d.index)
	} else {
		p.due.remove(d.index)
	}
	delete(p.byDevice, deviceKey{d.tenant, d.device})
	p.minutes -= len(d.minutes)
	p.uncount(d.gen)
}

// take removes and returns the devices that are due at now: those whose
// oldest minute became pending at or before due, then the oldest others
// while the set weighs more than max (all with force), at most limit
// minutes in all (at least one device). A due device's minutes that became
// pending after due stay pending, in their own place in the queue, so that
// a minute is recomputed no sooner than due after its commit unless memory
// or shutdown forces it. A device waiting after a failure is not taken
// before its retry time.
func (p *pendingSet) take(now, due time.Time, max, limit int, force bool) []*pendingDevice {
	for p.retry.len() > 0 && !now.Before(p.retry.first().retryAt) {
		d := p.retry.first()
		p.retry.remove(0)
		d.retrying = false
		p.due.push(d)
	}
	var out []*pendingDevice
	taken := 0
	for p.due.len() > 0 && taken < limit {
		d := p.due.first()
		early := d.since.After(due)
		if early && p.weight() <= max && !force {
			break
		}
		p.remove(d)
		if !early && !force {
			if rest := d.split(due); rest != nil {
				p.insert(rest)
			}
		}
		taken += len(d.minutes)
		out = append(out, d)
	}
	return out
}

// empty reports whether no minute is pending.
func (p *pendingSet) empty() bool { return len(p.byDevice) == 0 }

// split keeps in d the minutes that became pending at or before due and
// returns the others as a device of their own (nil if none).
func (d *pendingDevice) split(due time.Time) *pendingDevice {
	var rest *pendingDevice
	keep := d.minutes[:0]
	for _, m := range d.minutes {
		if !m.at.After(due) {
			keep = append(keep, m)
			continue
		}
		if rest == nil {
			rest = &pendingDevice{tenant: d.tenant, device: d.device, gen: d.gen, since: m.at}
		}
		rest.minutes = append(rest.minutes, m)
		rest.since = earlier(rest.since, m.at)
	}
	d.minutes = keep
	return rest
}

// put returns a device whose recompute failed, merged with any minutes of
// it that arrived since, to be retried at retryAt; it keeps its place in
// time (the lag counts from its oldest minute).
func (p *pendingSet) put(d *pendingDevice, retryAt time.Time) {
	if e := p.byDevice[deviceKey{d.tenant, d.device}]; e != nil {
		p.remove(e)
		d.minutes = append(d.minutes, e.minutes...)
		d.gen = min(d.gen, e.gen)
		d.since = earlier(d.since, e.since)
		d.compact()
	}
	d.retryAt, d.retrying = retryAt, true
	p.insert(d)
}

// oldestGen is the lowest generation of a pending minute, or ok false.
func (p *pendingSet) oldestGen() (gen uint64, ok bool) {
	for g := range p.gens {
		if !ok || g < gen {
			gen, ok = g, true
		}
	}
	return gen, ok
}

// oldestSince is when the oldest pending minute became pending (zero when
// none is): the due queue's first device's, or an earlier one's among the
// devices waiting to retry.
func (p *pendingSet) oldestSince() time.Time {
	var t time.Time
	if p.due.len() > 0 {
		t = p.due.first().since
	}
	for _, e := range p.retry.es {
		d := e.d
		if t.IsZero() || d.since.Before(t) {
			t = d.since
		}
	}
	return t
}

// compact sorts and de-duplicates d's minutes, keeping each one's latest
// commit time.
func (d *pendingDevice) compact() {
	slices.SortFunc(d.minutes, func(a, b pendingMinute) int {
		return cmp.Or(cmp.Compare(a.minute, b.minute), b.at.Compare(a.at))
	})
	d.minutes = slices.CompactFunc(d.minutes, func(a, b pendingMinute) bool { return a.minute == b.minute })
	d.compacted = len(d.minutes)
}

// compactAll de-duplicates every device's minutes and returns how many
// distinct minutes are pending.
func (p *pendingSet) compactAll() int {
	n := 0
	for _, d := range p.byDevice {
		before := len(d.minutes)
		d.compact()
		p.minutes -= before - len(d.minutes)
		n += len(d.minutes)
	}
	return n
}

// sortedMinutes de-duplicates d's minutes and returns them sorted.
func (d *pendingDevice) sortedMinutes() []int64 {
	d.compact()
	out := make([]int64, len(d.minutes))
	for i, m := range d.minutes {
		out[i] = m.minute
	}
	return out
}

// runs splits sorted distinct minutes into runs read with one range read
// each: minutes at most gap apart share a run.
func runs(minutes []int64, gap int64) [][2]int64 {
	var out [][2]int64
	for i, m := range minutes {
		if i > 0 && m-out[len(out)-1][1] <= gap {
			out[len(out)-1][1] = m
			continue
		}
		out = append(out, [2]int64{m, m})
	}
	return out
}

func earlier(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}
