package tree

import (
	"bytes"
	"crypto/sha256"
	"strings"
	"testing"

	"golang.org/x/mod/sumdb/tlog"
)

func leaf(i int) Hash { return tlog.RecordHash([]byte{byte(i), byte(i >> 8)}) }

// TestFrontier checks the frontier's root and nodes against tlog's tree
// hash for every size up to 300.
func TestFrontier(t *testing.T) {
	var hashes []Hash
	var f Frontier
	if f.Root() != EmptyRoot || EmptyRoot != sha256.Sum256(nil) {
		t.Fatal("empty root is not SHA-256 of nothing")
	}
	for n := 1; n <= 300; n++ {
		h := leaf(n)
		hashes = append(hashes, h)
		f.Append(h)
		r := Reader(func(level int, index int64) (Hash, error) {
			lo := index << level
			return Subtree(hashes[lo : lo+1<<level]), nil
		})
		want, err := tlog.TreeHash(int64(n), r)
		if err != nil {
			t.Fatal(err)
		}
		if !f.Valid() || f.Root() != want {
			t.Fatalf("size %d: frontier root %v, tree hash %v", n, f.Root(), want)
		}
		for level := 0; level < 10; level++ {
			for idx := int64(0); idx<<level < int64(n); idx++ {
				h, ok := f.Node(level, idx)
				lo := idx << level
				if hi := lo + 1<<level; ok && (hi > int64(n) || h != Subtree(hashes[lo:hi])) {
					t.Fatalf("size %d: Node(%d, %d) wrong", n, level, idx)
				}
			}
		}
	}
}

// TestAppendBlock checks that AppendBlock returns exactly the complete
// subtrees of 2^level leaves, with their hashes, as their last leaf comes.
func TestAppendBlock(t *testing.T) {
	for _, level := range []int{0, 1, 3, 5} {
		var hashes []Hash
		var f Frontier
		var blocks []Hash
		for n := 1; n <= 300; n++ {
			h := leaf(n)
			hashes = append(hashes, h)
			block, ok := f.AppendBlock(h, level)
			if want := n%(1<<level) == 0; ok != want {
				t.Fatalf("level %d, size %d: block returned %v, want %v", level, n, ok, want)
			}
			if ok {
				if want := Subtree(hashes[n-1<<level : n]); block != want {
					t.Fatalf("level %d, size %d: block %v, want %v", level, n, block, want)
				}
				blocks = append(blocks, block)
			}
		}
		if len(blocks) != 300>>level {
			t.Errorf("level %d: %d blocks, want %d", level, len(blocks), 300>>level)
		}
	}
}

func TestProofsRoundTrip(t *testing.T) {
	var hashes []Hash
	for i := range 37 {
		hashes = append(hashes, leaf(i))
	}
	r := Reader(func(level int, index int64) (Hash, error) {
		lo := index << level
		return Subtree(hashes[lo : lo+1<<level]), nil
	})
	root, _ := tlog.TreeHash(37, r)
	root20, _ := tlog.TreeHash(20, r)
	for i := range int64(37) {
		p, err := tlog.ProveRecord(37, i, r)
		if err != nil {
			t.Fatal(err)
		}
		if err := CheckInclusion(p, 37, root, i, hashes[i]); err != nil {
			t.Fatal(err)
		}
		if CheckInclusion(p, 37, root, (i+1)%37, hashes[i]) == nil {
			t.Fatalf("proof of %d accepted at another index", i)
		}
	}
	cp, err := tlog.ProveTree(37, 20, r)
	if err != nil {
		t.Fatal(err)
	}
	if err := CheckConsistency(cp, 20, root20, 37, root); err != nil {
		t.Fatal(err)
	}
	if CheckConsistency(cp, 20, root, 37, root) == nil {
		t.Fatal("consistency with a wrong old root accepted")
	}
	if CheckConsistency(nil, 37, root, 37, root) != nil || CheckConsistency(nil, 0, Hash{}, 37, root) != nil {
		t.Fatal("trivial consistency refused")
	}
	// Text forms round-trip.
	ip := InclusionProof{Leaf: []byte(`{"a":1}`), Index: 5, Hashes: []Hash(cp[:3]), Checkpoint: []byte("o\n1\nx\n\n— k sig\n")}
	got, err := ParseInclusionProof(ip.Marshal())
	if err != nil || got.Index != 5 || !bytes.Equal(got.Leaf, ip.Leaf) || len(got.Hashes) != 3 || !bytes.Equal(got.Checkpoint, ip.Checkpoint) {
		t.Fatalf("inclusion proof round trip: %+v, %v", got, err)
	}
	cpp := ConsistencyProof{Old: 20, Hashes: []Hash(cp), Checkpoint: ip.Checkpoint}
	gc, err := ParseConsistencyProof(cpp.Marshal())
	if err != nil || gc.Old != 20 || len(gc.Hashes) != len(cp) || !bytes.Equal(gc.Checkpoint, ip.Checkpoint) {
		t.Fatalf("consistency proof round trip: %+v, %v", gc, err)
	}
}

