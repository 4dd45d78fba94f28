package chstore

import (
	"context"
	"fmt"
	"strings"

	"github.com/sluicehq/sluice/internal/model"
	"github.com/sluicehq/sluice/internal/store"
)

// Retention. The minute table is partitioned by UTC day (toYYYYMMDD), for
// every tenant at once, so a rollup bucket is a day of all tenants (Tenant
// ""), listed from system.parts and dropped with one ALTER TABLE ... DROP
// PARTITION: ClickHouse unlinks the day's parts, nothing is rewritten and
// no mutation runs. There is no catalogue to drop. Dropping a partition
// that is already gone does nothing, so two sweepers may race.

const partsWhere = `database = ? AND table = ? AND active`

func (s *Store) tableName() string {
	_, t, _ := strings.Cut(s.table, ".")
	return t
}

// Buckets lists the days of the minute table before the given one.
func (s *Store) Buckets(ctx context.Context, before model.Day) ([]store.Bucket, error) {
	ctx, cancel := s.ctx(ctx)
	defer cancel()
	rows, err := s.conn.Query(ctx, `SELECT DISTINCT partition FROM system.parts WHERE `+partsWhere, s.cfg.Database, s.tableName())
	if err != nil {
		return nil, fmt.Errorf("list rollup partitions: %w", err)
	}
	defer rows.Close()
	var out []store.Bucket
	for rows.Next() {
		var p string
		if err := rows.Scan(&p); err != nil {
			return nil, fmt.Errorf("list rollup partitions: %w", err)
		}
		d, err := partitionDay(p)
		if err != nil {
			return nil, err
		}
		if d < before {
			out = append(out, store.Bucket{Kind: store.BucketRollups, Day: d})
		}
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list rollup partitions: %w", err)
	}
	return out, nil
}

// partitionDay parses a partition id of toYYYYMMDD.
func partitionDay(p string) (model.Day, error) {
	p = strings.Trim(p, "'")
	if len(p) != 8 {
		return 0, fmt.Errorf("rollup partition %q is not YYYYMMDD", p)
	}
	return model.ParseDay(p[:4] + "-" + p[4:6] + "-" + p[6:])
}

func partitionID(d model.Day) string { return strings.ReplaceAll(d.String(), "-", "") }

// Measure returns the day's parts, rows and bytes on disk (rows of
// versions not yet merged away count too).
func (s *Store) Measure(ctx context.Context, b store.Bucket) (store.BucketSize, error) {
	var size store.BucketSize
	if b.Kind != store.BucketRollups {
		return size, nil
	}
	ctx, cancel := s.ctx(ctx)
	defer cancel()
	var parts, rows, bytes uint64
	if err := s.conn.QueryRow(ctx, `SELECT count(), sum(rows), sum(bytes_on_disk) FROM system.parts WHERE `+partsWhere+` AND partition = ?`,
		s.cfg.Database, s.tableName(), partitionID(b.Day)).Scan(&parts, &rows, &bytes); err != nil {
		return size, fmt.Errorf("measure %s: %w", b, err)
	}
	return store.BucketSize{Partitions: int64(parts), Rows: int64(rows), Bytes: int64(bytes)}, nil
}

// DropData drops the day's partition: one statement.
func (s *Store) DropData(ctx context.Context, b store.Bucket) (int, error) {
	if b.Kind != store.BucketRollups {
		return 0, nil
	}
	if err := s.DropDay(ctx, b.Day); err != nil {
		return 0, err
	}
	return 1, nil
}

// DropCatalogue does nothing: ClickHouse's own part list is the catalogue.
func (s *Store) DropCatalogue(context.Context, store.Bucket) (int, error) { return 0, nil }
