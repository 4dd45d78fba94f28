package pebblestore

import (
	"context"
	"encoding/binary"
	"fmt"

	"github.com/cockroachdb/pebble/v2"

	"github.com/sluicehq/sluice/internal/model"
	"github.com/sluicehq/sluice/internal/store"
)

// Retention. A bucket (kind, tenant, day) is a contiguous key range of each
// table it lives in ('r' day tenant 0 ..., and so on), so it is dropped with
// one DeleteRange per table: Pebble records one range tombstone, reads
// nothing and rewrites nothing, and compaction reclaims the space (sstables
// wholly inside the range are deleted outright). The catalogue range is
// deleted by a separate, later commit, so that a bucket whose data drop was
// interrupted is still listed and is finished by the next sweep.

// tenantPrefix is table day tenant 0: every key of one tenant-day of a table.
func tenantPrefix(table byte, d model.Day, tenant string) []byte {
	b := appendDay([]byte{table}, d)
	return appendStr(b, tenant)
}

// Buckets lists every (kind, tenant, day) with a catalogue entry, data or
// dead letters, for days before the given one. It seeks from bucket to
// bucket, so its cost grows with the number of buckets, not rows.
func (s *Store) Buckets(ctx context.Context, before model.Day) ([]store.Bucket, error) {
	seen := make(map[store.Bucket]struct{})
	var out []store.Bucket
	add := func(b store.Bucket) {
		if _, ok := seen[b]; !ok {
			seen[b] = struct{}{}
			out = append(out, b)
		}
	}
	for _, table := range []byte{tabCatalogue, tabReadings, tabAudit, tabAuditIDs, tabAuditLeaves, tabDead} {
		if err := s.eachTenantDay(ctx, table, before, func(d model.Day, tenant string, rest []byte) []byte {
			switch table {
			case tabCatalogue:
				if len(rest) == 0 {
					return nil
				}
				add(store.Bucket{Kind: store.BucketKind(rest[0]), Tenant: tenant, Day: d})
				return prefixEnd(append(tenantPrefix(table, d, tenant), rest[0]))
			case tabReadings:
				add(store.Bucket{Kind: store.BucketReadings, Tenant: tenant, Day: d})
			case tabAudit, tabAuditIDs, tabAuditLeaves:
				add(store.Bucket{Kind: store.BucketAudit, Tenant: tenant, Day: d})
			case tabDead:
				add(store.Bucket{Kind: store.BucketDeadLetters, Tenant: tenant, Day: d})
			}
			return prefixEnd(tenantPrefix(table, d, tenant))
		}); err != nil {
			return nil, fmt.Errorf("list buckets of table %q: %w", table, err)
		}
	}
	return out, nil
}

// eachTenantDay visits the first key of each tenant-day of table before the
// given day; fn returns the key to seek to next.
func (s *Store) eachTenantDay(ctx context.Context, table byte, before model.Day, fn func(d model.Day, tenant string, rest []byte) []byte) error {
	it, err := s.db.NewIterWithContext(ctx, &pebble.IterOptions{LowerBound: []byte{table}, UpperBound: appendDay([]byte{table}, before)})
	if err != nil {
		return err
	}
	for ok := it.First(); ok; {
		if err := ctx.Err(); err != nil {
			_ = it.Close()
			return err
		}
		k := it.Key()
		if len(k) < 5 {
			_ = it.Close()
			return fmt.Errorf("short key: %w", errCorrupt)
		}
		d := model.Day(int32(binary.BigEndian.Uint32(k[1:5]) ^ 1<<31))
		rest := k[5:]
		i := 0
		for i < len(rest) && rest[i] != 0 {
			i++
		}
		if i == len(rest) {
			_ = it.Close()
			return fmt.Errorf("key without tenant terminator: %w", errCorrupt)
		}
		next := fn(d, string(rest[:i]), rest[i+1:])
		ok = it.SeekGE(next)
	}
	return it.Close()
}

