package sink

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/sluicehq/sluice/internal/audit/canon"
	"github.com/sluicehq/sluice/internal/buckets"
	"github.com/sluicehq/sluice/internal/model"
	"github.com/sluicehq/sluice/internal/store"
)

// flusher collects, plans and hands batches to the committers. Between
// rounds it settles the catalogue entries of idle partitions, and it
// settles all of them before it stops.
func (s *Sink) flusher() {
	defer func() {
		close(s.commits)
		s.commitsWG.Wait()
		close(s.done)
	}()
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	tick := time.NewTicker(s.settleEvery)
	defer tick.Stop()
	for {
		var first *pending
		select {
		case p, ok := <-s.in:
			if !ok {
				s.settle(context.Background(), settleAll, nil, nil)
				return
			}
			first = p
		case <-tick.C:
			s.settle(context.Background(), settleLongIdle, nil, nil)
			continue
		case r := <-s.settleReq:
			s.settle(r.ctx, settleAll, r.sds, r.done)
			continue
		}
		group := []*pending{first}
		rows := first.rows
		open := true
		// Take what is already queued, without waiting.
	drain:
		for rows < s.cfg.BatchRows {
			select {
			case p, ok := <-s.in:
				if !ok {
					open = false
					break drain
				}
				group = append(group, p)
				rows += p.rows
			default:
				break drain
			}
		}
		// Then, when requests have been coming fast, wait a little for the
		// next ones (group commit)...
		s.group.arrived(time.Now(), len(group))
		if want := s.group.expected(); open && rows < s.cfg.BatchRows && len(group) < want && s.group.wait() && s.committing() {
			s.m.commitDelays.Inc()
			group, rows, open = s.gather(group, rows, timer, s.cfg.CommitDelay, s.cfg.CommitDelay/4, want)
		}
		// ...and up to Linger for more in any case.
		if open && rows < s.cfg.BatchRows && s.cfg.Linger > 0 {
			group, _, open = s.gather(group, rows, timer, s.cfg.Linger, 0, math.MaxInt)
		}
		s.plan(group)
		if s.planner.Over() && time.Since(s.settledEarly) >= s.settleEvery/earlySettles {
			// Series-days whose entries run ahead cannot be forgotten:
			// settle the ones idle since the last settle now, rather than
			// on the next tick, so that they can go once their entries
			// landed and the planner stays near buckets.max_series_days
			// however many devices write within a settle interval. Not
			// after every round: a settle makes "idle" mean "not written
			// since", and a partition settled while its device still
			// writes costs an exact entry now and one ahead again next.
			s.settledEarly = time.Now()
			s.settle(context.Background(), settleSince, nil, nil)
		}
		if !open {
			s.settle(context.Background(), settleAll, nil, nil)
			return
		}
	}
}

// takeFailed has the planner write again the entries of failed batches,
// and tells it which entries' commits finished.
func (s *Sink) takeFailed() {
	s.mu.Lock()
	if len(s.failed) == 0 && len(s.landed) == 0 {
		s.mu.Unlock()
		return
	}
	parts := make([]*buckets.Partition, 0, len(s.failed))
	for pt := range s.failed {
		parts = append(parts, pt)
	}
	clear(s.failed)
	landed := s.landed
	s.landed = nil
	s.mu.Unlock()
	s.planner.Unsave(parts)
	s.planner.Landed(landed)
	s.noteHeld() // Landed may have forgotten some
}

