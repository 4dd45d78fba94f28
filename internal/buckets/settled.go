package buckets

import (
	"hash/maphash"
	"math"

	"github.com/sluicehq/sluice/internal/model"
)

// settled remembers, in a few dozen bytes each, the series-days the planner
// forgot (evict) whose catalogue was one exact single partition: their
// entry, so that the next write restores the state without reading the
// catalogue. With a fleet far larger than MaxSeriesDays whose devices
// report in no particular order, nearly every write reloads its
// series-day, and each reload read a block of the catalogue that was not
// in the block cache (two thirds of the gateway's CPU at a million devices
// a day; docs/benchmarks.md, item 33). A series-day forgotten in any other
// shape (split, closed) leaves a mark that says "read the catalogue".
//
// It also knows, for a day it saw begin without a catalogue entry in the
// store (Planner.SetDayEmpty), that every series-day of that day with an
// entry is held by the planner or remembered here, so that a series-day
// found in neither has none: its first write reads nothing. That holds
// only while this planner is the store's one writer (no PerWriterSingle)
// and nothing of the day was dropped from here: a day that lost a record
// (the bound was reached, or Unload) is no longer complete.
//
// Records are keyed by a 128-bit fingerprint of the series-day (two
// seeded hashes), not the series-day itself: a collision would make one
// series-day's state another's, and with random seeds per process its
// chance is about n²/2¹²⁹ for n records. Only today and yesterday (of the
// newest day seen) are kept.
type settled struct {
	seed  maphash.Seed // the second half of a fingerprint; the first is the index's
	max   int          // records held at most
	n     int
	days  map[model.Day]*settledDay
	newst model.Day
}

type settledDay struct {
	complete bool
	recs     map[fingerprint]settledRec
}

type fingerprint struct{ a, b uint64 }

// settledRec is an exact single-partition entry: its rows and bytes, and
// its time range as milliseconds from the day's start. Rows 0 marks a
// series-day whose catalogue must be read.
type settledRec struct {
	rows, bytes uint32
	min, max    uint32
}

// settledDaysKept is how many days (back from the newest seen) keep their
// records.
const settledDaysKept = 2

func newSettled(max int) *settled {
	return &settled{seed: maphash.MakeSeed(), max: max, days: make(map[model.Day]*settledDay)}
}

func (t *settled) fingerprint(h uint64, sd model.SeriesDay) fingerprint {
	return fingerprint{h, sd.Hash(t.seed)}
}

// day returns the state of day d, creating it (not complete) if create.
// A day older than those kept is never created.
func (t *settled) day(d model.Day, create bool) *settledDay {
	if sd := t.days[d]; sd != nil || !create {
		return sd
	}
	if len(t.days) > 0 && d <= t.newst-settledDaysKept {
		return nil
	}
	sd := &settledDay{recs: make(map[fingerprint]settledRec)}
	t.days[d] = sd
	if len(t.days) == 1 || d > t.newst {
		t.newst = d
		for old, od := range t.days {
			if old <= d-settledDaysKept {
				t.n -= len(od.recs)
				delete(t.days, old)
			}
		}
	}
	return sd
}

// keep records s, which the planner is forgetting.
func (t *settled) keep(h uint64, s *Series) {
	if len(s.parts) == 0 {
		return // loaded and never written: no entry
	}
	d := t.day(s.sd.Day, true)
	if d == nil {
		return
	}
	fp := t.fingerprint(h, s.sd)
	rec, ok := compact(s)
	if !ok {
		rec = settledRec{} // a mark: read the catalogue
	}
	if _, dup := d.recs[fp]; !dup {
		if t.n >= t.max {
			d.complete = false
			return
		}
		t.n++
	}
	d.recs[fp] = rec
}

// compact returns the record of s if its catalogue is one open single
// partition, sub-bucket 0, whose stored entry is exact.
func compact(s *Series) (settledRec, bool) {
	if len(s.parts) != 1 {
		return settledRec{}, false
	}
	pi := s.parts[0].info
	start := pi.Key.Day.Start()
	if pi.Key.Sub != 0 || pi.State != StateSingle || pi.Closed || pi.Ahead || pi.Rows < 1 ||
		pi.Rows > math.MaxUint32 || pi.Bytes < 0 || pi.Bytes > math.MaxUint32 ||
		pi.MinTS < start || pi.MaxTS < pi.MinTS || pi.MaxTS-start > math.MaxUint32 {
		return settledRec{}, false
	}
	return settledRec{rows: uint32(pi.Rows), bytes: uint32(pi.Bytes), min: uint32(pi.MinTS - start), max: uint32(pi.MaxTS - start)}, true
}

// take looks sd (hashed h by the index) up and forgets its record: parts
// is its catalogue when known (empty when it has none); read says it must
// be read from the store.
func (t *settled) take(h uint64, sd model.SeriesDay) (parts []model.PartitionInfo, read bool) {
	d := t.days[sd.Day]
	if d == nil {
		return nil, true
	}
	fp := t.fingerprint(h, sd)
	rec, ok := d.recs[fp]
	if !ok {
		return nil, !d.complete
	}
	if rec.rows == 0 {
		return nil, true // the mark stays: the catalogue is read each time
	}
	delete(d.recs, fp)
	t.n--
	start := sd.Day.Start()
	return []model.PartitionInfo{{
		Key: sd.Partition(0), State: StateSingle,
		Rows: int64(rec.rows), Bytes: int64(rec.bytes),
		MinTS: start + int64(rec.min), MaxTS: start + int64(rec.max),
	}}, false
}

// incomplete says that day d may have series-days with entries that are
// neither held nor here.
func (t *settled) incomplete(d model.Day) {
	if sd := t.days[d]; sd != nil {
		sd.complete = false
	}
}
