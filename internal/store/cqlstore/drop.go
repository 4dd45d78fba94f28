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
	var st DropStats
	table, seriesCol := "readings", "device"
	if kind == model.KindAudit {
		table, seriesCol = "audit", "stream"
	}
	// 1. List the day's partitions from every catalogue shard.
	type part struct {
		series string
		sub    int32
	}
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
		return st, fmt.Errorf("list partitions of %s %s on %s: %w", tenant, kind, day, err)
	}
	// 2. One partition delete per data partition.
	var dels []op
	for p := range parts {
		dels = append(dels, s.deleteOp(`DELETE FROM `+table+` WHERE tenant = ? AND `+seriesCol+` = ? AND day = ? AND sub = ?`,
			tenant, p.series, dayValue(day), p.sub))
	}
	if kind == model.KindAudit {
		for b := range auditIDBuckets {
			dels = append(dels, s.deleteOp(`DELETE FROM audit_ids WHERE tenant = ? AND day = ? AND bucket = ?`, tenant, dayValue(day), b))
		}
	}
	if err := s.run(ctx, "drop", dels); err != nil {
		return st, fmt.Errorf("drop partitions of %s %s on %s: %w", tenant, kind, day, err)
	}
	st.Partitions = len(parts)
	st.Deletes = len(dels)
	// 3. The catalogue, last.
	var cat []op
	for shard := range catalogueShards {
		cat = append(cat, s.deleteOp(`DELETE FROM catalogue WHERE tenant = ? AND kind = ? AND day = ? AND shard = ?`,
			tenant, kind.String(), dayValue(day), shard))
	}
	cat = append(cat, s.deleteOp(`DELETE FROM tenant_days WHERE day = ? AND kind = ? AND tenant = ?`, dayValue(day), kind.String(), tenant))
	if err := s.run(ctx, "drop", cat); err != nil {
		return st, fmt.Errorf("drop catalogue of %s %s on %s: %w", tenant, kind, day, err)
	}
	st.Deletes += len(cat)
	s.forget(tenantDay{day, kind.String(), tenant})
	return st, nil
}

// DropDeadLetters deletes a tenant's dead letters of one day: 24 hour
// partitions.
func (s *Store) DropDeadLetters(ctx context.Context, tenant string, day model.Day) (DropStats, error) {
	var dels []op
	for h := range 24 {
		dels = append(dels, s.deleteOp(`DELETE FROM dead_letters WHERE tenant = ? AND day = ? AND hour = ?`, tenant, dayValue(day), h))
	}
	dels = append(dels, s.deleteOp(`DELETE FROM tenant_days WHERE day = ? AND kind = ? AND tenant = ?`, dayValue(day), kindDeadLetters, tenant))
	if err := s.run(ctx, "drop", dels); err != nil {
		return DropStats{}, fmt.Errorf("drop dead letters of %s on %s: %w", tenant, day, err)
	}
	s.forget(tenantDay{day, kindDeadLetters, tenant})
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

func (s *Store) forget(td tenantDay) {
	s.mu.Lock()
	delete(s.known, td)
	s.mu.Unlock()
}
