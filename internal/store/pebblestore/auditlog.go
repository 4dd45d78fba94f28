package pebblestore

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/cockroachdb/pebble/v2"

	"github.com/sluicehq/sluice/internal/model"
	"github.com/sluicehq/sluice/internal/store"
)

// The audit log's tables (package auditlog):
//
//	seals   'l' tenant 0 stream 0 day              -> opaque seal record
//	leaves  'h' day tenant 0 stream 0 chunk        -> leaves: (ts, len, event_id, hash)...
//
// Seals are keyed by stream, not day, so retention's per-day range deletes
// never reach them; a day's leaves live in the day, and retention drops
// them with the day's events.
const (
	tabAuditSeals  = 'l'
	tabAuditLeaves = 'h'
)

func sealPrefix(b []byte, tenant, stream string) []byte {
	b = append(b, tabAuditSeals)
	b = appendStr(b, tenant)
	return appendStr(b, stream)
}

func leavesPrefix(b []byte, tenant, stream string, d model.Day) []byte {
	b = append(b, tabAuditLeaves)
	b = appendDay(b, d)
	b = appendStr(b, tenant)
	return appendStr(b, stream)
}

// AuditSeals returns the seal records of one stream, ordered by day.
func (s *Store) AuditSeals(ctx context.Context, tenant, stream string) ([]store.AuditSeal, error) {
	prefix := sealPrefix(nil, tenant, stream)
	it, err := s.db.NewIterWithContext(ctx, &pebble.IterOptions{LowerBound: prefix, UpperBound: prefixEnd(prefix)})
	if err != nil {
		return nil, fmt.Errorf("read seals of %s/%s: %w", tenant, stream, err)
	}
	var out []store.AuditSeal
	for ok := it.First(); ok; ok = it.Next() {
		k := it.Key()
		if len(k) != len(prefix)+4 {
			continue
		}
		d := model.Day(binary.BigEndian.Uint32(k[len(prefix):]) ^ 1<<31)
		out = append(out, store.AuditSeal{Tenant: tenant, Stream: stream, Day: d, Record: bytes.Clone(it.Value())})
	}
	if err := it.Close(); err != nil {
		return nil, fmt.Errorf("read seals of %s/%s: %w", tenant, stream, err)
	}
	return out, nil
}

// PutAuditSeal stores a seal record durably. Unless replace is set it
// stores nothing and returns false when the stream-day already has one.
func (s *Store) PutAuditSeal(ctx context.Context, seal store.AuditSeal, replace bool) (bool, error) {
	if err := ctx.Err(); err != nil {
		return false, err
	}
	key := appendDay(sealPrefix(nil, seal.Tenant, seal.Stream), seal.Day)
	s.sealMu.Lock()
	defer s.sealMu.Unlock()
	if !replace {
		_, closer, err := s.db.Get(key)
		switch {
		case err == nil:
			_ = closer.Close()
			return false, nil
		case !errors.Is(err, pebble.ErrNotFound):
			return false, fmt.Errorf("read seal of %s/%s/%s: %w", seal.Tenant, seal.Stream, seal.Day, err)
		}
	}
	if err := s.db.Set(key, seal.Record, s.wo); err != nil {
		return false, fmt.Errorf("store seal of %s/%s/%s: %w", seal.Tenant, seal.Stream, seal.Day, err)
	}
	return true, nil
}

// AuditLeaves calls fn with each stored leaf of a stream-day, in chunk
// order.
func (s *Store) AuditLeaves(ctx context.Context, tenant, stream string, d model.Day, fn func(store.AuditLeaf) error) error {
	prefix := leavesPrefix(nil, tenant, stream, d)
	it, err := s.db.NewIterWithContext(ctx, &pebble.IterOptions{LowerBound: prefix, UpperBound: prefixEnd(prefix)})
	if err != nil {
		return fmt.Errorf("read leaves of %s/%s/%s: %w", tenant, stream, d, err)
	}
	defer func() { _ = it.Close() }()
	for ok := it.First(); ok; ok = it.Next() {
		if len(it.Key()) != len(prefix)+4 {
			continue
		}
		if err := store.EachAuditLeaf(it.Value(), fn); err != nil {
			if errors.Is(err, store.ErrCorruptLeaves) {
				return fmt.Errorf("leaves of %s/%s/%s: %w", tenant, stream, d, err)
			}
			return err
		}
	}
	return it.Error()
}

