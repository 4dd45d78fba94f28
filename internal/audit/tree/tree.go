// Package tree holds the transparency-log formats of Sluice's audit logs
// and their arithmetic: RFC 6962 trees (through golang.org/x/mod/sumdb/tlog),
// the compact frontier of a tree kept across retention, C2SP tlog-checkpoint
// bodies signed as C2SP signed notes, and the text forms of inclusion and
// consistency proofs. It does no I/O; every parser here reads outside input
// and refuses anything but the exact documented form.
package tree

import (
	"bytes"
	"encoding/base64"
	"errors"
	"fmt"
	"math/bits"
	"strconv"
	"strings"

	"golang.org/x/mod/sumdb/tlog"
)

// Hash is a SHA-256 tree hash.
type Hash = tlog.Hash

// MaxSize bounds a tree's size: sizes and indexes are int64 in the
// arithmetic, and a checkpoint or proof claiming more is refused.
const MaxSize = 1 << 62

// EmptyRoot is the root of the empty tree, SHA-256 of nothing.
var EmptyRoot = Hash{0xe3, 0xb0, 0xc4, 0x42, 0x98, 0xfc, 0x1c, 0x14, 0x9a, 0xfb, 0xf4, 0xc8, 0x99, 0x6f, 0xb9, 0x24,
	0x27, 0xae, 0x41, 0xe4, 0x64, 0x9b, 0x93, 0x4c, 0xa4, 0x95, 0x99, 0x1b, 0x78, 0x52, 0xb8, 0x55}

// Frontier is the compact form of a tree of Size leaves: the roots of its
// maximal complete subtrees, largest (leftmost) first, one per set bit of
// Size. It is all that is needed to extend the tree and to compute its
// root, and it is what a stream keeps of the days retention dropped.
type Frontier struct {
	Size   int64
	Hashes []Hash
}

// Append adds a leaf hash.
func (f *Frontier) Append(leaf Hash) { f.AppendBlock(leaf, -1) }

// AppendBlock adds a leaf hash like Append and, when the leaf completes a
// subtree of 2^level leaves (whose index is then Size>>level - 1), returns
// that subtree's hash: the merges compute it anyway.
func (f *Frontier) AppendBlock(leaf Hash, level int) (Hash, bool) {
	h := leaf
	var block Hash
	done := level == 0
	if done {
		block = leaf
	}
	// Merge with the complete subtrees of equal size: one per trailing one
	// bit of the old size.
	l := 0
	for s := f.Size; s&1 == 1; s >>= 1 {
		n := len(f.Hashes) - 1
		h = tlog.NodeHash(f.Hashes[n], h)
		f.Hashes = f.Hashes[:n]
		if l++; l == level {
			block, done = h, true
		}
	}
	f.Hashes = append(f.Hashes, h)
	f.Size++
	return block, done
}

// Root returns the RFC 6962 root of the tree.
func (f *Frontier) Root() Hash {
	if len(f.Hashes) == 0 {
		return EmptyRoot
	}
	r := f.Hashes[len(f.Hashes)-1]
	for i := len(f.Hashes) - 2; i >= 0; i-- {
		r = tlog.NodeHash(f.Hashes[i], r)
	}
	return r
}

// Clone returns a copy that does not share its hashes.
func (f *Frontier) Clone() Frontier {
	return Frontier{Size: f.Size, Hashes: append([]Hash(nil), f.Hashes...)}
}

// Valid reports whether the frontier has one hash per set bit of its size.
func (f *Frontier) Valid() bool {
	return f.Size >= 0 && f.Size <= MaxSize && bits.OnesCount64(uint64(f.Size)) == len(f.Hashes)
}

// Node returns the hash of the complete subtree at (level, index) if the
// frontier holds it: the subtree covering leaves [index<<level,
// (index+1)<<level).
func (f *Frontier) Node(level int, index int64) (Hash, bool) {
	if level < 0 || level > 62 || f.Size>>level != index+1 || index&1 != 0 {
		return Hash{}, false
	}
	// The frontier's hashes are ordered by descending level; count the set
	// bits of Size above level to find this one.
	i := bits.OnesCount64(uint64(f.Size) >> (level + 1))
	return f.Hashes[i], true
}

// NodeFunc returns the hash of the complete subtree at (level, index).
type NodeFunc func(level int, index int64) (Hash, error)

// Reader adapts a NodeFunc to tlog's stored-hash indexes.
func Reader(fn NodeFunc) tlog.HashReader {
	return tlog.HashReaderFunc(func(idx []int64) ([]Hash, error) {
		out := make([]Hash, len(idx))
		for i, x := range idx {
			level, n := tlog.SplitStoredHashIndex(x)
			h, err := fn(level, n)
			if err != nil {
				return nil, err
			}
			out[i] = h
		}
		return out, nil
	})
}

