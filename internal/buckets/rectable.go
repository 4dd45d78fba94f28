package buckets

import (
	"math/bits"

	"github.com/sluicehq/sluice/internal/model"
)

// recTable holds the remembered series-days' records by fingerprint: open
// addressing with linear probing in one array of 32-byte slots, sized once
// for the bound (at most 70% full) when its first record comes, and
// deletion by shifting the run after the slot back, so that it never
// fills with tombstones. A Go map of the same records took 52–84 bytes a
// record, 84 just after it doubled (which a bound near a million records
// is); this takes 32/0.7 ≈ 46 at the bound, all of it from the first
// record on, and never moves. The array holds no pointers, so the
// collector does not scan it.
type recTable struct {
	slots []recSlot // empty: rec.rows == 0 (a record holds at least a row)
}

type recSlot struct {
	fp  fingerprint
	rec settledRec
}

// recTableLoad is the most of its slots a table fills, in tenths: at 0.7
// a search that misses looks at about six slots (three cache lines), one
// that hits at about two.
const recTableLoad = 7

// newRecTable returns a table for at most max records.
func newRecTable(max int) recTable {
	return recTable{slots: make([]recSlot, max*10/recTableLoad+1)}
}

// home returns the slot where fp's run starts: Lemire's multiply-shift,
// so that the table's size need not be a power of two, of fp.a mixed
// first (a series-day's hash adds its day and kind to its name's, so a
// device's records of today and yesterday would share their top bits,
// and their runs).
func (t *recTable) home(fp fingerprint) int {
	hi, _ := bits.Mul64(fp.a*0x9e3779b97f4a7c15, uint64(len(t.slots)))
	return int(hi)
}

func (t *recTable) next(i int) int {
	if i++; i == len(t.slots) {
		return 0
	}
	return i
}

// find returns the slot of fp's record of day d, or -1. (A fingerprint
// covers the day already; the day is checked too, so that not even a
// collision could make one day's count another's.)
func (t *recTable) find(fp fingerprint, d model.Day) int {
	if len(t.slots) == 0 {
		return -1
	}
	for i := t.home(fp); t.slots[i].rec.rows != 0; i = t.next(i) {
		if t.slots[i].fp == fp && t.slots[i].rec.of(d) {
			return i
		}
	}
	return -1
}

// put stores rec (rows > 0, tagged with its day) under fp, in an empty
// slot: the caller holds no record of fp and day already (settled.keep),
// and keeps the records fewer than the slots.
func (t *recTable) put(fp fingerprint, rec settledRec) {
	i := t.home(fp)
	for t.slots[i].rec.rows != 0 {
		i = t.next(i)
	}
	t.slots[i] = recSlot{fp: fp, rec: rec}
}

// deleteAt empties slot i and shifts back the records after it whose home
// is not between i and where they stand, so that every record stays
// reachable from its home without passing an empty slot.
func (t *recTable) deleteAt(i int) {
	for j := t.next(i); t.slots[j].rec.rows != 0; j = t.next(j) {
		k := t.home(t.slots[j].fp)
		// The record at j may move to i unless its home k lies
		// cyclically in (i, j].
		if i <= j && i < k && k <= j || i > j && (i < k || k <= j) {
			continue
		}
		t.slots[i] = t.slots[j]
		i = j
	}
	t.slots[i] = recSlot{}
}

// deleteIf deletes every record for which drop says so (calling it once
// for each record it deletes, perhaps more than once for one it keeps).
func (t *recTable) deleteIf(drop func(fingerprint, settledRec) bool) {
	for i := 0; i < len(t.slots); {
		if s := t.slots[i]; s.rec.rows != 0 && drop(s.fp, s.rec) {
			// What shifts back into i is looked at again; a record of
			// the table's start that wraps to its end is met there.
			t.deleteAt(i)
			continue
		}
		i++
	}
}
