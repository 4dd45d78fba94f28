package rollupfeed

import (
	"slices"
	"strings"
	"time"

	"github.com/sluicehq/sluice/internal/rollmarks"
)

// pendingDevice is one device's minutes waiting for their recompute.
type pendingDevice struct {
	tenant, device string
	minutes        []int64   // marked minutes, possibly repeated
	gen            uint64    // the lowest generation of their marks
	since          time.Time // when the first of them became pending
	prev, next     *pendingDevice
}

type deviceKey struct{ tenant, device string }

// pendingSet holds the device-minutes whose commits are durable and whose
// rollups are not recomputed yet, with the devices in the order their
// first pending minute arrived (so the oldest are taken first).
type pendingSet struct {
	byDevice   map[deviceKey]*pendingDevice
	head, tail *pendingDevice
	minutes    int            // len of every device's minutes: an upper bound
	gens       map[uint64]int // devices by their lowest generation
}

func newPendingSet() pendingSet {
	return pendingSet{byDevice: make(map[deviceKey]*pendingDevice), gens: make(map[uint64]int)}
}

// add records minute m of generation gen, durable at since.
func (p *pendingSet) add(m rollmarks.Minute, gen uint64, since time.Time) {
	d := p.byDevice[deviceKey{m.Tenant, m.Device}]
	if d == nil {
		// Cloned: the batch's strings may share a request body's memory.
		d = &pendingDevice{tenant: strings.Clone(m.Tenant), device: strings.Clone(m.Device), gen: gen, since: since}
		p.byDevice[deviceKey{d.tenant, d.device}] = d
		p.gens[gen]++
		d.prev = p.tail
		if p.tail != nil {
			p.tail.next = d
		} else {
			p.head = d
		}
		p.tail = d
	} else if gen < d.gen {
		p.regen(d, gen)
	}
	if n := len(d.minutes); n > 0 && d.minutes[n-1] == m.Minute {
		return
	}
	d.minutes = append(d.minutes, m.Minute)
	p.minutes++
}

// regen moves d to a lower generation.
func (p *pendingSet) regen(d *pendingDevice, gen uint64) {
	p.uncount(d.gen)
	d.gen = gen
	p.gens[gen]++
}

func (p *pendingSet) uncount(gen uint64) {
	if p.gens[gen]--; p.gens[gen] <= 0 {
		delete(p.gens, gen)
	}
}

// take removes and returns the devices that are due: every one that became
// pending at or before due, then the oldest others while more than max
// minutes are pending, at most limit minutes in all (at least one device).
func (p *pendingSet) take(due time.Time, max, limit int) []*pendingDevice {
	var out []*pendingDevice
	taken := 0
	for d := p.head; d != nil && taken < limit; d = p.head {
		if d.since.After(due) && p.minutes <= max {
			break
		}
		p.remove(d)
		taken += len(d.minutes)
		out = append(out, d)
	}
	return out
}

func (p *pendingSet) remove(d *pendingDevice) {
	if d.prev != nil {
		d.prev.next = d.next
	} else {
		p.head = d.next
	}
	if d.next != nil {
		d.next.prev = d.prev
	} else {
		p.tail = d.prev
	}
	d.prev, d.next = nil, nil
	delete(p.byDevice, deviceKey{d.tenant, d.device})
	p.minutes -= len(d.minutes)
	p.uncount(d.gen)
}

// put returns a device whose roll failed: it is due again at once, first
// in line, merged with any minutes of it that arrived since.
func (p *pendingSet) put(d *pendingDevice) {
	if e := p.byDevice[deviceKey{d.tenant, d.device}]; e != nil {
		p.remove(e)
		d.minutes = append(d.minutes, e.minutes...)
		d.gen = min(d.gen, e.gen)
	}
	d.since = time.Time{}
	p.byDevice[deviceKey{d.tenant, d.device}] = d
	p.gens[d.gen]++
	p.minutes += len(d.minutes)
	d.prev, d.next = nil, p.head
	if p.head != nil {
		p.head.prev = d
	} else {
		p.tail = d
	}
	p.head = d
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

// sortedMinutes sorts and de-duplicates d's minutes.
func (d *pendingDevice) sortedMinutes() []int64 {
	slices.Sort(d.minutes)
	d.minutes = slices.Compact(d.minutes)
	return d.minutes
}
