package pebblestore

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"

	"github.com/cockroachdb/pebble/v2"

	"github.com/sluicehq/sluice/internal/model"
	"github.com/sluicehq/sluice/internal/store"
)

// EachSeriesReadings reads a tenant's readings of one day in a single pass
// over the store's keys and calls fn once for every device with a key that
// day, in byte order of the names, with its readings in [r.From, r.To) in
// timestamp order, as reader.Readings gives them. It is for jobs that read
// every device of a day (a rollup rebuild), which would otherwise seek to
// each device's catalogue and partition in turn.
//
// Only a device whose day is one partition, sub-bucket 0, in the current
// key layout can be read this way: its rows are then in order and hold no
// duplicates. For any other (split into several partitions, or holding
// keys of a store written before one key per reading) fn gets whole false
// and no readings, and the caller reads the device through the reader,
// which merges its partitions. A device's readings are at most a
// partition's rows (buckets.max_rows), and belong to fn once passed. fn
// runs while the scan is open; the scan stops at the first error fn
// returns, or when ctx ends.
func (s *Store) EachSeriesReadings(ctx context.Context, tenant string, day model.Day, r store.Range, fn func(series string, readings []model.Reading, whole bool) error) error {
	prefix := appendStr(appendDay([]byte{tabReadings}, day), tenant)
	it, err := s.db.NewIterWithContext(ctx, &pebble.IterOptions{LowerBound: prefix, UpperBound: prefixEnd(prefix)})
	if err != nil {
		return fmt.Errorf("read the readings of %s on %s: %w", tenant, day, err)
	}
	if err := eachSeriesReadings(ctx, it, prefix, r, fn); err != nil {
		_ = it.Close()
		return err
	}
	if err := it.Close(); err != nil {
		return fmt.Errorf("read the readings of %s on %s: %w", tenant, day, err)
	}
	return nil
}

func eachSeriesReadings(ctx context.Context, it *pebble.Iterator, prefix []byte, r store.Range, fn func(string, []model.Reading, bool) error) error {
	var (
		series   []byte // the device being read, nil before the first
		name     string
		whole    bool
		readings []model.Reading
		n        int
	)
	done := func() error {
		if series == nil {
			return nil
		}
		if !whole {
			readings = nil
		}
		err := fn(name, readings, whole)
		readings = nil
		return err
	}
	for ok := it.First(); ok; ok = it.Next() {
		if n++; n%1024 == 0 {
			if err := ctx.Err(); err != nil {
				return err
			}
		}
		k := it.Key()
		rest := k[len(prefix):]
		i := bytes.IndexByte(rest, 0)
		if i < 0 {
			return fmt.Errorf("reading key %x: %w", k, errCorrupt)
		}
		if series == nil || !bytes.Equal(rest[:i], series) {
			if err := done(); err != nil {
				return err
			}
			series = append(series[:0], rest[:i]...)
			name, whole = string(series), true
		}
		if !whole {
			continue
		}
		tail := rest[i+1:]
		if len(tail) != 4+8 || binary.BigEndian.Uint32(tail) != 0 {
			whole = false // a per-metric key of an older store, or a second partition
			continue
		}
		ts := int64(binary.BigEndian.Uint64(tail[4:]) ^ 1<<63)
		if ts < r.From || ts >= r.To {
			continue
		}
		rd := model.Reading{DeviceID: name, TS: ts}
		if n := len(readings); n > 0 {
			rd.Metrics = make([]model.Metric, 0, len(readings[n-1].Metrics))
		}
		err := eachCell(it.Value(), func(metric, cell []byte) error {
			row := model.ReadingRow{TS: ts, Metric: string(metric)}
			if err := decodeReading(cell, &row); err != nil {
				return fmt.Errorf("reading of %s at %d, metric %s: %w", name, ts, metric, err)
			}
			rd.Metrics = append(rd.Metrics, row.MetricOf())
			if row.HasSeq {
				rd.Seq, rd.HasSeq = row.Seq, true
			}
			return nil
		})
		if err != nil {
			return err
		}
		readings = append(readings, rd)
	}
	return done()
}
