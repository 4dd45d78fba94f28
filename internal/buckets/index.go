package buckets

import (
	"hash/maphash"

	"github.com/sluicehq/sluice/internal/model"
)

// index holds the series-days a planner has loaded, by a 64-bit hash of
// their key (model.SeriesDay.Hash): a Go map keyed by the hash is a quarter of the size of one
// keyed by model.SeriesDay (16 bytes a slot instead of 64), whose every
// look-up also hashes two strings, and with a fleet of a million devices
// a day every look-up of a new series-day misses the CPU's caches. Keys
// whose hashes collide are chained through Series.next; the seed is
// random per process, so a client cannot choose device ids that collide.
type index struct {
	seed maphash.Seed
	m    map[uint64]*Series
	n    int
}

func newIndex() index { return index{seed: maphash.MakeSeed(), m: make(map[uint64]*Series)} }

func (ix *index) hash(sd model.SeriesDay) uint64 { return sd.Hash(ix.seed) }

// get returns the state of sd, or nil.
func (ix *index) get(sd model.SeriesDay) *Series { return ix.find(ix.hash(sd), sd) }

// find returns the state of sd, whose hash is h, or nil.
func (ix *index) find(h uint64, sd model.SeriesDay) *Series {
	for s := ix.m[h]; s != nil; s = s.next {
		if s.sd == sd {
			return s
		}
	}
	return nil
}

// put adds s, whose hash is h, and returns the state of the same
// series-day it replaced, if any: the look-up costs little, as link reads
// the same slot for the chain.
func (ix *index) put(s *Series, h uint64) (replaced *Series) {
	if replaced = ix.find(h, s.sd); replaced != nil {
		ix.remove(replaced)
	}
	ix.link(s, h)
	return replaced
}

// link adds s under hash h.
func (ix *index) link(s *Series, h uint64) {
	s.hash, s.next = h, ix.m[h]
	ix.m[h] = s
	ix.n++
}

// remove takes out s, which the index holds.
func (ix *index) remove(s *Series) {
	head := ix.m[s.hash]
	switch {
	case head == s && s.next == nil:
		delete(ix.m, s.hash)
	case head == s:
		ix.m[s.hash] = s.next
	default:
		prev := head
		for prev.next != s {
			prev = prev.next
		}
		prev.next = s.next
	}
	s.next = nil
	ix.n--
}

func (ix *index) len() int { return ix.n }
