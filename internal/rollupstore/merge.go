package rollupstore

import (
	"encoding/binary"
	"io"

	"github.com/cockroachdb/pebble/v2"

	"github.com/sluicehq/sluice/internal/rollup"
)

// Rows are written as merge operands: a device-minute's rows, each with its
// version, under a by-minute key (latestMetrics); one row under a key of
// the layouts before (latestRow). Of each row the merger keeps the highest
// version (of equal versions, the one it holds: they carry the same
// aggregate), so an insert needs no read, an older version arriving late
// never replaces a newer one, and a tombstone (count 0) keeps retracting
// what it replaced. A row that does not decode ranks below every valid one
// of its metric, so it can never hide a row; reads report it as corrupt if
// nothing replaced it.
var latestMerger = &pebble.Merger{
	Name: "sluice.rollup.latest.v1",
	Merge: func(key, value []byte) (pebble.ValueMerger, error) {
		if isMinuteKey(key) {
			m := &latestMetrics{}
			m.take(value)
			return m, nil
		}
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
	m.rank(value, ver, err == nil)
}

// takeValue is take for a row of a device-minute value, which holds
// aggregates alone (rollup.EncodeValue): a whole row there is corrupt.
func (m *latestRow) takeValue(value []byte) {
	ver, err := rollup.RowVersion(value)
	m.rank(value, ver, err == nil && rollup.IsValue(value))
}

// rank keeps value, of version ver, if it outranks what m holds.
func (m *latestRow) rank(value []byte, ver uint64, valid bool) {
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

// latestMetrics merges device-minute values (minute.go) metric by metric:
// of each metric it keeps the row as latestRow would, so that the rows of
// one device-minute may arrive split over several operands (a recompute's
// rows spread over two inserts, or versions of some metrics only) and the
// result is what one key per metric would hold. The exception is an
// operand whose framing does not decode: its metrics cannot be told apart,
// so it ranks below every valid operand of the key as a whole, and is kept
// as is (and reported by reads) only when nothing valid arrives.
type latestMetrics struct {
	// raw is the first operand, verbatim, while it is the only one: a
	// device-minute written once is not taken apart.
	raw     []byte
	taken   bool
	metrics []metricBest // by name
	bad     []byte       // the first operand that did not decode
	entries []entry      // scratch: the operand being absorbed
	merged  []metricBest // scratch: the merge of metrics and entries
}

type metricBest struct {
	name string
	latestRow
}

// entry is one metric of an operand; both slices share the operand.
type entry struct{ name, value []byte }

func (m *latestMetrics) take(value []byte) {
	if !m.taken {
		m.raw, m.taken = append([]byte(nil), value...), true
		return
	}
	if m.raw != nil {
		raw := m.raw
		m.raw = nil
		m.absorb(raw)
	}
	m.absorb(value)
}

// absorb merges one operand's metrics into m.metrics (both are sorted by
// name: one pass over the two), or keeps the operand as bad.
func (m *latestMetrics) absorb(v []byte) {
	m.entries = m.entries[:0]
	err := eachMinuteEntry(v, func(name, value []byte) error {
		m.entries = append(m.entries, entry{name, value})
		return nil
	})
	if err != nil {
		if m.bad == nil {
			m.bad = append([]byte(nil), v...)
		}
		return
	}
	out := m.merged[:0]
	i := 0
	for _, e := range m.entries {
		for i < len(m.metrics) && m.metrics[i].name < string(e.name) {
			out = append(out, m.metrics[i])
			i++
		}
		if i < len(m.metrics) && m.metrics[i].name == string(e.name) {
			out = append(out, m.metrics[i])
			i++
		} else {
			out = append(out, metricBest{name: string(e.name)})
		}
		out[len(out)-1].takeValue(e.value)
	}
	out = append(out, m.metrics[i:]...)
	m.metrics, m.merged = out, m.metrics
}

func (m *latestMetrics) MergeNewer(value []byte) error { m.take(value); return nil }
func (m *latestMetrics) MergeOlder(value []byte) error { m.take(value); return nil }

func (m *latestMetrics) Finish(bool) ([]byte, io.Closer, error) {
	switch {
	case m.raw != nil:
		return m.raw, nil, nil
	case len(m.metrics) == 0:
		return m.bad, nil, nil
	}
	b := binary.AppendUvarint(append(make([]byte, 0, 64*len(m.metrics)), minuteValueVersion), uint64(len(m.metrics)))
	for i := range m.metrics {
		b = binary.AppendUvarint(b, uint64(len(m.metrics[i].name)))
		b = append(b, m.metrics[i].name...)
		b = binary.AppendUvarint(b, uint64(len(m.metrics[i].best)))
		b = append(b, m.metrics[i].best...)
	}
	return b, nil, nil
}
