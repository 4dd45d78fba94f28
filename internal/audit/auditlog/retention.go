package auditlog

import (
	"context"
	"errors"
	"fmt"

	"github.com/sluicehq/sluice/internal/model"
	"github.com/sluicehq/sluice/internal/retention"
	"github.com/sluicehq/sluice/internal/store"
)

// Retention wraps a backend's retention methods so that dropping an audit
// bucket keeps its streams' logs verifiable: before the day's events go,
// each stream-day is sealed (if it was not) and its seal marked dropped.
// A day not due for sealing yet is not dropped: the sweep fails for it and
// retries at the next one.
func (l *Log) Retention(inner retention.Store) retention.Store {
	return &retentionStore{Store: inner, l: l}
}

type retentionStore struct {
	retention.Store
	l *Log
}

func (r *retentionStore) DropData(ctx context.Context, b store.Bucket) (int, error) {
	if b.Kind == store.BucketAudit {
		if err := r.l.beforeDrop(ctx, b.Tenant, b.Day); err != nil {
			return 0, err
		}
	}
	return r.Store.DropData(ctx, b)
}

func (l *Log) beforeDrop(ctx context.Context, tenant string, d model.Day) error {
	refs, err := l.st.AuditStreams(ctx, d)
	if err != nil {
		return err
	}
	for _, ref := range refs {
		if ref.Tenant != tenant {
			continue
		}
		if d > l.LastSealable(l.now()) {
			return fmt.Errorf("audit day %s of %s/%s is not sealed yet (audit.seal_delay): not dropped", d, tenant, ref.Series)
		}
		if _, err := l.Seal(ctx, tenant, ref.Series, d); err != nil && !errors.Is(err, ErrLaterSealed) {
			return fmt.Errorf("seal before retention: %w", err)
		}
		if err := l.Drop(ctx, tenant, ref.Series, d); err != nil {
			return fmt.Errorf("mark %s/%s/%s dropped: %w", tenant, ref.Series, d, err)
		}
	}
	return nil
}
