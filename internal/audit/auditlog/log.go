// Package auditlog makes every audit stream of a tenant a verifiable log.
//
// The events of a (tenant, stream) are the leaves of one RFC 6962 tree.
// Leaves are appended a UTC day at a time, when the day is sealed: after
// it ended and Config.SealDelay passed, whichever gateway gets there first
// reads the day's events in (ts, event_id) order, appends their leaf
// hashes (package canon) to the tree, stores the day's leaves, and records
// the seal: the tree's frontier, a consistency proof from the previous
// seal and a signed C2SP checkpoint. The order of leaves therefore depends
// only on the events, never on which gateway received them or when. A seal
// is stored only if the stream-day has none; a seal that loses the race is
// replaced by the stored one, which, computed from the same events, is
// equal. Events of a day are refused once Config.AcceptLate after the day
// (the sink asks Gate), so nothing lands in a day after it was sealed.
//
// docs/audit.md describes the model, the formats and the auditor's
// procedure.
package auditlog

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/mod/sumdb/tlog"

	"github.com/sluicehq/sluice/internal/audit/canon"
	"github.com/sluicehq/sluice/internal/audit/tree"
	"github.com/sluicehq/sluice/internal/model"
	"github.com/sluicehq/sluice/internal/reader"
	"github.com/sluicehq/sluice/internal/store"
)

// Store is what the audit log needs of a backend.
type Store interface {
	reader.Store
	// AuditSeals returns a stream's seal records ordered by day.
	AuditSeals(ctx context.Context, tenant, stream string) ([]store.AuditSeal, error)
	// PutAuditSeal stores a seal durably; unless replace, only if the
	// stream-day has none (it then returns false).
	PutAuditSeal(ctx context.Context, s store.AuditSeal, replace bool) (bool, error)
	// AuditLeafWriter returns a writer of a stream-day's leaves: a chunk
	// written again replaces the one stored.
	AuditLeafWriter(ctx context.Context, tenant, stream string, d model.Day) (store.AuditLeafWriter, error)
	// AuditLeaves calls fn with the stored leaves of a stream-day in order.
	AuditLeaves(ctx context.Context, tenant, stream string, d model.Day, fn func(store.AuditLeaf) error) error
	// AuditStreams lists the streams with audit partitions on a day.
	AuditStreams(ctx context.Context, d model.Day) ([]store.SeriesRef, error)
}

// leavesPerChunk is how many leaves one stored chunk holds.
const leavesPerChunk = 4096

// Log seals, proves and verifies the audit logs of one store.
type Log struct {
	cfg    Config
	st     Store
	keys   *Keys
	now    func() time.Time
	logger *slog.Logger
	m      *metrics
	// done is the last day every stream of which is sealed, as far as
	// this process knows.
	done model.Day
	// sealing serialises this process's seals (the sealer's rounds and
	// retention's seal before a drop): a second seal of a day then finds
	// the first one's record instead of writing the day's leaves again. A
	// channel of one, so that a seal waiting its turn stops with its
	// context.
	sealing chan struct{}
}

// New returns a Log. keys may be nil for a Log that only verifies (its
// verifiers then come from the caller).
func New(cfg Config, st Store, keys *Keys, now func() time.Time, logger *slog.Logger, reg prometheus.Registerer) *Log {
	return &Log{cfg: cfg, st: st, keys: keys, now: now, logger: logger, m: newMetrics(reg), done: model.Day(-1 << 30), sealing: make(chan struct{}, 1)}
}

// LateError refuses an event whose day no longer accepts events.
type LateError struct {
	EventID string
	Stream  string
	Day     model.Day
	Until   time.Time
}

func (e *LateError) Error() string {
	return fmt.Sprintf("audit event %q of stream %q: its day %s stopped accepting events at %s (audit.accept_late) and is sealed into the stream's log; late events are refused",
		e.EventID, e.Stream, e.Day, e.Until.UTC().Format(time.RFC3339))
}