// Subtree returns the root of a complete subtree over leaves, whose length
// must be a power of two.
func Subtree(leaves []Hash) Hash {
	if len(leaves) == 1 {
		return leaves[0]
	}
	half := len(leaves) / 2
	return tlog.NodeHash(Subtree(leaves[:half]), Subtree(leaves[half:]))
}

// Checkpoint is the body of a C2SP tlog-checkpoint: the log's origin, its
// size and its RFC 6962 root.
type Checkpoint struct {
	Origin string
	Size   int64
	Root   Hash
}

// Marshal returns the checkpoint body: three lines, each ending in '\n'.
func (c Checkpoint) Marshal() []byte {
	return fmt.Appendf(nil, "%s\n%d\n%s\n", c.Origin, c.Size, base64.StdEncoding.EncodeToString(c.Root[:]))
}

// ParseCheckpoint parses a checkpoint body. Extension lines, which Sluice
// never writes, are refused.
func ParseCheckpoint(text []byte) (Checkpoint, error) {
	var c Checkpoint
	lines := strings.Split(string(text), "\n")
	if len(lines) != 4 || lines[3] != "" {
		return c, errors.New("checkpoint: want exactly three lines, each ending in a newline")
	}
	if err := validOrigin(lines[0]); err != nil {
		return c, err
	}
	c.Origin = lines[0]
	size, err := parseSize(lines[1])
	if err != nil {
		return c, fmt.Errorf("checkpoint: tree size: %w", err)
	}
	c.Size = size
	if c.Root, err = parseHash(lines[2]); err != nil {
		return c, fmt.Errorf("checkpoint: root hash: %w", err)
	}
	return c, nil
}

func validOrigin(s string) error {
	if s == "" || len(s) > 1024 {
		return errors.New("checkpoint: origin must be 1-1024 bytes")
	}
	for _, r := range s {
		if r < 0x21 || r == 0x7f || r == '+' {
			return errors.New("checkpoint: origin must be printable, without spaces or '+'")
		}
	}
	return nil
}

