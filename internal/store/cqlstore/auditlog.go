package cqlstore

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	gocql "github.com/apache/cassandra-gocql-driver/v2"

	"github.com/sluicehq/sluice/internal/model"
	"github.com/sluicehq/sluice/internal/store"
)

// The audit log's tables (package auditlog): audit_seals, a stream's seal
// records, written with lightweight transactions and read at SERIAL
// consistency, so that the gateways agree on one seal per stream-day; and
// audit_leaves, a sealed day's leaves, dropped with the day.

// AuditSeals returns the seal records of one stream, ordered by day. The
// read is SERIAL: a seal another gateway is storing is either finished
// and returned, or not yet visible to anyone.
func (s *Store) AuditSeals(ctx context.Context, tenant, stream string) ([]store.AuditSeal, error) {
	var out []store.AuditSeal
	err := s.do(ctx, "audit_seals_read", func(ctx context.Context) error {
		out = out[:0]
		it := s.sess.Query(`SELECT day, record FROM audit_seals WHERE tenant = ? AND stream = ?`, tenant, stream).
			Consistency(gocql.Serial).IterContext(ctx)
		var (
			day time.Time
			rec []byte
		)
		for it.Scan(&day, &rec) {
			out = append(out, store.AuditSeal{Tenant: tenant, Stream: stream, Day: model.DayOf(day.UnixMilli()), Record: slices.Clone(rec)})
		}
		return it.Close()
	})
	if err != nil {
		return nil, fmt.Errorf("read seals of %s/%s: %w", tenant, stream, err)
	}
	return out, nil
}

// PutAuditSeal stores a seal with a lightweight transaction: unless
// replace, only if the stream-day has none (false then); with replace, only
// over an existing one.
func (s *Store) PutAuditSeal(ctx context.Context, seal store.AuditSeal, replace bool) (bool, error) {
	var applied bool
	err := s.do(ctx, "audit_seals_write", func(ctx context.Context) error {
		var q *gocql.Query
		if replace {
			q = s.sess.Query(`UPDATE audit_seals SET record = ? WHERE tenant = ? AND stream = ? AND day = ? IF EXISTS`,
				seal.Record, seal.Tenant, seal.Stream, dayValue(seal.Day))
		} else {
			q = s.sess.Query(`INSERT INTO audit_seals (tenant, stream, day, record) VALUES (?, ?, ?, ?) IF NOT EXISTS`,
				seal.Tenant, seal.Stream, dayValue(seal.Day), seal.Record)
		}
		var err error
		applied, err = q.Consistency(s.writeCL).SerialConsistency(gocql.Serial).MapScanCAS(map[string]any{})
		return err
	})
	if err != nil {
		return false, fmt.Errorf("store seal of %s/%s/%s: %w", seal.Tenant, seal.Stream, seal.Day, err)
	}
	return applied, nil
}

// leafBucket is how many chunks of leaves (4,096 leaves of about 60 bytes
// each) one partition of audit_leaf_buckets holds: about 30 MB.
const leafBucket = 128

func (s *Store) chunksPerBucket() int { return cmp.Or(s.leafBucket, leafBucket) }

// PutAuditLeaves stores one chunk of a stream-day's leaves, in the bucket
// chunk / 128.
func (s *Store) PutAuditLeaves(ctx context.Context, tenant, stream string, d model.Day, chunk uint32, leaves []store.AuditLeaf) error {
	v := store.AppendAuditLeaves(make([]byte, 0, store.AuditLeavesSize(leaves)), leaves)
	bucket := int32(chunk / uint32(s.chunksPerBucket()))
	err := s.do(ctx, "audit_leaves_write", func(ctx context.Context) error {
		return s.sess.Query(`INSERT INTO audit_leaf_buckets (tenant, stream, day, bucket, chunk, leaves) VALUES (?, ?, ?, ?, ?, ?)`,
			tenant, stream, dayValue(d), bucket, int32(chunk), v).Consistency(s.writeCL).Idempotent(true).ExecContext(ctx)
	})
	if err != nil {
		return fmt.Errorf("store leaves of %s/%s/%s: %w", tenant, stream, d, err)
	}
	return nil
}

// AuditLeafWriter returns a writer that stores each chunk of a stream-day's
// leaves as it is put (PutAuditLeaves).
func (s *Store) AuditLeafWriter(_ context.Context, tenant, stream string, d model.Day) (store.AuditLeafWriter, error) {
	return chunkWriter(func(ctx context.Context, chunk uint32, leaves []store.AuditLeaf) error {
		return s.PutAuditLeaves(ctx, tenant, stream, d, chunk, leaves)
	}), nil
}

// chunkWriter stores each chunk when it is put, with the function itself:
// Commit has nothing left to do, and chunks put before an Abort stay, to be
// written again by the next seal of the day.
type chunkWriter func(ctx context.Context, chunk uint32, leaves []store.AuditLeaf) error

func (w chunkWriter) Put(ctx context.Context, chunk uint32, leaves []store.AuditLeaf) error {
	return w(ctx, chunk, leaves)
}

func (chunkWriter) Commit(ctx context.Context) error { return ctx.Err() }

func (chunkWriter) Abort() {}

