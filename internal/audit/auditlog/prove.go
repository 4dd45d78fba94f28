package auditlog

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"golang.org/x/mod/sumdb/tlog"

	"github.com/sluicehq/sluice/internal/audit/canon"
	"github.com/sluicehq/sluice/internal/audit/tree"
	"github.com/sluicehq/sluice/internal/model"
	"github.com/sluicehq/sluice/internal/store"
)

// ErrNotFound is returned for a stream, seal or event that does not exist.
var ErrNotFound = errors.New("not found")

// stream is the sealed state of one stream, as proofs need it.
type stream struct {
	tenant, stream string
	recs           []*DayRecord
	n              *nodes
}

func (l *Log) open(ctx context.Context, tenant, name string) (*stream, error) {
	recs, err := l.Records(ctx, tenant, name)
	if err != nil {
		return nil, err
	}
	if len(recs) == 0 {
		return nil, fmt.Errorf("stream %q has no sealed day: %w", name, ErrNotFound)
	}
	s := &stream{tenant: tenant, stream: name, recs: recs}
	s.n = &nodes{recs: recs, leaves: func(r *DayRecord) ([]tree.Hash, error) {
		var out []tree.Hash
		err := l.st.AuditLeaves(ctx, tenant, name, r.day, func(lf store.AuditLeaf) error {
			if int64(len(out)) < r.Events() {
				out = append(out, lf.Hash)
			}
			return nil
		})
		return out, err
	}}
	return s, nil
}

// bySize returns the record whose tree has size, or the latest for 0.
func (s *stream) bySize(size int64) (*DayRecord, error) {
	if size == 0 {
		return s.recs[len(s.recs)-1], nil
	}
	i := slices.IndexFunc(s.recs, func(r *DayRecord) bool { return r.Size == size })
	if i < 0 {
		return nil, fmt.Errorf("no checkpoint of size %d for stream %q: %w", size, s.stream, ErrNotFound)
	}
	return s.recs[i], nil
}

// Latest returns the latest signed checkpoint of a stream.
func (l *Log) Latest(ctx context.Context, tenant, name string) (*DayRecord, error) {
	s, err := l.open(ctx, tenant, name)
	if err != nil {
		return nil, err
	}
	return s.recs[len(s.recs)-1], nil
}

// Inclusion proves that the event eventID of day d is in the tree of the
// checkpoint of size size (0: the latest).
func (l *Log) Inclusion(ctx context.Context, tenant, name string, d model.Day, eventID string, size int64) (tree.InclusionProof, error) {
	var p tree.InclusionProof
	s, err := l.open(ctx, tenant, name)
	if err != nil {
		return p, err
	}
	i := slices.IndexFunc(s.recs, func(r *DayRecord) bool { return r.day == d })
	if i < 0 {
		return p, fmt.Errorf("day %s of stream %q is not sealed: %w", d, name, ErrNotFound)
	}
	day := s.recs[i]
	target, err := s.bySize(size)
	if err != nil {
		return p, err
	}
	if target.Size < day.Size {
		return p, fmt.Errorf("the checkpoint of size %d is older than day %s (size %d)", target.Size, d, day.Size)
	}
	leaves, err := s.n.dayLeaves(day)
	if err != nil {
		return p, err
	}
	// Find the event's leaf and its canonical bytes. The stored leaves name
	// the event's ts, so only that millisecond's events are read; an event
	// they do not name (inserted after the seal) is looked for in the day.
	from, to := d.Start(), d.End()
	err = l.st.AuditLeaves(ctx, tenant, name, d, func(lf store.AuditLeaf) error {
		if lf.EventID == eventID {
			from, to = lf.TS, lf.TS+1
			return errFound
		}
		return nil
	})
	if err != nil && !errors.Is(err, errFound) {
		return p, err
	}
	var ev *model.AuditEvent
	err = eachEventIn(ctx, l.st, tenant, name, from, to, func(e *model.AuditEvent) error {
		if e.EventID == eventID {
			c := *e
			ev = &c
			return errFound
		}
		return nil
	})
	if errors.Is(err, errFound) {
		err = nil
	}
	if err != nil {
		return p, err
	}
	if ev == nil {
		return p, fmt.Errorf("event %q of stream %q on %s: %w", eventID, name, d, ErrNotFound)
	}
	data := canon.Event(ev)
	h := canon.LeafHash(data)
	idx := slices.Index(leaves, tree.Hash(h))
	if idx < 0 {
		return p, fmt.Errorf("event %q of stream %q on %s is not the event that was sealed (changed after sealing): run query audit verify", eventID, name, d)
	}
	p.Leaf = data
	p.Index = day.Start + int64(idx)
	if p.Hashes, err = tlog.ProveRecord(target.Size, p.Index, tree.Reader(s.n.node)); err != nil {
		return p, fmt.Errorf("inclusion proof: %w", err)
	}
	p.Checkpoint = []byte(target.Checkpoint)
	return p, nil
}

// Consistency proves that the tree of the checkpoint of size newSize (0:
// the latest) extends the one of size oldSize.
func (l *Log) Consistency(ctx context.Context, tenant, name string, oldSize, newSize int64) (tree.ConsistencyProof, error) {
	var p tree.ConsistencyProof
	s, err := l.open(ctx, tenant, name)
	if err != nil {
		return p, err
	}
	newRec, err := s.bySize(newSize)
	if err != nil {
		return p, err
	}
	if oldSize < 1 || oldSize > newRec.Size {
		return p, fmt.Errorf("old size %d must be in 1..%d", oldSize, newRec.Size)
	}
	if _, err := s.bySize(oldSize); err != nil {
		return p, err
	}
	p.Old = oldSize
	p.Checkpoint = []byte(newRec.Checkpoint)
	if oldSize == newRec.Size {
		return p, nil
	}
	if p.Hashes, err = tlog.ProveTree(newRec.Size, oldSize, tree.Reader(s.n.node)); err != nil {
		return p, fmt.Errorf("consistency proof from %d to %d (across days dropped by retention use the per-day proofs of query audit checkpoints): %w", oldSize, newRec.Size, err)
	}
	return p, nil
}

// errFound stops a walk that found what it looked for.
var errFound = errors.New("found")
