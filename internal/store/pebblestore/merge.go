package pebblestore

import (
	"encoding/binary"
	"io"
	"sync"
	"sync/atomic"
	"time"
)

// Catalogue entries are written with Pebble merge operations, each value
// prefixed by the version of the batch that wrote it (store.Batch.Version,
// taken by the sink in plan order). The merge keeps the value with the
// highest version, and of equal versions the newer one. So two commits
// carrying the same entry may land in either order, and run concurrently:
// the entry planned last wins, and the catalogue never goes back to an
// older copy that would hide acknowledged rows.

const catalogueMergerName = "sluice.catalogue.v1"

// latestVersion is a pebble.ValueMerger keeping the highest-versioned
// value. Its buffer is its own: a merger is recycled (latestVersions) once
// Pebble closes it, as every flush and compaction of a catalogue entry
// still a merge operand makes one (a fifth of a gigabyte of allocations
// in a run of a million devices, each writing its entry twice a day).
type latestVersion struct{ best []byte }

var latestVersions = sync.Pool{New: func() any { return new(latestVersion) }}

// newLatestVersion returns a merger holding a copy of value.
func newLatestVersion(value []byte) *latestVersion {
	m := latestVersions.Get().(*latestVersion)
	m.best = append(m.best[:0], value...)
	return m
}

func valueVersion(v []byte) int64 {
	if len(v) < 8 {
		return -1 << 63
	}
	return int64(binary.BigEndian.Uint64(v) ^ 1<<63)
}

func (m *latestVersion) MergeNewer(value []byte) error {
	if valueVersion(value) >= valueVersion(m.best) {
		m.best = append(m.best[:0], value...)
	}
	return nil
}

func (m *latestVersion) MergeOlder(value []byte) error {
	if valueVersion(value) > valueVersion(m.best) {
		m.best = append(m.best[:0], value...)
	}
	return nil
}

// Finish returns the value, valid until Pebble closes m.
func (m *latestVersion) Finish(bool) ([]byte, io.Closer, error) { return m.best, m, nil }

// Close recycles m once Pebble is done with the value Finish returned.
func (m *latestVersion) Close() error {
	if cap(m.best) > maxPooledValue {
		m.best = nil
	}
	latestVersions.Put(m)
	return nil
}

// appendVersion appends the version that prefixes a catalogue entry's
// value.
func appendVersion(b []byte, version int64) []byte {
	return binary.BigEndian.AppendUint64(b, uint64(version)^1<<63)
}

// versions hands out batch versions: nanoseconds of the wall clock, made
// strictly increasing, so they also exceed the versions of an earlier run
// of the gateway (unless the clock went back by more than the restart
// took).
type versions struct{ last atomic.Int64 }

func (v *versions) next() int64 {
	for {
		last := v.last.Load()
		n := max(time.Now().UnixNano(), last+1)
		if v.last.CompareAndSwap(last, n) {
			return n
		}
	}
}
