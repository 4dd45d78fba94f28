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
// shape (split, closed), or once max records are held, is added to its
// day's Bloom filter instead, which says "read the catalogue" (and, for
// a few percent of the others, says so wrongly: a read too many, never
// one too few).
//
// It also knows, for a day it saw begin without a catalogue entry in the
// store (Planner.SetDay), that every series-day of that day with an
// entry is held by the planner or remembered here, so that a series-day
// found in neither has none: its first write reads nothing. That holds
// only while this planner is the store's one writer (no PerWriterSingle):
// every series-day it forgets or unloads is either recorded or in the
// filter.
//
// Records are keyed by a 128-bit fingerprint of the series-day (two
// seeded hashes), not the series-day itself: a collision would make one
// series-day's state another's, and with random seeds per process its
// chance is about n²/2¹²⁹ for n records. Only today and yesterday (of the
// newest day seen) are kept.
type settled struct {
	seed   maphash.Seed // the second half of a fingerprint; the first is the index's
	max    int          // records held at most
	n      int
	recs   recTable // every day's records; allocated with the first
	days   map[model.Day]*settledDay
	newest model.Day
	sweeps int // of recs by clear, for tests
}

type settledDay struct {
	complete bool
	// cleared says makeRoom moved the day's records into its filter:
	// what it forgets later goes there too, or each late row of it would
	// take a slot back and have the next of today sweep the table again.
	cleared bool
	n       int // its records in recs
	// spilled is a blocked Bloom filter (four bits of one word a
	// series-day) of the series-days forgotten without a record; nil
	// until the first.
	spilled []uint64
}

// settledSpillBits is the filter's size in bits per record of max: with
// four bits a key in one word, about 3% false positives when as many
// series-days spilled as max, more past it (only more reads).
const settledSpillBits = 8

func (d *settledDay) spill(fp fingerprint, words int) {
	if d.spilled == nil {
		d.spilled = make([]uint64, words)
	}
	w, bits := spillBits(fp, len(d.spilled))
	d.spilled[w] |= bits
}

func (d *settledDay) maySpilled(fp fingerprint) bool {
	if d.spilled == nil {
		return false
	}
	w, bits := spillBits(fp, len(d.spilled))
	return d.spilled[w]&bits == bits
}

// spillBits returns the word of fp in a filter of n words and its four
// bits there, from the fingerprint's second half (the first picks the
// index's map slot, so the two are independent).
func spillBits(fp fingerprint, n int) (int, uint64) {
	b := fp.b
	w := int((b >> 32) % uint64(n))
	return w, 1<<(b&63) | 1<<(b>>6&63) | 1<<(b>>12&63) | 1<<(b>>18&63)
}

type fingerprint struct{ a, b uint64 }

// settledRec is an exact single-partition entry: its rows and bytes, and
// its time range as milliseconds from the day's start (under 2²⁷), the
// top five bits of max holding the day's number modulo 32, which tells
// apart the few days kept.
type settledRec struct {
	rows, bytes uint32
	min, max    uint32
}

const (
	recDayShift = 27
	recOffMask  = 1<<recDayShift - 1
)

func recDay(d model.Day) uint32 { return uint32(d) & 31 << recDayShift }

func (r settledRec) of(d model.Day) bool { return r.max&^recOffMask == recDay(d) }

// settledDaysKept is how many days (back from the newest seen) keep their
// records.
const settledDaysKept = 2

func newSettled(max int) *settled {
	return &settled{seed: maphash.MakeSeed(), max: max, days: make(map[model.Day]*settledDay)}
}

func (t *settled) fingerprint(h uint64, sd model.SeriesDay) fingerprint {
	return fingerprint{h, sd.Hash(t.seed)}
}

// tooOld reports whether day d is older than the days kept.
func (t *settled) tooOld(d model.Day) bool {
	return len(t.days) > 0 && d <= t.newest-settledDaysKept
}

// unknown reports whether day d was never seen and is recent enough to
// be kept.
func (t *settled) unknown(d model.Day) bool {
	_, seen := t.days[d]
	return !seen && !t.tooOld(d)
}