func TestParseCheckpoint(t *testing.T) {
	c := Checkpoint{Origin: "example.com/t/s", Size: 12, Root: leaf(1)}
	got, err := ParseCheckpoint(c.Marshal())
	if err != nil || got != c {
		t.Fatalf("round trip: %+v %v", got, err)
	}
	good := string(c.Marshal())
	lines := strings.Split(good, "\n")
	for name, bad := range map[string]string{
		"leading zero":   lines[0] + "\n012\n" + lines[2] + "\n",
		"negative":       lines[0] + "\n-1\n" + lines[2] + "\n",
		"huge":           lines[0] + "\n99999999999999999999\n" + lines[2] + "\n",
		"short hash":     lines[0] + "\n12\nAAAA\n",
		"extension":      good + "ext\n",
		"no newline":     strings.TrimSuffix(good, "\n"),
		"space origin":   "a b\n12\n" + lines[2] + "\n",
		"plus origin":    "a+b\n12\n" + lines[2] + "\n",
		"empty":          "",
		"url-safe b64":   lines[0] + "\n12\n" + strings.NewReplacer("+", "-", "/", "_").Replace(lines[2]) + "x\n",
		"empty origin":   "\n12\n" + lines[2] + "\n",
		"two blank line": lines[0] + "\n\n12\n" + lines[2] + "\n",
	} {
		if _, err := ParseCheckpoint([]byte(bad)); err == nil {
			t.Errorf("%s: %q accepted", name, bad)
		}
	}
}

func FuzzParseCheckpoint(f *testing.F) {
	f.Add((Checkpoint{Origin: "example.com/t/s", Size: 12, Root: leaf(1)}).Marshal())
	f.Add([]byte("a\n0\n47DEQpj8HBSa+/TImW+5JCeuQeRkm5NMpJWZG3hSuFU=\n"))
	f.Fuzz(func(t *testing.T, in []byte) {
		c, err := ParseCheckpoint(in)
		if err != nil {
			return
		}
		if !bytes.Equal(c.Marshal(), in) {
			t.Fatalf("accepted %q, which marshals to %q", in, c.Marshal())
		}
	})
}

func FuzzParseProofs(f *testing.F) {
	ip := InclusionProof{Leaf: []byte(`{}`), Index: 3, Hashes: []Hash{leaf(1), leaf(2)}, Checkpoint: []byte("a\n1\nb\n\n— k x\n")}
	f.Add(ip.Marshal())
	f.Add(ConsistencyProof{Old: 2, Hashes: []Hash{leaf(3)}, Checkpoint: ip.Checkpoint}.Marshal())
	f.Fuzz(func(t *testing.T, in []byte) {
		if p, err := ParseInclusionProof(in); err == nil {
			if p.Index < 0 || p.Index > MaxSize || len(p.Hashes) > maxProofHashes {
				t.Fatalf("out of range: %+v", p)
			}
			if again, err := ParseInclusionProof(p.Marshal()); err != nil || again.Index != p.Index || len(again.Hashes) != len(p.Hashes) {
				t.Fatalf("re-parse of %q: %v", p.Marshal(), err)
			}
		}
		if p, err := ParseConsistencyProof(in); err == nil {
			if p.Old < 0 || p.Old > MaxSize || len(p.Hashes) > maxProofHashes {
				t.Fatalf("out of range: %+v", p)
			}
			if again, err := ParseConsistencyProof(p.Marshal()); err != nil || again.Old != p.Old || len(again.Hashes) != len(p.Hashes) {
				t.Fatalf("re-parse of %q: %v", p.Marshal(), err)
			}
		}
	})
}
