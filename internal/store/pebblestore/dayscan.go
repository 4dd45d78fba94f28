package pebblestore

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"time"

	"github.com/cockroachdb/pebble/v2"

	"github.com/sluicehq/sluice/internal/model"
	"github.com/sluicehq/sluice/internal/store"
)

// EachSeriesReadings reads a tenant's readings of one day in a single pass
// over the store's keys and calls fn once for every device with a key that
// day, in byte order of the names, with its readings in [r.From, r.To) in
// timestamp order, as reader.Readings gives them. It is for jobs that read
// every device of a day (a rollup rebuild or verification), which would
// otherwise seek to each device's catalogue and partition in turn.
//
// Only a device whose day is one partition (any sub-bucket) in the current
// key layout can be read this way: its rows are then in order and hold no
// duplicates. For any other (split into several partitions, or holding
// keys of a store written before one key per reading) fn gets whole false
// and no readings, and the caller reads the device through the reader,
// which merges its partitions. A device's readings are at most a
// partition's rows (buckets.max_rows), and belong to fn once passed.
//
// The pass seeks over each partition's rows outside r, and opens its
// iterator again at the next device about once a second, so that a long
// job does not pin the memtables and table files of its start. fn runs
// while the pass is open; the pass stops at the first error fn returns,
// or when ctx ends.
func (s *Store) EachSeriesReadings(ctx context.Context, tenant string, day model.Day, r store.Range, fn func(series string, readings []model.Reading, whole bool) error) error {
	prefix := appendStr(appendDay([]byte{tabReadings}, day), tenant)
	p := dayScan{db: s.db, opts: &pebble.IterOptions{LowerBound: prefix, UpperBound: prefixEnd(prefix)}, prefix: prefix, r: r, fn: fn}
	err := p.run(ctx)
	if p.it != nil {
		if cerr := p.it.Close(); err == nil && cerr != nil {
			err = cerr
		}
	}
	switch {
	case err == nil:
		return nil
	case err == p.fnErr:
		return err // fn's own, as it is
	}
	return fmt.Errorf("read the readings of %s on %s: %w", tenant, day, err)
}

// dayScanReopen is how long a day pass keeps one iterator (tests set it to
// 0: a new iterator at every device).
var dayScanReopen = time.Second

// dayScan is the state of one EachSeriesReadings.
type dayScan struct {
	db     *pebble.DB
	opts   *pebble.IterOptions
	it     *pebble.Iterator
	opened time.Time
	prefix []byte
	r      store.Range
	fn     func(string, []model.Reading, bool) error

	series   []byte // the device being read, nil before the first
	name     string
	whole    bool
	sub      uint32 // its partition's sub-bucket, once seen
	subSeen  bool
	readings []model.Reading
	cells    []model.ReadingRow // a reading's, decoded
	seek     []byte             // the key to seek to
	fnErr    error              // what fn returned, if not nil
}

func (p *dayScan) open(ctx context.Context) error {
	it, err := p.db.NewIterWithContext(ctx, p.opts)
	if err != nil {
		return err
	}
	p.it, p.opened = it, time.Now()
	return nil
}

// done hands the device read to fn.
func (p *dayScan) done() error {
	if p.series == nil {
		return nil
	}
	if !p.whole {
		p.readings = nil
	}
	err := p.fn(p.name, p.readings, p.whole)
	p.series, p.readings, p.fnErr = nil, nil, err
	return err
}

func (p *dayScan) run(ctx context.Context) error {
	if err := p.open(ctx); err != nil {
		return err
	}
	n := 0
	for ok := p.it.First(); ok; {
		if n++; n%1024 == 0 {
			if err := ctx.Err(); err != nil {
				return err
			}
		}
		k := p.it.Key()
		rest := k[len(p.prefix):]
		i := bytes.IndexByte(rest, 0)
		if i < 0 {
			return fmt.Errorf("reading key %x: %w", k, errCorrupt)
		}
		if p.series == nil || !bytes.Equal(rest[:i], p.series) {
			if err := p.done(); err != nil { // and p.series is nil
				return err
			}
			if time.Since(p.opened) >= dayScanReopen {
				// Start again at this key with a new iterator.
				p.seek = append(p.seek[:0], k...)
				if err := p.it.Close(); err != nil {
					p.it = nil
					return err
				}
				if err := p.open(ctx); err != nil {
					p.it = nil
					return err
				}
				if ok = p.it.SeekGE(p.seek); !ok {
					break
				}
				k = p.it.Key()
				rest = k[len(p.prefix):]
				if i = bytes.IndexByte(rest, 0); i < 0 {
					return fmt.Errorf("reading key %x: %w", k, errCorrupt)
				}
			}
			p.series = append(p.series[:0], rest[:i]...)
			p.name, p.whole, p.subSeen = string(p.series), true, false
		}
		partition := len(p.prefix) + i + 1 // where the sub-bucket starts
		tail := rest[i+1:]
		if p.whole && len(tail) == 4+8 {
			sub := binary.BigEndian.Uint32(tail)
			if p.subSeen && sub != p.sub {
				p.whole = false // a second partition
			}
			p.sub, p.subSeen = sub, true
		} else {
			p.whole = false // a per-metric key of an older store
		}
		if !p.whole {
			// The device is read through the reader: on to the next.
			p.seek = append(append(p.seek[:0], k[:partition-1]...), 1)
			ok = p.it.SeekGE(p.seek)
			continue
		}
		ts := int64(binary.BigEndian.Uint64(tail[4:]) ^ 1<<63)
		switch {
		case ts < p.r.From: // to the range, in this partition
			p.seek = appendTS(append(p.seek[:0], k[:partition+4]...), p.r.From)
			ok = p.it.SeekGE(p.seek)
			continue
		case ts >= p.r.To: // past it: the next partition, if any
			p.seek = append(p.seek[:0], k[:partition-1]...)
			if p.sub == math.MaxUint32 {
				p.seek = append(p.seek, 1)
			} else {
				p.seek = binary.BigEndian.AppendUint32(append(p.seek, 0), p.sub+1)
			}
			ok = p.it.SeekGE(p.seek)
			continue
		}
		if err := p.add(ts); err != nil {
			return err
		}
		ok = p.it.Next()
	}
	if err := p.it.Error(); err != nil {
		return err
	}
	return p.done()
}

// add appends the reading at the iterator, of time ts.
func (p *dayScan) add(ts int64) error {
	var err error
	if p.cells, err = appendCells(p.cells[:0], ts, p.it.Value()); err != nil {
		return fmt.Errorf("reading of %s: %w", p.name, err)
	}
	for _, c := range p.cells {
		p.readings = model.AppendRow(p.readings, p.name, c)
	}
	return nil
}
