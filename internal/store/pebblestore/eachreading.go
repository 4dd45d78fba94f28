package pebblestore

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"

	"github.com/sluicehq/sluice/internal/model"
	"github.com/sluicehq/sluice/internal/store"
)

// EachReading calls fn with every cell of the readings of partition pk
// inside [r.From, r.To) (r.After is not supported), in (ts, metric) order:
// name is the metric's name and row its timestamp and value (row.Metric is
// empty), both valid only until fn returns. It builds no rows, for a
// caller that folds the values (the rollups' recomputes). It reports
// whole false, having called fn for none or some of the cells, when the
// partition holds per-metric keys of a store written before one key per
// reading: the caller then discards what fn saw and reads the range with
// ScanReadings, which merges the two.
func (r *Reads) EachReading(ctx context.Context, pk model.PartitionKey, rng store.Range, fn func(name []byte, row *model.ReadingRow) error) (whole bool, err error) {
	if rng.After != nil {
		return false, fmt.Errorf("each reading of %v: a cursor is not supported", pk)
	}
	// The bounds are the session's to reuse: its reads run one at a time,
	// and these are no longer needed once this one ends.
	r.lower = partitionPrefix(r.lower[:0], pk)
	prefix := r.lower
	r.upper = appendTS(append(r.upper[:0], prefix...), rng.To)
	lower, upper := appendTS(r.lower, rng.From), r.upper
	r.lower = lower
	if bytes.Compare(lower, upper) >= 0 {
		return true, nil
	}
	it, m := r.span(lower, upper)
	ok := it.seek(m, lower)
	var row model.ReadingRow
	n := 0
	for ; ok; ok = it.Next() {
		if n++; n%1024 == 0 { // a run may hold a day of a device's readings
			if err := ctx.Err(); err != nil {
				return false, err
			}
		}
		k := it.Key()[len(prefix):]
		if len(k) != 8 {
			if len(k) < 8 {
				return false, fmt.Errorf("each reading of %v: short key: %w", pk, errCorrupt)
			}
			return false, nil // a per-metric key
		}
		row.TS = int64(binary.BigEndian.Uint64(k) ^ 1<<63)
		err = eachCell(it.Value(), func(name, cell []byte) error {
			if err := decodeReading(cell, &row); err != nil {
				return fmt.Errorf("reading at %d, metric %s: %w", row.TS, name, err)
			}
			return fn(name, &row)
		})
		if err != nil {
			return false, fmt.Errorf("each reading of %v: %w", pk, err)
		}
	}
	if err := it.Error(); err != nil {
		return false, fmt.Errorf("each reading of %v: %w", pk, err)
	}
	m.set(upper) // read to the first key at or after upper
	return true, nil
}
