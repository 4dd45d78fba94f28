package store

import (
	"errors"
	"slices"
	"testing"
)

func TestAuditLeavesRoundTrip(t *testing.T) {
	want := []AuditLeaf{{TS: -5, EventID: "a", Hash: [32]byte{1}}, {TS: 1 << 40, EventID: "", Hash: [32]byte{2}}, {TS: 7, EventID: "événement", Hash: [32]byte{31: 9}}}
	v := AppendAuditLeaves(nil, want)
	var got []AuditLeaf
	if err := EachAuditLeaf(v, func(l AuditLeaf) error { got = append(got, l); return nil }); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got, want) {
		t.Fatalf("round trip: %+v, want %+v", got, want)
	}
	for cut := 1; cut < len(v); cut++ {
		n := 0
		err := EachAuditLeaf(v[:cut], func(AuditLeaf) error { n++; return nil })
		if !errors.Is(err, ErrCorruptLeaves) && n == len(want) {
			t.Fatalf("a chunk cut at %d of %d decoded whole", cut, len(v))
		}
	}
	stop := errors.New("stop")
	if err := EachAuditLeaf(v, func(AuditLeaf) error { return stop }); err != stop {
		t.Fatalf("fn's error: %v, want it returned as is", err)
	}
}
