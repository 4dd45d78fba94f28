package cqlstore

import (
	"context"
	"fmt"
	"sync"

	"github.com/sluicehq/sluice/internal/model"
)

// Retention in Cassandra: a day is dropped partition by partition, each
// with one partition-level delete (one partition tombstone), listed from the
// catalogue. Nothing is deleted row by row, so the tombstones of a day grow
// with its partitions, never with its rows. The catalogue is deleted last:
// a drop interrupted midway is finished by running it again.

// DropStats says what a drop removed.
type DropStats struct {
	Partitions int   // data partitions deleted
	Rows       int64 // rows they held, as catalogued (an upper bound)
	Bytes      int64
	Deletes    int // delete statements issued (each one partition or one index row)
}

func (d *DropStats) add(o DropStats) {
	d.Partitions += o.Partitions
	d.Rows += o.Rows
	d.Bytes += o.Bytes
	d.Deletes += o.Deletes
}

// TenantKind is one entry of a day's tenant index: a tenant that wrote data
// of a kind ("readings", "audit" or "dead_letters") on that day.
type TenantKind struct {
	Tenant string
	Kind   string
}

// DayTenants lists who wrote what on a day.
func (s *Store) DayTenants(ctx context.Context, day model.Day) ([]TenantKind, error) {
	var out []TenantKind
	err := s.do(ctx, "tenant_days_read", func(ctx context.Context) error {
		out = out[:0]
		it := s.query(`SELECT kind, tenant FROM tenant_days WHERE day = ?`, dayValue(day)).IterContext(ctx)
		var tk TenantKind
		for it.Scan(&tk.Kind, &tk.Tenant) {
			out = append(out, tk)
		}
		return it.Close()
	})
	if err != nil {
		return nil, fmt.Errorf("list tenants of %s: %w", day, err)
	}
	return out, nil
}

func (s *Store) deleteOp(stmt string, args ...any) op {
	return func(ctx context.Context) error {
		return s.sess.Query(stmt, args...).Consistency(s.writeCL).Idempotent(true).ExecContext(ctx)
	}
}

// DropPartitions deletes every catalogued partition of one tenant, kind and
// day, then (for audit) the day's audit id partitions, then the catalogue
// of that day and the tenant-day index row. Running it again after an
// interruption finishes the job; running it on a dropped day does nothing.
func (s *Store) DropPartitions(ctx context.Context, tenant string, kind model.Kind, day model.Day) (DropStats, error) {
	st, err := s.dropPartitionData(ctx, tenant, kind, day)
	if err != nil {
		return st, err
	}
	n, err := s.dropPartitionCatalogue(ctx, tenant, kind, day)
	st.Deletes += n
	return st, err
}

// part is one data partition of a tenant-kind-day.
type part struct {
	series string
	sub    int32
}

// listPartitions reads the day's partitions from every catalogue shard,
// with the rows and bytes they are catalogued with. Rows registered but not
// yet counted are listed too (with zero counts): their partition may hold
// rows of a commit that failed.
func (s *Store) listPartitions(ctx context.Context, tenant string, kind model.Kind, day model.Day) (map[part]struct{}, DropStats, error) {
	var st DropStats
	var mu sync.Mutex
	parts := make(map[part]struct{})
	var list []op
	for shard := range catalogueShards {
		list = append(list, func(ctx context.Context) error {
			it := s.query(`SELECT series, sub, row_count, byte_count FROM catalogue WHERE tenant = ? AND kind = ? AND day = ? AND shard = ?`,
				tenant, kind.String(), dayValue(day), shard).IterContext(ctx)
			var (
				p           part
				rows, bytes int64
			)
			mu.Lock()
			defer mu.Unlock()
			for it.Scan(&p.series, &p.sub, &rows, &bytes) {
				if _, ok := parts[p]; !ok {
					parts[p] = struct{}{}
					st.Rows += rows
					st.Bytes += bytes
				}
			}
			return it.Close()
		})
	}
	if err := s.run(ctx, "catalogue_read", list); err != nil {
		return nil, st, fmt.Errorf("list partitions of %s %s on %s: %w", tenant, kind, day, err)
	}
	st.Partitions = len(parts)
	return parts, st, nil
}

