package buckets

import (
	"math/rand/v2"
	"testing"
)

// The spill filter never forgets a series-day it was given (a false
// negative would skip a catalogue read that was needed), and at its
// design load says "maybe" of few others.
func TestSpillFilter(t *testing.T) {
	const n = 100_000
	tier := newSettled(n)
	var d settledDay
	rng := rand.New(rand.NewPCG(7, 8))
	in := make([]fingerprint, n)
	for i := range in {
		in[i] = fingerprint{rng.Uint64(), rng.Uint64()}
		d.spill(in[i], tier.spillWords())
	}
	for _, fp := range in {
		if !d.maySpilled(fp) {
			t.Fatalf("%v spilled, and the filter says it was not", fp)
		}
	}
	fps := 0
	for range n {
		if d.maySpilled(fingerprint{rng.Uint64(), rng.Uint64()}) {
			fps++
		}
	}
	t.Logf("false positives: %.2f%%", 100*float64(fps)/n)
	if rate := float64(fps) / n; rate > 0.06 {
		t.Errorf("false positives %.2f%% at the design load, want under 6%%", 100*rate)
	}
	var empty settledDay
	if empty.maySpilled(in[0]) {
		t.Error("an empty filter says maybe")
	}
}