// Measure sums the bucket's catalogue entries (for dead letters, which
// have no catalogue, it counts the keys).
func (s *Store) Measure(ctx context.Context, b store.Bucket) (store.BucketSize, error) {
	var size store.BucketSize
	var prefix []byte
	switch b.Kind {
	case store.BucketReadings, store.BucketAudit:
		prefix = append(tenantPrefix(tabCatalogue, b.Day, b.Tenant), byte(b.Kind))
	case store.BucketDeadLetters:
		prefix = tenantPrefix(tabDead, b.Day, b.Tenant)
	default:
		return size, nil // the embedded store holds no rollups
	}
	it, err := s.db.NewIterWithContext(ctx, &pebble.IterOptions{LowerBound: prefix, UpperBound: prefixEnd(prefix)})
	if err != nil {
		return size, fmt.Errorf("measure %s: %w", b, err)
	}
	for ok := it.First(); ok; ok = it.Next() {
		if b.Kind == store.BucketDeadLetters {
			size.Rows++
			size.Bytes += int64(len(it.Key()) + len(it.Value()))
			size.Partitions = 1
			continue
		}
		var pi model.PartitionInfo
		if err := decodeInfo(it.Value(), &pi); err != nil {
			_ = it.Close()
			return size, fmt.Errorf("measure %s: %w", b, err)
		}
		size.Partitions++
		size.Rows += pi.Rows
		size.Bytes += pi.Bytes
	}
	if err := it.Close(); err != nil {
		return size, fmt.Errorf("measure %s: %w", b, err)
	}
	return size, nil
}

// DropData deletes the bucket's rows with one range delete per table
// (readings: 1; audit: events and ids, 2; dead letters: 1), durably. The
// catalogue is left for DropCatalogue.
func (s *Store) DropData(ctx context.Context, b store.Bucket) (int, error) {
	var tables []byte
	switch b.Kind {
	case store.BucketReadings:
		tables = []byte{tabReadings}
	case store.BucketAudit:
		tables = []byte{tabAudit, tabAuditIDs, tabAuditLeaves}
	case store.BucketDeadLetters:
		tables = []byte{tabDead}
	default:
		return 0, nil
	}
	var ranges [][2][]byte
	for _, t := range tables {
		p := tenantPrefix(t, b.Day, b.Tenant)
		ranges = append(ranges, [2][]byte{p, prefixEnd(p)})
	}
	if err := s.deleteRanges(ctx, ranges); err != nil {
		return 0, fmt.Errorf("drop %s: %w", b, err)
	}
	return len(ranges), nil
}

// DropCatalogue deletes the bucket's catalogue entries with one range
// delete. Dead letters have none.
func (s *Store) DropCatalogue(ctx context.Context, b store.Bucket) (int, error) {
	if b.Kind != store.BucketReadings && b.Kind != store.BucketAudit {
		return 0, nil
	}
	p := append(tenantPrefix(tabCatalogue, b.Day, b.Tenant), byte(b.Kind))
	if err := s.deleteRanges(ctx, [][2][]byte{{p, prefixEnd(p)}}); err != nil {
		return 0, fmt.Errorf("drop catalogue of %s: %w", b, err)
	}
	return 1, nil
}

func (s *Store) deleteRanges(ctx context.Context, ranges [][2][]byte) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	pb := s.db.NewBatch()
	defer pb.Close()
	for _, r := range ranges {
		if err := pb.DeleteRange(r[0], r[1], nil); err != nil {
			return err
		}
	}
	return s.db.Apply(pb, s.wo)
}

// CompactRange asks Pebble to compact the keys of one day of every table
// now, instead of when it gets to them. Benchmarks use it to measure how
// long the space takes to come back; the gateway never needs it.
func (s *Store) CompactRange(ctx context.Context, d model.Day) error {
	for _, t := range []byte{tabReadings, tabAudit, tabAuditIDs, tabAuditLeaves, tabCatalogue, tabDead} {
		start := appendDay([]byte{t}, d)
		if err := s.db.Compact(ctx, start, appendDay([]byte{t}, d+1), true); err != nil {
			return fmt.Errorf("compact day %s: %w", d, err)
		}
	}
	return nil
}
