package rollupstore

import (
	"encoding/binary"
	"fmt"
	"slices"
	"strings"

	"github.com/sluicehq/sluice/internal/rollup"
)

// A device-minute value holds the rows of every metric of one (tenant,
// device, minute, writer, part), which its key names:
//
//	minuteValueVersion, count (uvarint), then per metric, in byte order of
//	the names: len(name) (uvarint), name, len(value) (uvarint), value
//
// where value is the metric's row as rollup.EncodeValue writes it, version
// included. A metric's name is never empty.
const minuteValueVersion = 0x40

// appendMinuteValue appends the value of rows, which must be the rows of
// one device-minute (one tenant, device, minute, writer and part), sorted
// by metric, each metric once.
func appendMinuteValue(b []byte, rows []rollup.Row) []byte {
	b = append(b, minuteValueVersion)
	b = binary.AppendUvarint(b, uint64(len(rows)))
	var v []byte
	for i := range rows {
		b = binary.AppendUvarint(b, uint64(len(rows[i].Metric)))
		b = append(b, rows[i].Metric...)
		v = rollup.EncodeValue(v[:0], &rows[i])
		b = binary.AppendUvarint(b, uint64(len(v)))
		b = append(b, v...)
	}
	return b
}

// eachMinuteEntry calls fn with each (metric, value) of a device-minute
// value, in order, checking only the framing: a value that does not decode
// is fn's to judge. The slices passed to fn share v.
func eachMinuteEntry(v []byte, fn func(metric, value []byte) error) error {
	if len(v) == 0 || v[0] != minuteValueVersion {
		return fmt.Errorf("device-minute value version: %w", rollup.ErrCorrupt)
	}
	rest := v[1:]
	n, k := binary.Uvarint(rest)
	// Each metric takes at least two bytes: a count claiming more is
	// corrupt (and the loop below is bounded by the value's length).
	if k <= 0 || n > uint64(len(rest)) {
		return fmt.Errorf("device-minute metric count: %w", rollup.ErrCorrupt)
	}
	rest = rest[k:]
	var prev []byte
	for i := range n {
		var parts [2][]byte
		for j, what := range [2]string{"metric", "value"} {
			l, k := binary.Uvarint(rest)
			if k <= 0 || l > uint64(len(rest)-k) {
				return fmt.Errorf("device-minute entry %d: %s length: %w", i, what, rollup.ErrCorrupt)
			}
			parts[j], rest = rest[k:k+int(l)], rest[k+int(l):]
		}
		if len(parts[0]) == 0 || (i > 0 && string(parts[0]) <= string(prev)) {
			return fmt.Errorf("device-minute entry %d: metric %q empty or out of order: %w", i, parts[0], rollup.ErrCorrupt)
		}
		prev = parts[0]
		if err := fn(parts[0], parts[1]); err != nil {
			return err
		}
	}
	if len(rest) != 0 {
		return fmt.Errorf("device-minute value: %d trailing bytes: %w", len(rest), rollup.ErrCorrupt)
	}
	return nil
}

// decodeMinute calls emit with the row of each metric of a device-minute
// value; key holds the row's tenant, device, minute, writer and part.
func decodeMinute(key rollup.Row, v []byte, emit func(rollup.Row) error) error {
	return eachMinuteEntry(v, func(metric, value []byte) error {
		r := key
		r.Metric = string(metric)
		if err := rollup.DecodeValue(value, &r); err != nil {
			return fmt.Errorf("metric %q: %w", metric, err)
		}
		return emit(r)
	})
}

// minuteRows counts the metrics of a device-minute value; 1 if it does not
// decode (it is then one corrupt entry).
func minuteRows(v []byte) int64 {
	var n int64
	if eachMinuteEntry(v, func(_, _ []byte) error { n++; return nil }) != nil {
		return 1
	}
	return n
}

// runEnd returns the end of the run of rows that starts at rows[i] and
// shares its tenant, device, minute, writer and part: the rows of one
// device-minute value.
func runEnd(rows []rollup.Row, i int) int {
	a := &rows[i]
	j := i + 1
	for j < len(rows) {
		b := &rows[j]
		if b.Minute != a.Minute || b.Device != a.Device || b.Tenant != a.Tenant || b.Writer != a.Writer || b.Part != a.Part {
			break
		}
		j++
	}
	return j
}

// minuteRun returns the rows of one device-minute sorted by metric with
// each metric once (its highest version), sorting a copy in scratch only
// when they are not already so.
func minuteRun(run []rollup.Row, scratch []rollup.Row) []rollup.Row {
	sorted := true
	for i := 1; i < len(run) && sorted; i++ {
		sorted = run[i-1].Metric < run[i].Metric
	}
	if sorted {
		return run
	}
	out := append(scratch[:0], run...)
	slices.SortStableFunc(out, func(x, y rollup.Row) int {
		if c := strings.Compare(x.Metric, y.Metric); c != 0 {
			return c
		}
		// Highest version first: the one kept below.
		switch {
		case x.Version > y.Version:
			return -1
		case x.Version < y.Version:
			return 1
		}
		return 0
	})
	return slices.CompactFunc(out, func(x, y rollup.Row) bool { return x.Metric == y.Metric })
}