// plan places the rows of a group of requests and submits one batch.
func (s *Sink) plan(group []*pending) {
	ctx := context.Background()
	s.takeFailed()
	series, err := s.resolve(ctx, group)
	if err != nil {
		s.logger.Error("load partition catalogue", "err", err)
		for _, p := range group {
			s.finish(p, fmt.Errorf("load partition catalogue: %w", err))
		}
		return
	}
	dups, err := s.auditDuplicates(ctx, group)
	if err != nil {
		for _, p := range group {
			s.finish(p, err)
		}
		return
	}
	bt := &batch{}
	// Rows are placed request by request (a request whose rows cannot all
	// be placed fails alone), then copied into their partitions' writes,
	// each sized to fit in one allocation.
	n := 0
	for _, p := range group {
		n += len(p.req.Readings) + len(p.req.Audit)
	}
	all := make([]placed, 0, n)
	var ids []store.AuditID
	var dupOf []*batch
	for gi, p := range group {
		from := len(all)
		ids = ids[:0]
		dupOf = dupOf[:0]
		hs := series[gi]
		var err error
		for i := range p.req.Readings {
			r := &p.req.Readings[i]
			var size int64
			for _, m := range r.Metrics {
				size += model.ReadingRow{TS: r.TS, Metric: m.Name, Str: m.Str, HasSeq: r.HasSeq}.Size()
			}
			var pt *buckets.Partition
			if pt, err = s.planner.Place(hs[i], r.TS, int64(len(r.Metrics)), size); err != nil {
				break
			}
			all = append(all, placed{pt: pt, req: p.req, idx: int32(i), rows: int32(len(r.Metrics))})
		}
		for i := range p.req.Audit {
			if err != nil {
				break
			}
			e := &p.req.Audit[i]
			id := store.AuditID{Tenant: p.req.Tenant, Day: model.DayOf(e.TS), EventID: e.EventID}
			if d, dup := dups[id]; dup {
				if d.ev != nil && !canon.Equal(d.ev, e) {
					s.m.auditConflicts.Inc()
					err = &ConflictError{EventID: e.EventID, Stream: e.Stream}
					break
				}
				s.m.auditDuplicates.Inc()
				if d.bt != nil {
					dupOf = append(dupOf, d.bt)
				}
				continue
			}
			var pt *buckets.Partition
			if pt, err = s.planner.Place(hs[len(p.req.Readings)+i], e.TS, 1, e.Size()); err != nil {
				break
			}
			// A later copy in this group is a duplicate, stored by this batch.
			// Only marked once placed: a copy that failed to place is not stored.
			dups[id] = dup{ev: e}
			all = append(all, placed{pt: pt, req: p.req, idx: int32(i), rows: 1, audit: true})
			ids = append(ids, id)
		}
		if err != nil {
			// Counts of the rows already placed stay in the planner: they
			// overstate partition sizes, which keeps the bound safe.
			for _, id := range ids {
				delete(dups, id)
			}
			all = all[:from]
			var conflict *ConflictError
			if !errors.As(err, &conflict) {
				err = fmt.Errorf("place rows: %w", err)
			}
			s.finish(p, err)
			continue
		}
		for _, dl := range p.req.DeadLetters {
			dl.Tenant = p.req.Tenant
			bt.b.DeadLetters = append(bt.b.DeadLetters, dl)
		}
		bt.ids = append(bt.ids, ids...)
		for _, id := range ids {
			bt.events = append(bt.events, dups[id].ev)
		}
		if len(dupOf) > 0 {
			p.dupOf = append([]*batch(nil), dupOf...)
		}
		bt.waiters = append(bt.waiters, p)
	}
	parts := s.writes(bt, all)
	round := s.planner.Round() // the round TakeEntries ends
	entries := s.planner.TakeEntries(s.entries[:0])
	defer func() {
		// Kept for the next round, emptied: submit copied what it needs
		// into bt, and no partition or entry is held past the round.
		clear(entries)
		s.entries = entries[:0]
		clear(parts)
	}()
	s.m.entries.WithLabelValues("placed").Add(float64(len(entries)))
	for _, e := range entries {
		s.noteSplit(e.Info.Key)
	}
	s.observe(bt, entries)
	if len(bt.waiters) == 0 && len(entries) == 0 {
		return
	}
	s.submit(bt, entries, parts)
	if bt.claims {
		s.claimers = append(s.claimers, claimer{round: round, bt: bt})
	}
}

// placed is one placed reading (its rows) or audit event of a request.
type placed struct {
	pt    *buckets.Partition
	req   *Request
	idx   int32 // in req.Readings or req.Audit
	rows  int32
	audit bool
}

// writes fills bt's partition writes with the rows of all, grouped by
// partition in order of first appearance, and returns each partition's
// index in bt.b.Partitions, in the flusher's map, which plan empties at
// the end of the round. Every partition's rows are counted first, so that
// all readings of the batch share one allocation.
func (s *Sink) writes(bt *batch, all []placed) map[*buckets.Partition]int {
	if s.partIdx == nil {
		s.partIdx = make(map[*buckets.Partition]int, min(len(all), 1024))
	}
	parts := s.partIdx
	at := slices.Grow(s.rowPart[:0], len(all))[:len(all)] // partition index of each placed row
	s.rowPart = at
	var order []*buckets.Partition
	var counts []int32
	var readings, events int
	for i := range all {
		pl := &all[i]
		j, ok := parts[pl.pt]
		if !ok {
			j = len(order)
			parts[pl.pt] = j
			order = append(order, pl.pt)
			counts = append(counts, 0)
		}
		at[i] = int32(j)
		counts[j] += pl.rows
		if pl.audit {
			events++
		} else {
			readings += int(pl.rows)
		}
	}
	bt.b.Partitions = make([]store.PartitionWrite, len(order))
	for j, pt := range order {
		bt.b.Partitions[j].Key = pt.Key()
	}
	rows := make([]model.ReadingRow, readings)
	evs := make([]model.AuditEvent, events)
	for j := range bt.b.Partitions {
		pw := &bt.b.Partitions[j]
		n := int(counts[j])
		if pw.Key.Kind == model.KindAudit {
			pw.Events, evs = evs[:0:n], evs[n:]
		} else {
			pw.Readings, rows = rows[:0:n], rows[n:]
		}
	}
	for i := range all {
		pl := &all[i]
		pw := &bt.b.Partitions[at[i]]
		if pl.audit {
			pw.Events = append(pw.Events, pl.req.Audit[pl.idx])
		} else {
			pw.Readings = model.AppendReadingRows(pw.Readings, pl.req.Readings[pl.idx])
		}
	}
	if s.newMinutes {
		bt.claims = s.markNew(bt, order)
	}
	return parts
}

