package sink

import (
	"context"
	"fmt"
	"time"

	"github.com/sluicehq/sluice/internal/model"
)

// committer commits the batches the flusher submits, one at a time, and
// answers their requests; Config.Commits of them run at once.
func (s *Sink) committer() {
	for bt := range s.commits {
		// An earlier batch in flight carries an older copy of one of this
		// batch's catalogue entries: let it land first. It is already with a
		// committer (the hand-off is unbuffered), so this never deadlocks.
		for _, prev := range bt.after {
			<-prev.done
		}
		// Rows that rely on another batch's catalogue entry are committed only
		// once that entry is stored: else a crash between the two would leave
		// rows that no entry covers (and a partition past its bound once its
		// series-day is reloaded).
		err := depsResult(bt)
		rows := bt.b.Rows()
		hooked := false
		if err == nil && s.hook != nil {
			if err = s.hook.BeforeCommit(&bt.b); err != nil {
				s.m.commitErrors.Inc()
				s.logger.Error("mark batch for the rollups; not committed", "rows", rows, "requests", len(bt.waiters), "err", err)
				err = fmt.Errorf("mark for rollups: %w", err)
			} else {
				hooked = true
			}
		}
		if err == nil {
			start := time.Now()
			if err = s.st.Commit(context.Background(), &bt.b); err != nil {
				s.m.commitErrors.Inc()
				s.logger.Error("commit batch", "rows", rows, "requests", len(bt.waiters), "err", err)
				err = fmt.Errorf("commit: %w", err)
			}
			s.m.commitSeconds.Observe(time.Since(start).Seconds())
			s.m.batchRows.Observe(float64(rows))
		}
		if err == nil {
			s.m.commits.Inc()
			var readings, events int
			for _, pw := range bt.b.Partitions {
				readings += len(pw.Readings)
				events += len(pw.Events)
			}
			if readings > 0 {
				s.m.rows.WithLabelValues(model.KindReadings.String()).Add(float64(readings))
			}
			if events > 0 {
				s.m.rows.WithLabelValues(model.KindAudit.String()).Add(float64(events))
			}
		}
		s.mu.Lock()
		for _, id := range bt.ids {
			if s.inflight[id].bt == bt {
				delete(s.inflight, id)
			}
		}
		for _, pt := range bt.entries {
			if s.catalogue[pt] == bt {
				delete(s.catalogue, pt)
			}
			if err != nil {
				s.failed[pt] = struct{}{}
			}
		}
		s.landed = append(s.landed, bt.entries...)
		delete(s.flight, bt)
		s.mu.Unlock()
		// The hook hears of the commit before its requests are answered, so
		// that a write that returned is already in the hook's hands (the
		// rollups' pending minutes, with their due time from the commit),
		// and before the batches waiting for this one go on
		// (WithNewMinutes).
		if hooked {
			s.hook.AfterCommit(&bt.b, err)
		}
		bt.err = err
		close(bt.done)
		for _, p := range bt.waiters {
			s.finish(p, dupResult(p, err))
		}
	}
}

// depsResult waits for the batches that carry catalogue entries this one
// relies on, and fails if one of them failed: its rows would then be
// stored where no reader finds them. Those batches are earlier ones,
// already with a committer, so waiting never deadlocks.
func depsResult(bt *batch) error {
	for _, d := range bt.deps {
		<-d.done
		if d.err != nil {
			return fmt.Errorf("catalogue entry in a concurrent commit not stored: %w", d.err)
		}
	}
	return nil
}

// dupResult is the answer to a request of a batch that committed with err:
// if err is nil, the request still fails when a batch holding an audit event
// it skipped as a duplicate failed, since that event is then not stored.
func dupResult(p *pending, err error) error {
	if err != nil {
		return err
	}
	for _, d := range p.dupOf {
		<-d.done
		if d.err != nil {
			return fmt.Errorf("audit event with the same event_id in a concurrent request not stored: %w", d.err)
		}
	}
	return nil
}

func (s *Sink) finish(p *pending, err error) {
	s.m.queued.Sub(float64(p.rows))
	s.budget.Release(p.weight)
	p.done <- err
}
