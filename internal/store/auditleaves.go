package store

import (
	"encoding/binary"
	"errors"
)

// ErrCorruptLeaves is returned for a stored chunk of audit leaves that does
// not decode.
var ErrCorruptLeaves = errors.New("corrupt audit leaves chunk")

// AppendAuditLeaves appends the stored form of a chunk of leaves to v, the
// same in every backend: per leaf its ts (8 bytes, big-endian), its event
// id (a uvarint length, then the bytes) and its 32-byte hash.
func AppendAuditLeaves(v []byte, leaves []AuditLeaf) []byte {
	for _, l := range leaves {
		v = binary.BigEndian.AppendUint64(v, uint64(l.TS))
		v = binary.AppendUvarint(v, uint64(len(l.EventID)))
		v = append(v, l.EventID...)
		v = append(v, l.Hash[:]...)
	}
	return v
}

// AuditLeavesSize is the length of AppendAuditLeaves' encoding of leaves.
func AuditLeavesSize(leaves []AuditLeaf) int {
	var tmp [binary.MaxVarintLen64]byte
	n := 0
	for _, l := range leaves {
		n += 8 + binary.PutUvarint(tmp[:], uint64(len(l.EventID))) + len(l.EventID) + 32
	}
	return n
}

// EachAuditLeaf calls fn with each leaf of a chunk AppendAuditLeaves made,
// in order, and returns fn's first error, or ErrCorruptLeaves.
func EachAuditLeaf(v []byte, fn func(AuditLeaf) error) error {
	for len(v) > 0 {
		var l AuditLeaf
		if len(v) < 8 {
			return ErrCorruptLeaves
		}
		l.TS = int64(binary.BigEndian.Uint64(v))
		v = v[8:]
		n, k := binary.Uvarint(v)
		if k <= 0 || uint64(len(v)-k) < n+32 {
			return ErrCorruptLeaves
		}
		l.EventID = string(v[k : k+int(n)])
		v = v[k+int(n):]
		copy(l.Hash[:], v)
		v = v[32:]
		if err := fn(l); err != nil {
			return err
		}
	}
	return nil
}
