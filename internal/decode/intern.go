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

// Sizes of a decoder's tables (powers of two), and the probe limit.
const (
	internSlots = 8192 // ids
	textSlots   = 1024 // texts
	maxProbe    = 8
)

func newInternTable(slots int) internTable {
	return internTable{seed: maphash.MakeSeed(), slots: make([]string, slots)}
}

// get returns a string equal to b that does not alias b.
func (t *internTable) get(b []byte) string {
	if len(b) == 0 {
		return ""
	}
	s, slot := t.lookup(b)
	if s != "" {
		return s
	}
	return t.insert(slot, b)
}

// lookup returns the string equal to b (which must not be empty), or ""
// and the slot where insert should put it (-1 when the probe is full).
func (t *internTable) lookup(b []byte) (string, int) {
	mask := uint64(len(t.slots) - 1)
	i := maphash.Bytes(t.seed, b) & mask
	for range maxProbe {
		s := t.slots[i]
		if s == "" {
			return "", int(i)
		}
		if s == string(b) {
			return s, 0
		}
		i = (i + 1) & mask
	}
	return "", -1
}

// insert returns a copy of b, kept in slot if it is not -1.
func (t *internTable) insert(slot int, b []byte) string {
	s := string(b)
	if slot < 0 {
		return s
	}
	if t.n >= len(t.slots)/2 {
		clear(t.slots)
		t.n = 0
	}
	t.slots[slot] = s
	t.n++
	return s
}
