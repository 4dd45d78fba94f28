package retention

import (
	"context"
	"errors"
	"time"

	"github.com/sluicehq/sluice/internal/model"
	"github.com/sluicehq/sluice/internal/store"
)

// ReadStore is the read side of a backend (the reader's Store).
type ReadStore interface {
	Catalogue(ctx context.Context, sd model.SeriesDay) ([]model.PartitionInfo, error)
	ScanReadings(ctx context.Context, pk model.PartitionKey, r store.Range, limit int) ([]model.ReadingRow, error)
	ScanAudit(ctx context.Context, pk model.PartitionKey, r store.Range, limit int) ([]model.AuditEvent, error)
}

// Hide returns a view of st in which every series-day that is expired at
// now() has no catalogue entries. Readers find partitions only through the
// catalogue, so an expired day reads as empty from the moment it expires,
// whether or not a sweep has dropped it yet, and a day being dropped (rows
// partly gone, catalogue still there) is never served as if complete. It
// writes nothing: the marker is the clock and the policy, not a tombstone.
//
// Give it to the read API only: the write path must see the real catalogue.
func Hide(st ReadStore, cfg Config, now func() time.Time) ReadStore {
	return hidden{ReadStore: st, cfg: cfg, now: now}
}

type hidden struct {
	ReadStore
	cfg Config
	now func() time.Time
}

func (h hidden) Catalogue(ctx context.Context, sd model.SeriesDay) ([]model.PartitionInfo, error) {
	if h.cfg.Expired(store.Bucket{Kind: store.BucketKind(sd.Kind), Tenant: sd.Tenant, Day: sd.Day}, h.now()) {
		return nil, nil
	}
	return h.ReadStore.Catalogue(ctx, sd)
}

// partitionLister is the tenant-day catalogue listing of a store that has
// one (see readapi.PartitionLister).
type partitionLister interface {
	EachPartition(ctx context.Context, tenant string, kind model.Kind, day model.Day, fn func(model.PartitionInfo) error) error
}

// EachPartition lists nothing for an expired day, and what the store lists
// otherwise; a store without the listing answers with an error.
func (h hidden) EachPartition(ctx context.Context, tenant string, kind model.Kind, day model.Day, fn func(model.PartitionInfo) error) error {
	if h.cfg.Expired(store.Bucket{Kind: store.BucketKind(kind), Tenant: tenant, Day: day}, h.now()) {
		return nil
	}
	l, ok := h.ReadStore.(partitionLister)
	if !ok {
		return errors.New("this store cannot list a tenant-day's partitions")
	}
	return l.EachPartition(ctx, tenant, kind, day, fn)
}