// AuditLeaves calls fn with the stored leaves of a stream-day in order:
// bucket after bucket until one is empty (a seal writes its chunks in
// order, so its buckets follow each other), or, for a day sealed before
// the buckets, from audit_leaves.
func (s *Store) AuditLeaves(ctx context.Context, tenant, stream string, d model.Day, fn func(store.AuditLeaf) error) error {
	for bucket := 0; ; bucket++ {
		n, err := s.eachChunk(ctx, fn, `SELECT leaves FROM audit_leaf_buckets WHERE tenant = ? AND stream = ? AND day = ? AND bucket = ?`,
			tenant, stream, dayValue(d), int32(bucket))
		switch {
		case err != nil:
			return err
		case n > 0:
			continue
		case bucket > 0:
			return nil
		}
		_, err = s.eachChunk(ctx, fn, `SELECT leaves FROM audit_leaves WHERE tenant = ? AND stream = ? AND day = ?`, tenant, stream, dayValue(d))
		return err
	}
}

// eachChunk runs a query of leaf chunks and calls fn with every leaf of
// them; it returns how many chunks it read.
func (s *Store) eachChunk(ctx context.Context, fn func(store.AuditLeaf) error, stmt string, args ...any) (int, error) {
	n := 0
	err := s.do(ctx, "audit_leaves_read", func(ctx context.Context) error {
		it := s.query(stmt, args...).PageSize(16).IterContext(ctx)
		var v []byte
		for it.Scan(&v) {
			n++
			if err := store.EachAuditLeaf(v, fn); err != nil {
				_ = it.Close()
				return err
			}
		}
		return it.Close()
	})
	return n, err
}

// leafBuckets counts the buckets of a stream-day's leaves.
func (s *Store) leafBuckets(ctx context.Context, tenant, stream string, d model.Day) (int, error) {
	for bucket := 0; ; bucket++ {
		found := false
		err := s.do(ctx, "audit_leaves_read", func(ctx context.Context) error {
			it := s.query(`SELECT chunk FROM audit_leaf_buckets WHERE tenant = ? AND stream = ? AND day = ? AND bucket = ? LIMIT 1`,
				tenant, stream, dayValue(d), int32(bucket)).IterContext(ctx)
			var c int32
			found = it.Scan(&c)
			return it.Close()
		})
		if err != nil {
			return 0, fmt.Errorf("count leaf buckets of %s/%s/%s: %w", tenant, stream, d, err)
		}
		if !found {
			return bucket, nil
		}
	}
}

// AuditStreams lists the (tenant, stream) pairs with audit partitions on
// day d: the tenants from the tenant-day index, their streams from the
// catalogue.
func (s *Store) AuditStreams(ctx context.Context, d model.Day) ([]store.SeriesRef, error) {
	tks, err := s.DayTenants(ctx, d)
	if err != nil {
		return nil, err
	}
	var out []store.SeriesRef
	for _, tk := range tks {
		if tk.Kind != model.KindAudit.String() {
			continue
		}
		parts, _, err := s.listPartitions(ctx, tk.Tenant, model.KindAudit, d)
		if err != nil {
			return nil, err
		}
		seen := make(map[string]bool)
		for p := range parts {
			if !seen[p.series] {
				seen[p.series] = true
				out = append(out, store.SeriesRef{Tenant: tk.Tenant, Series: p.series})
			}
		}
	}
	slices.SortFunc(out, func(a, b store.SeriesRef) int {
		return cmp.Or(strings.Compare(a.Tenant, b.Tenant), strings.Compare(a.Series, b.Series))
	})
	return out, nil
}

// AuditEvents returns, for each id AuditSeen found, the stored event if it
// is where like[i] would be (same stream, day and ts, in any sub-bucket of
// the catalogue), else nil: audit_ids does not say where an event is, and
// an id stored elsewhere has another stream or ts.
func (s *Store) AuditEvents(ctx context.Context, ids []store.AuditID, like []*model.AuditEvent) ([]*model.AuditEvent, error) {
	out := make([]*model.AuditEvent, len(ids))
	for i, id := range ids {
		e := like[i]
		if e == nil || model.DayOf(e.TS) != id.Day {
			continue
		}
		parts, err := s.Catalogue(ctx, model.SeriesDay{Kind: model.KindAudit, Tenant: id.Tenant, Series: e.Stream, Day: id.Day})
		if err != nil {
			return nil, err
		}
		for _, p := range parts {
			if out[i], err = s.auditEventAt(ctx, p.Key, e.TS, id.EventID); err != nil || out[i] != nil {
				if err != nil {
					return nil, err
				}
				break
			}
		}
	}
	return out, nil
}

// auditEventAt returns the event id of partition pk at ts, or nil. It pages
// through the events of that millisecond, which may be more than one page.
func (s *Store) auditEventAt(ctx context.Context, pk model.PartitionKey, ts int64, id string) (*model.AuditEvent, error) {
	const page = 1 << 10
	rng := store.Range{From: ts, To: ts + 1}
	for {
		evs, err := s.ScanAudit(ctx, pk, rng, page)
		if err != nil {
			return nil, err
		}
		if j := slices.IndexFunc(evs, func(x model.AuditEvent) bool { return x.EventID == id }); j >= 0 {
			return &evs[j], nil
		}
		if len(evs) < page {
			return nil, nil
		}
		last := evs[len(evs)-1]
		rng.After = &store.Pos{TS: last.TS, Key: last.EventID}
	}
}
