package pebblestore

import (
	"context"
	"fmt"

	"github.com/cockroachdb/pebble/v2"

	"github.com/sluicehq/sluice/internal/model"
	"github.com/sluicehq/sluice/internal/store"
)

// iterSource hands out an iterator bounded to [lower, upper), and the
// function that gives it back (and reports its error).
type iterSource interface {
	iter(ctx context.Context, lower, upper []byte) (*pebble.Iterator, func() error, error)
}

func (s *Store) iter(ctx context.Context, lower, upper []byte) (*pebble.Iterator, func() error, error) {
	it, err := s.db.NewIterWithContext(ctx, &pebble.IterOptions{LowerBound: lower, UpperBound: upper})
	if err != nil {
		return nil, nil, err
	}
	return it, it.Close, nil
}

// Reads serves many small reads from one Pebble iterator, bounded anew for
// each: a catalogue or a partition's range costs a seek instead of a new
// iterator, which with many distinct devices is most of the cost of a
// small read (the rollups' recomputes make one per device). It sees the
// store as it was when NewReads returned. It is not safe for concurrent use;
// Close it.
type Reads struct {
	it *pebble.Iterator
}

// NewReads opens a read session.
func (s *Store) NewReads(ctx context.Context) (*Reads, error) {
	it, err := s.db.NewIterWithContext(ctx, &pebble.IterOptions{})
	if err != nil {
		return nil, fmt.Errorf("open a read session: %w", err)
	}
	return &Reads{it: it}, nil
}

// Close releases the session's iterator.
func (r *Reads) Close() error {
	if err := r.it.Close(); err != nil {
		return fmt.Errorf("close a read session: %w", err)
	}
	return nil
}

func (r *Reads) iter(_ context.Context, lower, upper []byte) (*pebble.Iterator, func() error, error) {
	r.it.SetBounds(lower, upper)
	return r.it, r.it.Error, nil
}

// Catalogue returns every partition of one series-day, ordered by
// sub-bucket.
func (r *Reads) Catalogue(ctx context.Context, sd model.SeriesDay) ([]model.PartitionInfo, error) {
	out, err := catalogues(ctx, r, []model.SeriesDay{sd})
	if err != nil {
		return nil, err
	}
	return out[0], nil
}

// ScanReadings is Store.ScanReadings within the session.
func (r *Reads) ScanReadings(ctx context.Context, pk model.PartitionKey, rng store.Range, limit int) ([]model.ReadingRow, error) {
	return scanReadings(ctx, r, pk, rng, limit)
}

// ScanAudit is Store.ScanAudit within the session.
func (r *Reads) ScanAudit(ctx context.Context, pk model.PartitionKey, rng store.Range, limit int) ([]model.AuditEvent, error) {
	return scanAudit(ctx, r, pk, rng, limit)
}