// parseSize parses an ASCII decimal without leading zeros, at most MaxSize.
func parseSize(s string) (int64, error) {
	if s == "" || len(s) > 1 && s[0] == '0' || strings.TrimLeft(s, "0123456789") != "" {
		return 0, fmt.Errorf("%q is not a decimal without leading zeros", s)
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n > MaxSize {
		return 0, fmt.Errorf("%q is out of range (at most %d)", s, int64(MaxSize))
	}
	return n, nil
}

// parseHash parses the standard base64 of a 32-byte hash.
func parseHash(s string) (Hash, error) {
	var h Hash
	// The decoder skips \r and \n even when strict: compare the re-encoding.
	b, err := base64.StdEncoding.Strict().DecodeString(s)
	if err != nil || len(b) != len(h) || base64.StdEncoding.EncodeToString(b) != s {
		return h, fmt.Errorf("%q is not the standard base64 of %d bytes", s, len(h))
	}
	copy(h[:], b)
	return h, nil
}

// InclusionProof proves that the leaf Index, whose canonical bytes are
// Leaf, is in the tree of a signed checkpoint. Its text form is a C2SP
// tlog-proof (c2sp.org/tlog-proof@v1) with the canonical event bytes in
// its extra line.
type InclusionProof struct {
	Leaf       []byte // the canonical event
	Index      int64
	Hashes     []Hash // from the leaf's sibling up
	Checkpoint []byte // the signed note, verbatim
}

const proofHeader = "c2sp.org/tlog-proof@v1"

// Marshal returns the text form.
func (p InclusionProof) Marshal() []byte {
	var b bytes.Buffer
	b.WriteString(proofHeader + "\n")
	b.WriteString("extra " + base64.StdEncoding.EncodeToString(p.Leaf) + "\n")
	fmt.Fprintf(&b, "index %d\n", p.Index)
	for _, h := range p.Hashes {
		b.WriteString(base64.StdEncoding.EncodeToString(h[:]) + "\n")
	}
	b.WriteString("\n")
	b.Write(p.Checkpoint)
	return b.Bytes()
}

// maxProofHashes bounds the hashes of a proof: a tree of at most MaxSize
// leaves has inclusion proofs of at most 62 and consistency proofs of at
// most 2*62 hashes.
const maxProofHashes = 128

// ParseInclusionProof parses the text form. The extra line is required: it
// carries the leaf.
func ParseInclusionProof(text []byte) (InclusionProof, error) {
	var p InclusionProof
	head, note, ok := bytes.Cut(text, []byte("\n\n"))
	if !ok {
		return p, errors.New("inclusion proof: no blank line before the checkpoint")
	}
	lines := strings.Split(string(head), "\n")
	if len(lines) < 3 || lines[0] != proofHeader {
		return p, fmt.Errorf("inclusion proof: want %q, an extra line and an index line first", proofHeader)
	}
	extra, ok := strings.CutPrefix(lines[1], "extra ")
	if !ok {
		return p, errors.New("inclusion proof: second line must be \"extra <base64 of the canonical event>\"")
	}
	leaf, err := base64.StdEncoding.Strict().DecodeString(extra)
	if err != nil || len(leaf) == 0 || base64.StdEncoding.EncodeToString(leaf) != extra {
		return p, errors.New("inclusion proof: extra is not non-empty standard base64")
	}
	p.Leaf = leaf
	idx, ok := strings.CutPrefix(lines[2], "index ")
	if !ok {
		return p, errors.New("inclusion proof: third line must be \"index <n>\"")
	}
	if p.Index, err = parseSize(idx); err != nil {
		return p, fmt.Errorf("inclusion proof: index: %w", err)
	}
	if p.Hashes, err = parseHashes(lines[3:]); err != nil {
		return p, fmt.Errorf("inclusion proof: %w", err)
	}
	p.Checkpoint = note
	return p, nil
}

func parseHashes(lines []string) ([]Hash, error) {
	if len(lines) > maxProofHashes {
		return nil, fmt.Errorf("more than %d hashes", maxProofHashes)
	}
	out := make([]Hash, 0, len(lines))
	for i, l := range lines {
		h, err := parseHash(l)
		if err != nil {
			return nil, fmt.Errorf("hash %d: %w", i+1, err)
		}
		out = append(out, h)
	}
	return out, nil
}

// ConsistencyProof proves that the tree of the signed checkpoint
// Checkpoint extends the tree of size Old. Its text form is the body of a
// C2SP tlog-witness add-checkpoint request: "old <size>", the proof hashes,
// a blank line, the new checkpoint verbatim.
type ConsistencyProof struct {
	Old        int64
	Hashes     []Hash
	Checkpoint []byte
}

// Marshal returns the text form.
func (p ConsistencyProof) Marshal() []byte {
	var b bytes.Buffer
	fmt.Fprintf(&b, "old %d\n", p.Old)
	for _, h := range p.Hashes {
		b.WriteString(base64.StdEncoding.EncodeToString(h[:]) + "\n")
	}
	b.WriteString("\n")
	b.Write(p.Checkpoint)
	return b.Bytes()
}

// ParseConsistencyProof parses the text form.
func ParseConsistencyProof(text []byte) (ConsistencyProof, error) {
	var p ConsistencyProof
	head, note, ok := bytes.Cut(text, []byte("\n\n"))
	if !ok {
		return p, errors.New("consistency proof: no blank line before the checkpoint")
	}
	lines := strings.Split(string(head), "\n")
	old, ok := strings.CutPrefix(lines[0], "old ")
	if !ok {
		return p, errors.New("consistency proof: first line must be \"old <size>\"")
	}
	var err error
	if p.Old, err = parseSize(old); err != nil {
		return p, fmt.Errorf("consistency proof: old size: %w", err)
	}
	if p.Hashes, err = parseHashes(lines[1:]); err != nil {
		return p, fmt.Errorf("consistency proof: %w", err)
	}
	p.Checkpoint = note
	return p, nil
}

// CheckInclusion checks that leaf (a leaf hash) is leaf index of the tree
// of size and root, with RFC 6962 path hashes.
func CheckInclusion(hashes []Hash, size int64, root Hash, index int64, leaf Hash) error {
	if index < 0 || index >= size {
		return fmt.Errorf("index %d is not in a tree of size %d", index, size)
	}
	if err := tlog.CheckRecord(hashes, size, root, index, leaf); err != nil {
		return fmt.Errorf("inclusion proof of leaf %d in tree of size %d: %w", index, size, err)
	}
	return nil
}

// CheckConsistency checks that the tree (newSize, newRoot) extends
// (oldSize, oldRoot). Equal sizes need equal roots and no hashes; old size
// 0 is consistent with everything and needs no hashes.
func CheckConsistency(hashes []Hash, oldSize int64, oldRoot Hash, newSize int64, newRoot Hash) error {
	switch {
	case oldSize < 0 || oldSize > newSize:
		return fmt.Errorf("old size %d is not in 0..new size %d", oldSize, newSize)
	case oldSize == 0:
		if len(hashes) != 0 {
			return errors.New("consistency proof from the empty tree must be empty")
		}
		return nil
	case oldSize == newSize:
		if len(hashes) != 0 || oldRoot != newRoot {
			return fmt.Errorf("trees of equal size %d differ", oldSize)
		}
		return nil
	}
	if err := tlog.CheckTree(hashes, newSize, newRoot, oldSize, oldRoot); err != nil {
		return fmt.Errorf("consistency proof from size %d to %d: %w", oldSize, newSize, err)
	}
	return nil
}
