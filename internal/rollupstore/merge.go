package rollupstore

import (
	"io"

	"github.com/cockroachdb/pebble/v2"

	"github.com/sluicehq/sluice/internal/rollup"
)

// Rows are written as merge operands, each an encoded row with its version.
// The merger keeps the operand with the highest version (of equal versions,
// the one it holds: they carry the same aggregate), so an insert needs no
// read, an older version arriving late never replaces a newer one, and a
// tombstone (count 0) keeps retracting what it replaced. An operand that
// does not decode ranks below every valid one, so it can never hide a row;
// reads report it as corrupt if nothing replaced it.
var latestMerger = &pebble.Merger{
	Name: "sluice.rollup.latest.v1",
	Merge: func(_, value []byte) (pebble.ValueMerger, error) {
		m := &latestRow{}
		m.take(value)
		return m, nil
	},
}

type latestRow struct {
	best  []byte
	ver   uint64
	valid bool
}

// take keeps value if it outranks what m holds. It reads only the version
// (checking the whole encoding, copying nothing), and copies value into its
// own buffer because the caller keeps ownership of it.
func (m *latestRow) take(value []byte) {
	ver, err := rollup.RowVersion(value)
	valid := err == nil
	switch {
	case m.best == nil, valid && (!m.valid || ver > m.ver):
	default:
		return
	}
	m.best = append(m.best[:0], value...)
	m.ver, m.valid = ver, valid
}

func (m *latestRow) MergeNewer(value []byte) error { m.take(value); return nil }
func (m *latestRow) MergeOlder(value []byte) error { m.take(value); return nil }

func (m *latestRow) Finish(bool) ([]byte, io.Closer, error) { return m.best, nil, nil }
