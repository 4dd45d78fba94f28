package decode

import "hash/maphash"

// internTable is a bounded set of strings for reusing the copies of
// repeated ids and texts across rows and requests. It is an open-addressing
// table with linear probing, cheaper than a map for short keys. A probe stops
// after maxProbe slots, so colliding keys (even crafted ones: the hash is
// seeded per table) cost a bounded amount and are just not interned. When
// half full the table is cleared.
type internTable struct {
	seed  maphash.Seed
	slots []string
	n     int
}

const (
	internSlots = 8192 // a power of two
	maxProbe    = 8
)

func newInternTable() internTable {
	return internTable{seed: maphash.MakeSeed(), slots: make([]string, internSlots)}
}

// get returns a string equal to b that does not alias b.
func (t *internTable) get(b []byte) string {
	if len(b) == 0 {
		return ""
	}
	mask := uint64(len(t.slots) - 1)
	i := maphash.Bytes(t.seed, b) & mask
	for range maxProbe {
		s := t.slots[i]
		if s == "" {
			if t.n >= len(t.slots)/2 {
				clear(t.slots)
				t.n = 0
			}
			s = string(b)
			t.slots[i] = s
			t.n++
			return s
		}
		if s == string(b) {
			return s
		}
		i = (i + 1) & mask
	}
	return string(b)
}