// Gate refuses an event whose day ended more than AcceptLate ago: its day
// is (or is about to be) sealed.
func (l *Log) Gate(e *model.AuditEvent) error {
	d := model.DayOf(e.TS)
	until := time.UnixMilli(d.End()).Add(l.cfg.AcceptLate)
	if !l.now().Before(until) {
		return &LateError{EventID: e.EventID, Stream: e.Stream, Day: d, Until: until}
	}
	return nil
}

// Records returns the seal records of a stream, ordered by day.
func (l *Log) Records(ctx context.Context, tenant, stream string) ([]*DayRecord, error) {
	seals, err := l.st.AuditSeals(ctx, tenant, stream)
	if err != nil {
		return nil, err
	}
	out := make([]*DayRecord, 0, len(seals))
	for _, s := range seals {
		r, err := decodeRecord(s)
		if err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, nil
}

// origin returns a stream's origin.
func (l *Log) origin(tenant, stream string) string {
	return Origin(l.keys.Signer.Name(), tenant, stream)
}

// ErrLaterSealed is returned when a day is sealed after a later day of
// the same stream: its events stay out of the log.
var ErrLaterSealed = errors.New("a later day of the stream is already sealed")

// Seal seals one stream-day and returns its record, or nil when the day
// has no events. Sealing a sealed day returns the stored record.
func (l *Log) Seal(ctx context.Context, tenant, stream string, d model.Day) (*DayRecord, error) {
	select {
	case l.sealing <- struct{}{}:
		defer func() { <-l.sealing }()
	case <-ctx.Done():
		return nil, fmt.Errorf("seal %s/%s/%s: waiting for this gateway's seal in progress: %w", tenant, stream, d, ctx.Err())
	}
	start := time.Now()
	recs, err := l.Records(ctx, tenant, stream)
	if err != nil {
		return nil, err
	}
	var prev *DayRecord
	if n := len(recs); n > 0 {
		last := recs[n-1]
		switch {
		case last.day == d:
			return last, nil
		case last.day > d:
			if i := slices.IndexFunc(recs, func(r *DayRecord) bool { return r.day == d }); i >= 0 {
				return recs[i], nil
			}
			return nil, fmt.Errorf("seal %s/%s/%s: %w (%s)", tenant, stream, d, ErrLaterSealed, last.Day)
		}
		prev = last
	}
	f := tree.Frontier{}
	if prev != nil {
		pf := prev.frontier()
		f = pf.Clone()
	}
	first := f.Size
	infos, err := dayParts(ctx, l.st, tenant, stream, d)
	if err != nil {
		return nil, fmt.Errorf("seal %s/%s/%s: %w", tenant, stream, d, err)
	}
	// The day's leaf hashes are held for its consistency proof: sized up
	// front from the catalogue's row counts (the events, and any stored
	// twice), they are not copied as they grow.
	var rows int64
	for _, pi := range infos {
		rows += max(pi.Rows, 0)
	}
	leaves := make([]tree.Hash, 0, min(rows, maxPresizedLeaves))
	lw, err := l.st.AuditLeafWriter(ctx, tenant, stream, d)
	if err != nil {
		return nil, fmt.Errorf("seal %s/%s/%s: %w", tenant, stream, d, err)
	}
	defer lw.Abort()
	chunk := make([]store.AuditLeaf, 0, leavesPerChunk)
	var chunkNo uint32
	flush := func() error {
		if len(chunk) == 0 {
			return nil
		}
		if err := lw.Put(ctx, chunkNo, chunk); err != nil {
			return err
		}
		chunkNo++
		chunk = chunk[:0]
		return nil
	}
	var hasher canon.Hasher
	var blocks blockHashes
	err = eachEventOfDay(ctx, l.st, tenant, stream, d, infos, func(e *model.AuditEvent) error {
		h := hasher.EventHash(e)
		if block, ok := f.AppendBlock(h, blockLevel); ok {
			if len(blocks.hashes) == 0 {
				blocks.first = f.Size>>blockLevel - 1
			}
			blocks.hashes = append(blocks.hashes, block)
		}
		leaves = append(leaves, h)
		chunk = append(chunk, store.AuditLeaf{TS: e.TS, EventID: e.EventID, Hash: h})
		if len(chunk) == leavesPerChunk {
			return flush()
		}
		return nil
	})
	if err == nil {
		err = flush()
	}
	if err == nil && len(leaves) > 0 {
		err = lw.Commit(ctx)
	}
	if err != nil {
		return nil, fmt.Errorf("seal %s/%s/%s: %w", tenant, stream, d, err)
	}
	if len(leaves) == 0 {
		return nil, nil
	}
	rec := &DayRecord{Day: d.String(), day: d, Start: first, Size: f.Size, Frontier: f.Hashes, SealedAt: l.now().UTC()}
	if prev != nil && prev.Size > 0 {
		src := &nodes{recs: []*DayRecord{prev, rec}, blocks: &blocks, leaves: func(r *DayRecord) ([]tree.Hash, error) {
			if r == rec {
				return leaves, nil
			}
			return nil, errors.New("no leaves")
		}}
		if rec.Consistency, err = tlog.ProveTree(rec.Size, prev.Size, tree.Reader(src.node)); err != nil {
			return nil, fmt.Errorf("seal %s/%s/%s: consistency proof: %w", tenant, stream, d, err)
		}
	}
	cp, err := SignCheckpoint(tree.Checkpoint{Origin: l.origin(tenant, stream), Size: f.Size, Root: f.Root()}, l.keys.Signer)
	if err != nil {
		return nil, err
	}
	rec.Checkpoint = string(cp)
	stored, err := l.st.PutAuditSeal(ctx, store.AuditSeal{Tenant: tenant, Stream: stream, Day: d, Record: encodeRecord(rec)}, false)
	if err != nil {
		return nil, fmt.Errorf("seal %s/%s/%s: %w", tenant, stream, d, err)
	}
	if !stored {
		// Another gateway sealed it first: its seal stands.
		recs, err := l.Records(ctx, tenant, stream)
		if err != nil {
			return nil, err
		}
		i := slices.IndexFunc(recs, func(r *DayRecord) bool { return r.day == d })
		if i < 0 {
			return nil, fmt.Errorf("seal %s/%s/%s: lost the race but no seal is stored", tenant, stream, d)
		}
		if recs[i].Start != rec.Start || recs[i].Size != rec.Size || !slices.Equal(recs[i].Frontier, rec.Frontier) {
			l.m.conflicts.Inc()
			return nil, fmt.Errorf("seal %s/%s/%s: the stored seal (%d..%d) differs from this gateway's (%d..%d): the gateways read different events",
				tenant, stream, d, recs[i].Start, recs[i].Size, rec.Start, rec.Size)
		}
		return recs[i], nil
	}
	l.m.sealed.Inc()
	l.m.sealedEvents.Add(float64(len(leaves)))
	l.m.sealSeconds.Observe(time.Since(start).Seconds())
	l.logger.Info("audit day sealed", "tenant", tenant, "stream", stream, "day", d.String(), "events", len(leaves), "size", f.Size)
	return rec, nil
}

// maxPresizedLeaves bounds the leaves a seal allocates room for up front
// (32 MiB of hashes); a larger day grows the slice.
const maxPresizedLeaves = 1 << 20

// dayParts reads the catalogue of a stream-day.
func dayParts(ctx context.Context, st reader.Store, tenant, stream string, d model.Day) ([]model.PartitionInfo, error) {
	return reader.Partitions(ctx, st, model.SeriesDay{Kind: model.KindAudit, Tenant: tenant, Series: stream, Day: d})
}

// eachEvent calls fn with the events of a stream-day in (ts, event_id)
// order.
func eachEvent(ctx context.Context, st reader.Store, tenant, stream string, d model.Day, fn func(*model.AuditEvent) error) error {
	return eachEventIn(ctx, st, tenant, stream, d.Start(), d.End(), fn)
}

// dayStreamer is what a store may offer to read whole stream-days fast:
// the events of some partitions merged in (ts, event_id) order, without
// the pages of the read API (pebblestore does).
type dayStreamer interface {
	EachAudit(ctx context.Context, parts []model.PartitionKey, r store.Range, fn func(*model.AuditEvent) error) error
}

// eachEventIn is eachEvent over the events of [from, to). fn may keep a
// copy of the event it is given, not the pointer; a string kept from many
// events should be cloned, as it may share a block with other events.
func eachEventIn(ctx context.Context, st reader.Store, tenant, stream string, from, to int64, fn func(*model.AuditEvent) error) error {
	if _, ok := st.(dayStreamer); !ok {
		return eachEventPaged(ctx, st, tenant, stream, from, to, fn)
	}
	for d := model.DayOf(from); d.Start() < to; d++ {
		infos, err := dayParts(ctx, st, tenant, stream, d)
		if err != nil {
			return fmt.Errorf("read events: %w", err)
		}
		if err := eachEventOfDayIn(ctx, st, tenant, stream, max(from, d.Start()), min(to, d.End()), infos, fn); err != nil {
			return err
		}
	}
	return nil
}

// eachEventOfDay is eachEvent on a day whose catalogue, infos, the caller
// has read.
func eachEventOfDay(ctx context.Context, st reader.Store, tenant, stream string, d model.Day, infos []model.PartitionInfo, fn func(*model.AuditEvent) error) error {
	return eachEventOfDayIn(ctx, st, tenant, stream, d.Start(), d.End(), infos, fn)
}

// eachEventOfDayIn calls fn with the events of [from, to), inside one day
// whose catalogue is infos: streamed from the partitions that overlap it
// on a dayStreamer, read in pages otherwise.
func eachEventOfDayIn(ctx context.Context, st reader.Store, tenant, stream string, from, to int64, infos []model.PartitionInfo, fn func(*model.AuditEvent) error) error {
	ds, ok := st.(dayStreamer)
	if !ok {
		return eachEventPaged(ctx, st, tenant, stream, from, to, fn)
	}
	var parts []model.PartitionKey
	for _, pi := range infos {
		if pi.Overlaps(from, to) {
			parts = append(parts, pi.Key)
		}
	}
	var fnErr error
	err := ds.EachAudit(ctx, parts, store.Range{From: from, To: to}, func(e *model.AuditEvent) error {
		fnErr = fn(e)
		return fnErr
	})
	if fnErr != nil {
		return fnErr
	}
	if err != nil {
		return fmt.Errorf("read events: %w", err)
	}
	return nil
}

// eachEventPaged is eachEventIn through the read API's pages.
func eachEventPaged(ctx context.Context, st reader.Store, tenant, stream string, from, to int64, fn func(*model.AuditEvent) error) error {
	q := reader.Query{Tenant: tenant, Series: stream, From: from, To: to, Limit: reader.MaxLimit}
	for {
		evs, next, err := reader.Audit(ctx, st, q)
		if err != nil {
			return fmt.Errorf("read events: %w", err)
		}
		for i := range evs {
			if err := fn(&evs[i]); err != nil {
				return err
			}
		}
		if next == "" {
			return nil
		}
		q.Cursor = next
	}
}

// LastSealable is the last day that may be sealed at now.
func (l *Log) LastSealable(now time.Time) model.Day {
	return model.DayOf(now.Add(-l.cfg.SealDelay).UnixMilli()) - 1
}

// SealDue seals every stream-day that is due and not sealed, day by day,
// oldest first, looking back Config.SealLookback. It returns the first
// error, after trying every stream.
func (l *Log) SealDue(ctx context.Context) error {
	now := l.now()
	last := l.LastSealable(now)
	from := max(l.done+1, model.DayOf(now.Add(-l.cfg.SealLookback).UnixMilli()))
	var errs []error
	failed := make(map[store.SeriesRef]bool)
	for d := from; d <= last; d++ {
		refs, err := l.st.AuditStreams(ctx, d)
		if err != nil {
			errs = append(errs, err)
			break
		}
		for _, ref := range refs {
			if failed[ref] {
				continue // its earlier day must be sealed first
			}
			if _, err := l.Seal(ctx, ref.Tenant, ref.Series, d); err != nil {
				if errors.Is(err, ErrLaterSealed) {
					l.logger.Warn("audit day left out of the log", "err", err)
					continue
				}
				failed[ref] = true
				l.m.errors.Inc()
				errs = append(errs, err)
			}
		}
		if len(errs) == 0 {
			l.done = d
		}
	}
	return errors.Join(errs...)
}

// Run seals due days at once and then every CheckpointInterval until ctx
// ends. Errors are logged; the next round retries.
func (l *Log) Run(ctx context.Context) {
	t := time.NewTicker(l.cfg.CheckpointInterval)
	defer t.Stop()
	for {
		if err := l.SealDue(ctx); err != nil && ctx.Err() == nil {
			l.logger.Error("seal audit days", "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// blockLevel is the level of the subtrees a seal keeps while it builds the
// day's tree (256 leaves): a proof's subtrees above it are then hashed from
// them rather than again from every leaf.
const blockLevel = 8

// blockHashes are the hashes of consecutive complete subtrees of
// 2^blockLevel leaves, the first of index first.
type blockHashes struct {
	first  int64
	hashes []tree.Hash
}

// node returns the hash of the subtree at (level, index) if the blocks
// cover it.
func (b *blockHashes) node(level int, index int64) (tree.Hash, bool) {
	if b == nil || level < blockLevel {
		return tree.Hash{}, false
	}
	lo := index << (level - blockLevel)
	hi := lo + 1<<(level-blockLevel)
	if lo < b.first || hi > b.first+int64(len(b.hashes)) {
		return tree.Hash{}, false
	}
	return tree.Subtree(b.hashes[lo-b.first : hi-b.first]), true
}

// nodes computes the hash of any complete subtree of a stream's tree from
// the seals' frontiers, the blocks kept by a seal and the leaves of the
// days.
type nodes struct {
	recs   []*DayRecord
	blocks *blockHashes // nil if none
	leaves func(*DayRecord) ([]tree.Hash, error)
	cache  map[*DayRecord][]tree.Hash
}

func (n *nodes) node(level int, index int64) (tree.Hash, error) {
	for _, r := range n.recs {
		f := r.frontier()
		if h, ok := f.Node(level, index); ok {
			return h, nil
		}
	}
	if h, ok := n.blocks.node(level, index); ok {
		return h, nil
	}
	lo := index << level
	hi := lo + 1<<level
	for _, r := range n.recs {
		if r.Start <= lo && hi <= r.Size {
			ls, err := n.dayLeaves(r)
			if err != nil {
				return tree.Hash{}, err
			}
			return tree.Subtree(ls[lo-r.Start : hi-r.Start]), nil
		}
	}
	if level == 0 {
		return tree.Hash{}, fmt.Errorf("leaf %d is in no day whose leaves are kept", lo)
	}
	left, err := n.node(level-1, 2*index)
	if err != nil {
		return tree.Hash{}, err
	}
	right, err := n.node(level-1, 2*index+1)
	if err != nil {
		return tree.Hash{}, err
	}
	return tlog.NodeHash(left, right), nil
}

func (n *nodes) dayLeaves(r *DayRecord) ([]tree.Hash, error) {
	if ls, ok := n.cache[r]; ok {
		return ls, nil
	}
	if r.DroppedAt != nil {
		return nil, fmt.Errorf("the events of %s were dropped by retention", r.Day)
	}
	ls, err := n.leaves(r)
	if err != nil {
		return nil, err
	}
	if int64(len(ls)) != r.Events() {
		return nil, fmt.Errorf("%s has %d stored leaves, its seal %d: run query audit verify", r.Day, len(ls), r.Events())
	}
	if n.cache == nil {
		n.cache = make(map[*DayRecord][]tree.Hash)
	}
	n.cache[r] = ls
	return ls, nil
}