// submit registers a planned batch and hands it to a committer. written
// holds the partitions it writes rows to: those whose entry it does not
// carry rely on an entry in an earlier batch, still in flight (it then
// depends on that batch) or lost with a failed one (it then carries the
// entry again).
func (s *Sink) submit(bt *batch, entries []buckets.Entry, written map[*buckets.Partition]int) {
	carry := func(es []buckets.Entry) {
		bt.b.Catalogue = slices.Grow(bt.b.Catalogue, len(es))
		bt.entries = slices.Grow(bt.entries, len(es))
		marks := 0
		for _, e := range es {
			if e.Mark {
				marks++
			}
		}
		bt.b.Ahead = slices.Grow(bt.b.Ahead, marks)
		for _, e := range es {
			bt.b.Catalogue = append(bt.b.Catalogue, e.Info)
			bt.entries = append(bt.entries, e.Part)
			if e.Mark {
				bt.b.Ahead = append(bt.b.Ahead, e.Info.Key)
			}
		}
	}
	carry(entries)
	s.mu.Lock()
	// Nothing to rely on when no entry is in flight and none was lost.
	if len(s.catalogue) > 0 || len(s.failed) > 0 {
		carried := make(map[*buckets.Partition]struct{}, len(entries))
		for _, e := range entries {
			carried[e.Part] = struct{}{}
		}
		var lost []*buckets.Partition
		for pt := range written {
			if _, ok := carried[pt]; ok {
				continue
			}
			if prev, ok := s.catalogue[pt]; ok {
				if !slices.Contains(bt.deps, prev) {
					bt.deps = append(bt.deps, prev)
				}
			} else if _, ok := s.failed[pt]; ok {
				lost = append(lost, pt)
				delete(s.failed, pt) // written again here, not by the next round too
			}
		}
		carry(s.planner.Resave(lost))
	}
	bt.done = make(chan struct{})
	if s.versions != nil {
		bt.b.Version = s.versions.Version()
	}
	for i, id := range bt.ids {
		s.inflight[id] = dup{bt: bt, ev: bt.events[i]}
	}
	for _, pt := range bt.entries {
		if s.versions == nil {
			if prev, ok := s.catalogue[pt]; ok && !slices.Contains(bt.after, prev) {
				bt.after = append(bt.after, prev)
			}
		}
		s.catalogue[pt] = bt
	}
	s.flight[bt] = struct{}{}
	s.mu.Unlock()
	s.commits <- bt
}

// committing reports whether a batch is being committed: else the group's
// clients may be all there are, each waiting for its answer before it
// sends again, and waiting for more would only delay them.
func (s *Sink) committing() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.flight) > 0
}

// gather adds the requests that arrive within d to the group, until it
// holds Config.BatchRows rows or want requests, or, when gap is not zero,
// until no request came for gap; open is false once the input is closed.
// It notes the requests it took in the group commit's arrival rate.
func (s *Sink) gather(group []*pending, rows int, timer *time.Timer, d, gap time.Duration, want int) (_ []*pending, _ int, open bool) {
	n := len(group)
	defer func() { s.group.arrived(time.Now(), len(group)-n) }()
	deadline := time.Now().Add(d)
	next := d
	if gap > 0 {
		next = min(d, gap)
	}
	timer.Reset(next)
	defer timer.Stop()
	for rows < s.cfg.BatchRows && len(group) < want {
		select {
		case p, ok := <-s.in:
			if !ok {
				return group, rows, false
			}
			group = append(group, p)
			rows += p.rows
			if gap > 0 {
				left := time.Until(deadline)
				if left <= 0 {
					return group, rows, true
				}
				timer.Stop()
				timer.Reset(min(left, gap))
			}
		case <-timer.C:
			return group, rows, true
		}
	}
	return group, rows, true
}