// AuditStreams lists the (tenant, stream) pairs with audit partitions in
// the catalogue of day d.
func (s *Store) AuditStreams(ctx context.Context, d model.Day) ([]store.SeriesRef, error) {
	prefix := appendDay([]byte{tabCatalogue}, d)
	it, err := s.db.NewIterWithContext(ctx, &pebble.IterOptions{LowerBound: prefix, UpperBound: prefixEnd(prefix)})
	if err != nil {
		return nil, fmt.Errorf("list audit streams of %s: %w", d, err)
	}
	defer func() { _ = it.Close() }()
	var out []store.SeriesRef
	for ok := it.First(); ok; {
		rest := it.Key()[len(prefix):]
		tenant, after, found := bytes.Cut(rest, []byte{0})
		if !found || len(after) == 0 {
			ok = it.Next()
			continue
		}
		if after[0] != byte(model.KindAudit) {
			// Skip this tenant's other kind: jump to its audit entries.
			if after[0] < byte(model.KindAudit) {
				ok = it.SeekGE(append(append(append([]byte(nil), prefix...), tenant...), 0, byte(model.KindAudit)))
			} else {
				ok = it.SeekGE(prefixEnd(append(append(append([]byte(nil), prefix...), tenant...), 0)))
			}
			continue
		}
		series, _, found := bytes.Cut(after[1:], []byte{0})
		if !found {
			ok = it.Next()
			continue
		}
		out = append(out, store.SeriesRef{Tenant: string(tenant), Series: string(series)})
		// Next series: past every sub-bucket of this one.
		ok = it.SeekGE(prefixEnd(append(append(append(append([]byte(nil), prefix...), tenant...), 0, byte(model.KindAudit)), append(series, 0)...)))
	}
	return out, it.Error()
}

// AuditEvents returns the stored event of each id (nil where none is
// stored), found through the id index, for the sink's conflict check.
func (s *Store) AuditEvents(ctx context.Context, ids []store.AuditID, _ []*model.AuditEvent) ([]*model.AuditEvent, error) {
	out := make([]*model.AuditEvent, len(ids))
	for i, id := range ids {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		loc, err := s.get(auditIDKey(nil, id.Tenant, id.Day, id.EventID))
		if err != nil || loc == nil {
			if err != nil {
				return nil, fmt.Errorf("look up audit id %q: %w", id.EventID, err)
			}
			continue
		}
		stream, rest, ok := bytes.Cut(loc, []byte{0})
		if !ok || len(rest) != 12 {
			return nil, fmt.Errorf("audit id %q: %w", id.EventID, errCorrupt)
		}
		sub := binary.BigEndian.Uint32(rest)
		ts := int64(binary.BigEndian.Uint64(rest[4:]) ^ 1<<63)
		pk := model.PartitionKey{Kind: model.KindAudit, Tenant: id.Tenant, Series: string(stream), Day: model.DayOf(ts), Sub: sub}
		v, err := s.get(append(appendTS(partitionPrefix(nil, pk), ts), id.EventID...))
		if err != nil {
			return nil, fmt.Errorf("read audit event %q: %w", id.EventID, err)
		}
		if v == nil {
			continue
		}
		e := &model.AuditEvent{EventID: id.EventID, Stream: string(stream), TS: ts}
		if err := decodeAudit(v, e); err != nil {
			return nil, fmt.Errorf("read audit event %q: %w", id.EventID, err)
		}
		out[i] = e
	}
	return out, nil
}

// get returns a copy of the value of key, or nil if it is absent.
func (s *Store) get(key []byte) ([]byte, error) {
	v, closer, err := s.db.Get(key)
	if errors.Is(err, pebble.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer func() { _ = closer.Close() }()
	return bytes.Clone(v), nil
}
