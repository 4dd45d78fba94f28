package pebblestore

import (
	"bytes"
	"context"
	"errors"
	"fmt"

	"github.com/cockroachdb/pebble/v2"

	"github.com/sluicehq/sluice/internal/model"
	"github.com/sluicehq/sluice/internal/store"
)

// iterSource hands out an iterator over [lower, upper), and the function
// that gives it back (and reports its error).
type iterSource interface {
	iter(ctx context.Context, lower, upper []byte) (*span, func() error, error)
}

// span is an iterator seen through the bounds [lower, upper). A span from
// the store owns its iterator, which Pebble bounds itself (lower and upper
// are then nil); a span of a read session shares one of the session's
// unbounded iterators and checks the bounds here, so that the session never
// changes an iterator's bounds: Pebble closes each level's open table when
// new bounds fall outside it, and the next read opens the table again and
// loads its index and data blocks anew.
type span struct {
	it           *pebble.Iterator
	lower, upper []byte
}

// First moves to the first key of the span.
func (s *span) First() bool {
	if s.lower == nil {
		return s.it.First()
	}
	return s.SeekGE(s.lower)
}

// SeekGE moves to the first key of the span at or after k.
func (s *span) SeekGE(k []byte) bool {
	if s.lower != nil && bytes.Compare(k, s.lower) < 0 {
		k = s.lower
	}
	return s.it.SeekGE(k) && s.inside()
}

// Next moves to the next key of the span.
func (s *span) Next() bool { return s.it.Next() && s.inside() }

// Key and Value are the iterator's, valid until it moves.
func (s *span) Key() []byte   { return s.it.Key() }
func (s *span) Value() []byte { return s.it.Value() }

// Error is the iterator's error, if any.
func (s *span) Error() error { return s.it.Error() }

func (s *span) inside() bool { return s.upper == nil || bytes.Compare(s.it.Key(), s.upper) < 0 }

// mark records where a span's iterator stands after a read that ran to
// its end: at the first key at or after past.
type mark struct {
	past  []byte
	known bool
}

func (m *mark) forget() { m.known = false }

// set records that the iterator stands at the first key at or after k.
func (m *mark) set(k []byte) { m.past, m.known = append(m.past[:0], k...), true }

// setPastPrefix records that the iterator stands past every key with
// prefix p.
func (m *mark) setPastPrefix(p []byte) {
	m.past = prefixEndInPlace(append(m.past[:0], p...))
	m.known = m.past != nil
}

// seek is SeekGE(k), except that it does not move the iterator when m
// says it already stands where the seek would take it: when k is at or
// after m's key, and the iterator's key is at or after k (or no key is
// left), no key lies between. Reads made in key order then find the next
// one's first key without a seek through every level of the store (a
// roll's devices are sorted, and often neighbours; most of a round's new
// devices have no catalogue). It forgets m: until the read that follows
// records where it ended, the iterator's place is unknown.
func (s *span) seek(m *mark, k []byte) bool {
	if s.lower != nil && bytes.Compare(k, s.lower) < 0 {
		k = s.lower
	}
	known := m.known
	m.forget()
	if known && bytes.Compare(k, m.past) >= 0 {
		if !s.it.Valid() {
			if s.it.Error() == nil {
				return false
			}
		} else if bytes.Compare(s.it.Key(), k) >= 0 {
			return s.inside()
		}
	}
	return s.SeekGE(k)
}

func (s *Store) iter(ctx context.Context, lower, upper []byte) (*span, func() error, error) {
	it, err := s.db.NewIterWithContext(ctx, &pebble.IterOptions{LowerBound: lower, UpperBound: upper})
	if err != nil {
		return nil, nil, err
	}
	return &span{it: it}, it.Close, nil
}

// Reads serves many small reads from two unbounded Pebble iterators, one
// for catalogues and one for rows: a catalogue or a partition's range costs
// a seek instead of a new iterator, which with many distinct devices is
// most of the cost of a small read (the rollups' recomputes make one per
// device). Catalogue and row reads alternate between two distant key
// ranges; on iterators of their own each keeps the tables and blocks it
// has open, and reads made in key order (the recomputes sort their
// devices) mostly find the next one's there, or stand at it already
// (span.seek). It sees the store as it was
// when NewReads returned. It is not safe for concurrent use, and one read
// must end before the next begins (they share one span); Close it once.
type Reads struct {
	cat, rows    *pebble.Iterator
	sp           span
	lower, upper []byte // EachReading's bounds
	catKey       []byte // Catalogue's prefix
	// Where the iterators stand after a Catalogue or an EachReading read
	// to its end (span.seek); any other read through them forgets it.
	catMark, rowsMark mark
}

// NewReads opens a read session.
func (s *Store) NewReads(ctx context.Context) (*Reads, error) {
	cat, err := s.db.NewIterWithContext(ctx, &pebble.IterOptions{})
	if err != nil {
		return nil, fmt.Errorf("open a read session: %w", err)
	}
	// A clone reads the same state of the store, so that a catalogue and
	// the rows it lists are of the same moment.
	rows, err := cat.Clone(pebble.CloneOptions{})
	if err != nil {
		_ = cat.Close()
		return nil, fmt.Errorf("open a read session: %w", err)
	}
	return &Reads{cat: cat, rows: rows}, nil
}

// Close releases the session's iterators.
func (r *Reads) Close() error {
	if err := errors.Join(r.cat.Close(), r.rows.Close()); err != nil {
		return fmt.Errorf("close a read session: %w", err)
	}
	return nil
}

func (r *Reads) iter(_ context.Context, lower, upper []byte) (*span, func() error, error) {
	sp, m := r.span(lower, upper)
	m.forget()
	return sp, sp.it.Error, nil
}

// span returns the session's span over [lower, upper), on the catalogue or
// the rows iterator, and where that iterator stands.
func (r *Reads) span(lower, upper []byte) (*span, *mark) {
	it, m := r.rows, &r.rowsMark
	if len(lower) > 0 && lower[0] == tabCatalogue {
		it, m = r.cat, &r.catMark
	}
	r.sp = span{it: it, lower: lower, upper: upper}
	return &r.sp, m
}

// Catalogue returns every partition of one series-day, ordered by
// sub-bucket.
// It seeks the session's catalogue iterator to the series-day's prefix,
// built in a buffer of the session's: no keys to sort and no bounds to
// allocate (a recompute reads one catalogue per device-minute).
func (r *Reads) Catalogue(ctx context.Context, sd model.SeriesDay) ([]model.PartitionInfo, error) {
	r.catKey = seriesDayCataloguePrefix(r.catKey[:0], sd)
	it, m := r.span(r.catKey, nil)
	return readCatalogue(nil, it, m, r.catKey, sd)
}

// ScanReadings is Store.ScanReadings within the session.
func (r *Reads) ScanReadings(ctx context.Context, pk model.PartitionKey, rng store.Range, limit int) ([]model.ReadingRow, error) {
	return scanReadings(ctx, r, pk, rng, limit)
}

// ScanAudit is Store.ScanAudit within the session.
func (r *Reads) ScanAudit(ctx context.Context, pk model.PartitionKey, rng store.Range, limit int) ([]model.AuditEvent, error) {
	return scanAudit(ctx, r, pk, rng, limit)
}
