package cqlstore

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/internal/model"
	"github.com/sluicehq/sluice/internal/store"
)

// Retention through the sweeper's interface: a bucket (kind, tenant, day)
// is found in the tenant_days index, measured from the catalogue, and
// dropped with partition deletes (DropData), its catalogue shards and index
// row last (DropCatalogue). The catalogue rows of every gateway are listed,
// so a partition another gateway opened is dropped too.

// Buckets lists the (kind, tenant, day) entries of the tenant-day index for
// days before the given one. The index has one partition per day, so the
// scan of its keys costs one row per day.
func (s *Store) Buckets(ctx context.Context, before model.Day) ([]store.Bucket, error) {
	var days []model.Day
	err := s.do(ctx, "tenant_days_read", func(ctx context.Context) error {
		days = days[:0]
		it := s.query(`SELECT DISTINCT day FROM tenant_days`).IterContext(ctx)
		var t time.Time
		for it.Scan(&t) {
			if d := model.DayOf(t.UnixMilli()); d < before {
				days = append(days, d)
			}
		}
		return it.Close()
	})
	if err != nil {
		return nil, fmt.Errorf("list days: %w", err)
	}
	var out []store.Bucket
	for _, d := range days {
		tks, err := s.DayTenants(ctx, d)
		if err != nil {
			return nil, err
		}
		for _, tk := range tks {
			var k store.BucketKind
			switch tk.Kind {
			case kindDeadLetters:
				k = store.BucketDeadLetters
			default:
				mk, err := model.ParseKind(tk.Kind)
				if err != nil {
					return nil, fmt.Errorf("tenant index of %s: %w", d, err)
				}
				k = store.BucketKind(mk)
			}
			out = append(out, store.Bucket{Kind: k, Tenant: tk.Tenant, Day: d})
		}
	}
	return out, nil
}

// Measure sums the bucket's catalogue rows of every gateway. For dead
// letters, which have no catalogue, it counts the rows of the 24 hour
// partitions (bytes are not known).
func (s *Store) Measure(ctx context.Context, b store.Bucket) (store.BucketSize, error) {
	switch b.Kind {
	case store.BucketReadings, store.BucketAudit:
		_, st, err := s.listPartitions(ctx, b.Tenant, model.Kind(b.Kind), b.Day)
		return store.BucketSize{Partitions: int64(st.Partitions), Rows: st.Rows, Bytes: st.Bytes}, err
	case store.BucketDeadLetters:
		var rows, parts atomic.Int64
		var ops []op
		for h := range 24 {
			ops = append(ops, func(ctx context.Context) error {
				var n int64
				if err := s.query(`SELECT COUNT(*) FROM dead_letters WHERE tenant = ? AND day = ? AND hour = ?`, b.Tenant, dayValue(b.Day), h).
					ScanContext(ctx, &n); err != nil {
					return err
				}
				rows.Add(n)
				if n > 0 {
					parts.Add(1)
				}
				return nil
			})
		}
		if err := s.run(ctx, "dead_letters_read", ops); err != nil {
			return store.BucketSize{}, fmt.Errorf("measure %s: %w", b, err)
		}
		return store.BucketSize{Partitions: parts.Load(), Rows: rows.Load()}, nil
	}
	return store.BucketSize{}, nil
}

// DropData deletes the bucket's partitions, one partition delete each (for
// audit also the 64 audit id partitions; for dead letters the 24 hour
// partitions). It returns the number of deletes issued.
func (s *Store) DropData(ctx context.Context, b store.Bucket) (int, error) {
	var st DropStats
	var err error
	switch b.Kind {
	case store.BucketReadings, store.BucketAudit:
		st, err = s.dropPartitionData(ctx, b.Tenant, model.Kind(b.Kind), b.Day)
	case store.BucketDeadLetters:
		st, err = s.dropDeadLetterData(ctx, b.Tenant, b.Day)
	}
	return st.Deletes, err
}

// DropCatalogue deletes the bucket's 64 catalogue shards (not for dead
// letters) and then its tenant-day index row, after which the bucket is no
// longer listed.
func (s *Store) DropCatalogue(ctx context.Context, b store.Bucket) (int, error) {
	switch b.Kind {
	case store.BucketReadings, store.BucketAudit:
		return s.dropPartitionCatalogue(ctx, b.Tenant, model.Kind(b.Kind), b.Day)
	case store.BucketDeadLetters:
		return s.dropTenantDay(ctx, tenantDay{b.Day, kindDeadLetters, b.Tenant})
	}
	return 0, nil
}
