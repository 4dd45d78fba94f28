package pebblestore

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"

	"github.com/cockroachdb/pebble/v2"

	"github.com/sluicehq/sluice/internal/model"
)

// EachSeries calls fn with every device (kind readings) or stream (kind
// audit) that has a catalogue entry for tenant on day, once each, in byte
// order: it reads one key range of the catalogue (an entry per partition,
// those of one series next to each other), never a row. fn runs while that
// range is open; it stops at the first error fn returns, or when ctx ends.
func (s *Store) EachSeries(ctx context.Context, tenant string, kind model.Kind, day model.Day, fn func(series string) error) error {
	prefix := seriesDayCataloguePrefix(nil, model.SeriesDay{Kind: kind, Tenant: tenant, Day: day})
	prefix = prefix[:len(prefix)-1] // drop the empty series' terminator
	it, err := s.db.NewIterWithContext(ctx, &pebble.IterOptions{LowerBound: prefix, UpperBound: prefixEnd(prefix)})
	if err != nil {
		return fmt.Errorf("list series of %s %s on %s: %w", tenant, kind, day, err)
	}
	if err := eachSeries(ctx, it, prefix, fn); err != nil {
		_ = it.Close()
		return err
	}
	if err := it.Close(); err != nil {
		return fmt.Errorf("list series of %s %s on %s: %w", tenant, kind, day, err)
	}
	return nil
}

func eachSeries(ctx context.Context, it *pebble.Iterator, prefix []byte, fn func(string) error) error {
	var (
		last []byte // the series handed out last
		some bool
	)
	for ok := it.First(); ok; ok = it.Next() {
		if err := ctx.Err(); err != nil {
			return err
		}
		rest := it.Key()[len(prefix):]
		i := bytes.IndexByte(rest, 0)
		if i < 0 || some && bytes.Equal(rest[:i], last) {
			continue
		}
		last, some = append(last[:0], rest[:i]...), true
		if err := fn(string(last)); err != nil {
			return err
		}
	}
	return nil
}

// EachPartition calls fn with every catalogue entry of a tenant's kind on
// day, in key order (series, then sub-bucket), reading one key range of the
// catalogue and never a row. It stops at the first error fn returns, or
// when ctx ends.
func (s *Store) EachPartition(ctx context.Context, tenant string, kind model.Kind, day model.Day, fn func(model.PartitionInfo) error) error {
	prefix := seriesDayCataloguePrefix(nil, model.SeriesDay{Kind: kind, Tenant: tenant, Day: day})
	prefix = prefix[:len(prefix)-1] // drop the empty series' terminator
	it, err := s.db.NewIterWithContext(ctx, &pebble.IterOptions{LowerBound: prefix, UpperBound: prefixEnd(prefix)})
	if err != nil {
		return fmt.Errorf("list partitions of %s on %s: %w", tenant, day, err)
	}
	if err := eachPartition(ctx, it, prefix, tenant, kind, day, fn); err != nil {
		_ = it.Close()
		return err
	}
	// An I/O error ends the iteration as if the range were exhausted; Close
	// reports it, so a listing is never silently cut short.
	if err := it.Close(); err != nil {
		return fmt.Errorf("list partitions of %s on %s: %w", tenant, day, err)
	}
	return nil
}

func eachPartition(ctx context.Context, it *pebble.Iterator, prefix []byte, tenant string, kind model.Kind, day model.Day, fn func(model.PartitionInfo) error) error {
	for ok := it.First(); ok; ok = it.Next() {
		if err := ctx.Err(); err != nil {
			return err
		}
		rest := it.Key()[len(prefix):]
		i := bytes.IndexByte(rest, 0)
		if i < 0 || len(rest) != i+1+4 {
			continue
		}
		sd := model.SeriesDay{Kind: kind, Tenant: tenant, Series: string(rest[:i]), Day: day}
		pi := model.PartitionInfo{Key: sd.Partition(binary.BigEndian.Uint32(rest[i+1:]))}
		if err := decodeInfo(it.Value(), &pi); err != nil {
			return fmt.Errorf("read catalogue entry %v: %w", pi.Key, err)
		}
		if err := fn(pi); err != nil {
			return err
		}
	}
	return nil
}
