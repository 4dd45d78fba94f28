package rollupfeed

import (
	"context"
	"errors"
	"fmt"
	"iter"

	"github.com/sluicehq/sluice/internal/model"
	"github.com/sluicehq/sluice/internal/store"
)

// dayPass hands out the readings of a day's devices from one pass of a
// DayScanner over the day, to a caller that asks for the devices in byte
// order. The zero value (no scanner) has none: take then says to read each
// device on its own.
type dayPass struct {
	next    func() (scanned, bool)
	stop    func()
	err     *error   // the pass's own, once it ended
	pending *scanned // met by the pass, not yet asked for
	ended   bool
	last    string // the device asked for last ("" before the first: names are not empty)
}

// scanned is one device of the pass.
type scanned struct {
	series   string
	readings []model.Reading
	whole    bool
}

// errPassStopped ends a pass its caller stopped early.
var errPassStopped = errors.New("day pass stopped")

// newDayPass starts a pass over tenant's readings on day within r; stop
// ends it.
func newDayPass(ctx context.Context, sc DayScanner, tenant string, day model.Day, r store.Range) dayPass {
	err := new(error)
	seq := func(yield func(scanned) bool) {
		*err = sc.EachSeriesReadings(ctx, tenant, day, r, func(series string, readings []model.Reading, whole bool) error {
			if !yield(scanned{series, readings, whole}) {
				return errPassStopped
			}
			return nil
		})
	}
	next, stop := iter.Pull(seq)
	return dayPass{next: next, stop: stop, err: err}
}

// close ends the pass, if any.
func (p *dayPass) close() {
	if p.stop != nil {
		p.stop()
	}
}

// take returns device d's readings of the day if the pass has them whole
// (have true; none if the pass found no key of d), skipping the devices
// before d that nobody asked for. Devices must be asked for in byte order.
// have is false when d is to be read on its own: the pass could not hand
// it over whole, or there is no pass.
func (p *dayPass) take(d string) (readings []model.Reading, have bool, err error) {
	if p.next == nil {
		return nil, false, nil
	}
	if d <= p.last {
		// Taken as having no readings, it would lose them.
		return nil, false, fmt.Errorf("device %q asked for after %q: a day pass hands devices out in order", d, p.last)
	}
	p.last = d
	for {
		if p.pending == nil && !p.ended {
			s, ok := p.next()
			if !ok {
				p.ended = true
			} else {
				p.pending = &s
			}
		}
		// The pass's error stands for every device asked for after it.
		// (errPassStopped is never seen here: only stop causes it.)
		if err := *p.err; p.ended && err != nil {
			return nil, false, err
		}
		switch {
		case p.pending == nil: // the pass ended: d has no key that day
			return nil, true, nil
		case p.pending.series < d: // not asked for: skip it
			p.pending = nil
		case p.pending.series > d: // d has no key that day
			return nil, true, nil
		default:
			s := p.pending
			p.pending = nil
			return s.readings, s.whole, nil
		}
	}
}