// day returns the state of day d, creating it (not complete) if create.
// A day older than those kept is never created.
func (t *settled) day(d model.Day, create bool) *settledDay {
	if sd := t.days[d]; sd != nil || !create {
		return sd
	}
	if t.tooOld(d) {
		return nil
	}
	sd := &settledDay{}
	t.days[d] = sd
	if len(t.days) == 1 || d > t.newest {
		t.newest = d
		for old, od := range t.days {
			if old <= d-settledDaysKept {
				t.clear(old, od, false)
				delete(t.days, old)
			}
		}
	}
	return sd
}

// clear deletes day d's records, adding them to its filter if spill.
func (t *settled) clear(d model.Day, day *settledDay, spill bool) {
	if day.n == 0 {
		return
	}
	words := t.spillWords()
	t.sweeps++
	t.recs.deleteIf(func(fp fingerprint, r settledRec) bool {
		if !r.of(d) {
			return false
		}
		if spill {
			day.spill(fp, words)
		}
		return true
	})
	t.count(day, -day.n)
}

// count adds delta to the records counted for day and in all.
func (t *settled) count(day *settledDay, delta int) {
	t.n += delta
	day.n += delta
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
	// A series-day held has no record (take and loaded drop it), so this
	// adds one.
	fp := t.fingerprint(h, s.sd)
	rec, ok := compact(s)
	if ok && t.n >= t.max {
		t.makeRoom(s.sd.Day)
	}
	if !ok || d.cleared || t.n >= t.max {
		d.spill(fp, t.spillWords())
		return
	}
	if t.recs.slots == nil {
		t.recs = newRecTable(t.max)
	}
	rec.max |= recDay(s.sd.Day)
	t.recs.put(fp, rec)
	t.count(d, 1)
}

// makeRoom moves the records of the days before d, if any, into their
// filters, so that a day's records do not hold the bound through the next
// day: a fleet that filled it yesterday would otherwise have none today.
// Those days stay complete; their series-days are read when written again.
func (t *settled) makeRoom(d model.Day) {
	for od, day := range t.days {
		if od < d {
			t.clear(od, day, true)
			day.cleared = true
		}
	}
}

// spillWords is the size of a day's filter.
func (t *settled) spillWords() int { return max(t.max*settledSpillBits/64, 1024) }

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
		pi.MinTS < start || pi.MaxTS < pi.MinTS || pi.MaxTS-start > recOffMask {
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
	i := t.recs.find(fp, sd.Day)
	if i < 0 {
		return nil, !d.complete || d.maySpilled(fp)
	}
	rec := t.recs.slots[i].rec
	t.remove(d, i)
	start := sd.Day.Start()
	return []model.PartitionInfo{{
		Key: sd.Partition(0), State: StateSingle,
		Rows: int64(rec.rows), Bytes: int64(rec.bytes),
		MinTS: start + int64(rec.min), MaxTS: start + int64(rec.max&recOffMask),
	}}, false
}

// unloaded is told that the planner forgot sd (hashed h by the index)
// without keeping it: its catalogue is read next time.
func (t *settled) unloaded(h uint64, sd model.SeriesDay) {
	if d := t.days[sd.Day]; d != nil {
		fp := t.fingerprint(h, sd)
		t.drop(sd.Day, d, fp)
		d.spill(fp, t.spillWords())
	}
}

// loaded is told that the planner loaded sd (hashed h) from the store: a
// record of it, if any (not expected), no longer speaks for it.
func (t *settled) loaded(h uint64, sd model.SeriesDay) {
	if d := t.days[sd.Day]; d != nil {
		t.drop(sd.Day, d, t.fingerprint(h, sd))
	}
}

// drop forgets the record of fp, of day dd (whose state is d), if any.
func (t *settled) drop(dd model.Day, d *settledDay, fp fingerprint) {
	if i := t.recs.find(fp, dd); i >= 0 {
		t.remove(d, i)
	}
}

// remove deletes the record in slot i, of day d.
func (t *settled) remove(d *settledDay, i int) {
	t.recs.deleteAt(i)
	t.count(d, -1)
}
