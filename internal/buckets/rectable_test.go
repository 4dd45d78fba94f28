package buckets

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"unsafe"
)

// recTable against a Go map: random puts, finds, deletes and sweeps on
// tables of a few slots (every run wraps around the end) up to a few
// thousand, kept as full as the bound lets the planner fill them. Hashes
// are drawn from a few values too, so that runs of one home are long.
func TestRecTableMatchesMap(t *testing.T) {
	for _, max := range []int{1, 2, 3, 7, 50, 3000} {
		t.Run(fmt.Sprint(max), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(uint64(max), 1))
			tab := newRecTable(max)
			want := map[fingerprint]settledRec{}
			fps := make([]fingerprint, 3*max+3)
			for i := range fps {
				// Homes crowded into a few slots: long runs, wrapping.
				fps[i] = fingerprint{uint64(rng.IntN(4)) << 62, uint64(i)}
				if i%2 == 0 {
					fps[i].a = rng.Uint64()
				}
			}
			check := func(step int) {
				n := 0
				for _, s := range tab.slots {
					if s.rec.rows != 0 {
						n++
					}
				}
				if n != len(want) {
					t.Fatalf("step %d: %d records held, want %d", step, n, len(want))
				}
				for _, fp := range fps {
					i := tab.find(fp, 0)
					rec, ok := want[fp]
					if ok != (i >= 0) || ok && tab.slots[i].rec != rec {
						t.Fatalf("step %d: find(%v) = %d, want %v %v", step, fp, i, ok, rec)
					}
				}
			}
			for step := range 4000 {
				fp := fps[rng.IntN(len(fps))]
				switch op := rng.IntN(10); {
				case op < 5:
					if _, ok := want[fp]; !ok && len(want) >= max {
						continue // the caller keeps it within the bound
					}
					// Records of day 0 (no tag bits), as settled drops
					// a record before it puts one.
					rec := settledRec{rows: uint32(1 + rng.IntN(9)), max: uint32(step)}
					if i := tab.find(fp, 0); i >= 0 {
						tab.deleteAt(i)
					}
					tab.put(fp, rec)
					want[fp] = rec
				case op < 9:
					if i := tab.find(fp, 0); i >= 0 {
						tab.deleteAt(i)
					}
					delete(want, fp)
				default:
					odd := rng.IntN(2) == 0
					tab.deleteIf(func(_ fingerprint, r settledRec) bool { return r.rows%2 == 1 == odd })
					for k, r := range want {
						if r.rows%2 == 1 == odd {
							delete(want, k)
						}
					}
				}
				check(step)
			}
		})
	}
}

// The table's size is fixed by the bound: 32-byte slots at most 70% full,
// about 46 bytes a record (membudget.SettledBytes counts 48 with the spill
// filters).
func TestRecTableSize(t *testing.T) {
	if s := unsafe.Sizeof(recSlot{}); s != 32 {
		t.Errorf("a slot takes %d bytes, want 32", s)
	}
	const max = 1_000_000
	tab := newRecTable(max)
	if per := float64(len(tab.slots)) * 32 / max; per > 46 {
		t.Errorf("%.1f bytes a record at the bound, want at most 46", per)
	}
}
