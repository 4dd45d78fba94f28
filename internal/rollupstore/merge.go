package rollupstore

import (
	"encoding/binary"
	"io"
	"slices"
	"strings"

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

// latestMetrics merges device-minute values (minute.go) metric by metric:
// of each metric it keeps the row as latestRow would, so that the rows of
// one device-minute may arrive split over several operands (a recompute's
// rows spread over two inserts, or versions of some metrics only) and the
// result is what one key per metric would hold. An operand whose framing
// does not decode ranks below every valid one, as a row's does; it is kept
// as is only when nothing valid arrives.
type latestMetrics struct {
	// raw is the first operand, verbatim, while it is the only one: a
	// device-minute written once is not taken apart.
	raw     []byte
	taken   bool
	metrics []metricBest // by name
	bad     []byte       // the first operand that did not decode
}

type metricBest struct {
	name string
	latestRow
}

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

// absorb merges one operand's metrics into m.metrics, or keeps it as bad.
func (m *latestMetrics) absorb(v []byte) {
	if err := eachMinuteEntry(v, func(_, _ []byte) error { return nil }); err != nil {
		if m.bad == nil {
			m.bad = append([]byte(nil), v...)
		}
		return
	}
	_ = eachMinuteEntry(v, func(name, value []byte) error {
		i, found := slices.BinarySearchFunc(m.metrics, name, func(e metricBest, n []byte) int { return strings.Compare(e.name, string(n)) })
		if !found {
			m.metrics = slices.Insert(m.metrics, i, metricBest{name: string(name)})
		}
		m.metrics[i].take(value)
		return nil
	})
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
