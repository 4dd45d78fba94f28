package sink

import (
	"context"

	"github.com/sluicehq/sluice/internal/buckets"
	"github.com/sluicehq/sluice/internal/model"
)

// settleRequest asks the flusher to settle the entries of sds (all when
// sds is empty) and to send the result to done.
type settleRequest struct {
	ctx  context.Context
	sds  []model.SeriesDay
	done chan error
}

// Settle makes the catalogue entries of the partitions of sds (of every
// partition written so far when sds is empty) exact, durably (see
// buckets.Planner.Settle), and returns once they are. The partitions
// listing calls it for the series-day it lists, so that it shows exact
// counts. The catalogue reads and recounts it has the flusher do for
// series-days the planner does not hold stop when ctx ends, so that a
// reader's deadline also bounds the time the flusher plans no writes.
func (s *Sink) Settle(ctx context.Context, sds ...model.SeriesDay) error {
	done := make(chan error, 1)
	select {
	case s.settleReq <- settleRequest{ctx, sds, done}:
	case <-s.done:
		return ErrClosed
	case <-ctx.Done():
		return ctx.Err()
	}
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// settleWhich says which partitions ahead of their entries a settle makes
// exact.
type settleWhich int

const (
	settleAll      settleWhich = iota // every one (or those of the series-days asked)
	settleSince                       // those without a row since the last settle
	settleLongIdle                    // those without a row for settleIdleTicks intervals
)

// settleIdleTicks is how many settle intervals a partition must go without
// a row before the sink's timer settles its claim (10 minutes at the
// default interval): a device that reports at least that often keeps one
// claim for its day instead of paying a settle and a new claim per report.
const settleIdleTicks = 20

// settle commits exact catalogue entries for the partitions whose entry is
// ahead of them: those of sds if any are given, else those which says.
// done, if set, gets the result. ctx bounds the catalogue reads and
// recounts of series-days the planner does not hold (see Settle).
func (s *Sink) settle(ctx context.Context, which settleWhich, sds []model.SeriesDay, done chan error) {
	s.takeFailed()
	var entries []buckets.Entry
	if len(sds) > 0 {
		// A series-day not held may have entries left ahead by an earlier
		// run: load it (which reconciles them) so that they settle too.
		var missing []model.SeriesDay
		seen := make(map[model.SeriesDay]struct{})
		for _, sd := range sds {
			if _, dup := seen[sd]; dup || s.planner.Lookup(sd) != nil {
				continue
			}
			seen[sd] = struct{}{}
			missing = append(missing, sd) // read once each
		}
		if len(missing) > 0 {
			// Only series-days with entries to reconcile are kept: a listing
			// is not a write round, and must not grow the planner.
			if _, err := s.load(ctx, missing, true); err != nil {
				if ctx.Err() != nil {
					// The reader gave up (read.timeout, or gone): its
					// series-days settle on a later listing or write.
					s.logger.Warn("settle for a listing stopped: its reader gave up", "err", err)
				} else {
					s.logger.Error("load partition catalogue", "err", err)
				}
				if done != nil {
					done <- err
				}
				return
			}
		}
		entries = s.planner.SettleSeries(sds)
	} else if which == settleLongIdle {
		entries = s.planner.SettleIdle(settleIdleTicks)
	} else {
		entries = s.planner.Settle(which == settleAll)
	}
	if len(entries) == 0 {
		if done != nil {
			done <- nil
		}
		return
	}
	s.m.entries.WithLabelValues("settled").Add(float64(len(entries)))
	bt := &batch{}
	s.submit(bt, entries, nil)
	if done != nil {
		go func() {
			<-bt.done
			done <- bt.err
		}()
	}
}