// dropPartitionData deletes every catalogued partition of the tenant-kind-
// day (one partition delete each) and, for audit, its 64 audit id
// partitions. The catalogue stays, so an interrupted drop is listed again.
func (s *Store) dropPartitionData(ctx context.Context, tenant string, kind model.Kind, day model.Day) (DropStats, error) {
	table, seriesCol := "readings", "device"
	if kind == model.KindAudit {
		table, seriesCol = "audit", "stream"
	}
	parts, st, err := s.listPartitions(ctx, tenant, kind, day)
	if err != nil {
		return st, err
	}
	var dels []op
	for p := range parts {
		dels = append(dels, s.deleteOp(`DELETE FROM `+table+` WHERE tenant = ? AND `+seriesCol+` = ? AND day = ? AND sub = ?`,
			tenant, p.series, dayValue(day), p.sub))
	}
	if kind == model.KindAudit {
		for b := range auditIDBuckets {
			dels = append(dels, s.deleteOp(`DELETE FROM audit_ids WHERE tenant = ? AND day = ? AND bucket = ?`, tenant, dayValue(day), b))
		}
		// A sealed stream-day's leaves go with its events (its seal stays).
		streams := make(map[string]struct{})
		for p := range parts {
			streams[p.series] = struct{}{}
		}
		for stream := range streams {
			dels = append(dels, s.deleteOp(`DELETE FROM audit_leaves WHERE tenant = ? AND stream = ? AND day = ?`, tenant, stream, dayValue(day)))
			n, err := s.leafBuckets(ctx, tenant, stream, day)
			if err != nil {
				return st, err
			}
			for b := range n {
				dels = append(dels, s.deleteOp(`DELETE FROM audit_leaf_buckets WHERE tenant = ? AND stream = ? AND day = ? AND bucket = ?`,
					tenant, stream, dayValue(day), int32(b)))
			}
		}
	}
	if err := s.run(ctx, "drop", dels); err != nil {
		return st, fmt.Errorf("drop partitions of %s %s on %s: %w", tenant, kind, day, err)
	}
	st.Deletes = len(dels)
	return st, nil
}

// dropPartitionCatalogue deletes the day's 64 catalogue shards of the
// tenant and kind, then its tenant-day index row: the last step of a drop.
func (s *Store) dropPartitionCatalogue(ctx context.Context, tenant string, kind model.Kind, day model.Day) (int, error) {
	var cat []op
	for shard := range catalogueShards {
		cat = append(cat, s.deleteOp(`DELETE FROM catalogue WHERE tenant = ? AND kind = ? AND day = ? AND shard = ?`,
			tenant, kind.String(), dayValue(day), shard))
	}
	if err := s.run(ctx, "drop", cat); err != nil {
		return 0, fmt.Errorf("drop catalogue of %s %s on %s: %w", tenant, kind, day, err)
	}
	n, err := s.dropTenantDay(ctx, tenantDay{day, kind.String(), tenant})
	return len(cat) + n, err
}

func (s *Store) dropTenantDay(ctx context.Context, td tenantDay) (int, error) {
	if err := s.do(ctx, "drop", s.deleteOp(`DELETE FROM tenant_days WHERE day = ? AND kind = ? AND tenant = ?`, dayValue(td.day), td.kind, td.tenant)); err != nil {
		return 0, fmt.Errorf("drop tenant index row %s %s on %s: %w", td.tenant, td.kind, td.day, err)
	}
	s.forget(td)
	return 1, nil
}

// DropDeadLetters deletes a tenant's dead letters of one day: 24 hour
// partitions, then the tenant-day index row.
func (s *Store) DropDeadLetters(ctx context.Context, tenant string, day model.Day) (DropStats, error) {
	st, err := s.dropDeadLetterData(ctx, tenant, day)
	if err != nil {
		return st, err
	}
	n, err := s.dropTenantDay(ctx, tenantDay{day, kindDeadLetters, tenant})
	st.Deletes += n
	return st, err
}

func (s *Store) dropDeadLetterData(ctx context.Context, tenant string, day model.Day) (DropStats, error) {
	var dels []op
	for h := range 24 {
		dels = append(dels, s.deleteOp(`DELETE FROM dead_letters WHERE tenant = ? AND day = ? AND hour = ?`, tenant, dayValue(day), h))
	}
	if err := s.run(ctx, "drop", dels); err != nil {
		return DropStats{}, fmt.Errorf("drop dead letters of %s on %s: %w", tenant, day, err)
	}
	return DropStats{Partitions: 24, Deletes: len(dels)}, nil
}

// DropDay drops everything of one day, for every tenant: what DayTenants
// lists, then the day's tenant index partition.
func (s *Store) DropDay(ctx context.Context, day model.Day) (DropStats, error) {
	var total DropStats
	tks, err := s.DayTenants(ctx, day)
	if err != nil {
		return total, err
	}
	for _, tk := range tks {
		var st DropStats
		switch tk.Kind {
		case kindDeadLetters:
			st, err = s.DropDeadLetters(ctx, tk.Tenant, day)
		default:
			var kind model.Kind
			if kind, err = model.ParseKind(tk.Kind); err == nil {
				st, err = s.DropPartitions(ctx, tk.Tenant, kind, day)
			}
		}
		total.add(st)
		if err != nil {
			return total, err
		}
	}
	if err := s.do(ctx, "drop", s.deleteOp(`DELETE FROM tenant_days WHERE day = ?`, dayValue(day))); err != nil {
		return total, fmt.Errorf("drop tenant index of %s: %w", day, err)
	}
	total.Deletes++
	return total, nil
}

// forget drops what this process remembers of a tenant-day it deleted, so
// that a late write registers its partitions and writes full catalogue
// entries again. Catalogue keys are forgotten all at once: drops are rare,
// and forgetting only costs rewrites.
func (s *Store) forget(td tenantDay) {
	s.mu.Lock()
	delete(s.known, td)
	clear(s.registered)
	s.mu.Unlock()
}
