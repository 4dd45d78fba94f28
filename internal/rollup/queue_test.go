package rollup

import (
	"math/rand/v2"
	"slices"
	"testing"
)

// The heap hands its elements back in key order, however they were pushed,
// with pops interleaved.
func TestHeapOrder(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 8))
	for _, n := range []int{0, 1, 2, 7, 100} {
		var h heap[minute]
		var want []int64
		var got []int64
		for i := range n {
			v := rng.Int64N(50)
			h.push(minute(v))
			want = append(want, v)
			if i%3 == 2 { // pop the smallest now and then
				slices.Sort(want)
				got = append(got, int64(h.pop()))
				if got[len(got)-1] != want[0] {
					t.Fatalf("n=%d: popped %d, smallest held is %d", n, got[len(got)-1], want[0])
				}
				want = want[1:]
			}
		}
		slices.Sort(want)
		for range len(want) {
			got = append(got, int64(h.pop()))
		}
		if rest := got[len(got)-len(want):]; !slices.Equal(rest, want) {
			t.Errorf("n=%d: drained %v, want %v", n, rest, want)
		}
		if len(h) != 0 {
			t.Errorf("n=%d: %d left after draining", n, len(h))
		}
	}
}
