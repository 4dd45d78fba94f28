package pebblestore

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"

	"github.com/cockroachdb/pebble/v2"

	"github.com/sluicehq/sluice/internal/model"
)

// Series lists the devices (kind readings) or streams (kind audit) of a
// tenant that have a partition on day, in byte order, from the catalogue:
// one key per partition, no row is read.
func (s *Store) Series(ctx context.Context, tenant string, kind model.Kind, day model.Day) ([]string, error) {
	prefix := seriesDayCataloguePrefix(nil, model.SeriesDay{Kind: kind, Tenant: tenant, Day: day})
	prefix = prefix[:len(prefix)-1] // drop the empty series' terminator
	it, err := s.db.NewIterWithContext(ctx, &pebble.IterOptions{LowerBound: prefix, UpperBound: prefixEnd(prefix)})
	if err != nil {
		return nil, fmt.Errorf("list series of %s on %s: %w", tenant, day, err)
	}
	var out []string
	for ok := it.First(); ok; ok = it.Next() {
		rest := it.Key()[len(prefix):]
		i := bytes.IndexByte(rest, 0)
		if i < 0 {
			continue
		}
		if name := string(rest[:i]); len(out) == 0 || out[len(out)-1] != name {
			out = append(out, name)
		}
	}
	if err := it.Close(); err != nil {
		return nil, fmt.Errorf("list series of %s on %s: %w", tenant, day, err)
	}
	return out, nil
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
