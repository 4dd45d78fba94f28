package sink

import (
	"math"
	"slices"

	"github.com/sluicehq/sluice/internal/buckets"
	"github.com/sluicehq/sluice/internal/model"
	"github.com/sluicehq/sluice/internal/rollup"
)

// WithNewMinutes has the sink tell its commit hook which minutes of a
// batch's readings no earlier batch wrote to (store.PartitionWrite.NewFrom),
// and keep that true while the batch is in flight: a later batch that
// writes a reading of a series-day in a minute an earlier batch in flight
// claimed as new is committed only once that batch's commit and the
// hook's AfterCommit for it returned. The rollups then sum a device-minute
// that one commit wrote whole from that commit's rows, without reading
// the store back. Only for a store that this gateway alone writes (the
// embedded store): the planner knows nothing of another gateway's rows.
func WithNewMinutes() Option {
	return func(s *Sink) { s.newMinutes = true }
}

// claimer is a batch that claimed new minutes, and the planner's round
// it was planned in.
type claimer struct {
	round uint64
	bt    *batch
}

// newFrom returns the start of the first minute after before, the latest
// timestamp a series-day held (math.MinInt64: none), or 0 when that would
// overflow or be 0 itself (0 means "nothing is new").
func newFrom(before int64) int64 {
	if before == math.MinInt64 {
		return math.MinInt64
	}
	if before > math.MaxInt64-rollup.MinuteMillis {
		return 0
	}
	if m := rollup.MinuteOf(before) + rollup.MinuteMillis; m != 0 {
		return m
	}
	return 1 // conservative: minute 0 is not claimed
}

// markNew sets the NewFrom of bt's readings partitions (order holds their
// planner partitions, in bt.b.Partitions' order) and has bt wait for the
// batches in flight that claimed minutes it writes to. A series-day the
// round wrote to through more than one partition (one closed in the
// round) gets none: the minutes of each would be only part of the
// store's. It reports whether bt claims new minutes.
//
// What a batch claimed is noted with the series-day's planner state
// (buckets.Series.SetClaim): the last claiming round, and the first
// minute claimed by the claimers that may still be in flight. A state
// loaded since the oldest claimer in flight (its series-day was evicted
// and read again) has lost its note: a batch writing to it before its
// NewFrom then waits for every claimer planned before the load.
func (s *Sink) markNew(bt *batch, order []*buckets.Partition) (claimed bool) {
	s.pruneClaimers()
	oldest := uint64(math.MaxUint64)
	if len(s.claimers) > 0 {
		oldest = s.claimers[0].round
	}
	round := s.planner.Round()
	var waitTo uint64 // for the claimers of rounds up to it
	for j, pt := range order {
		pw := &bt.b.Partitions[j]
		if pw.Key.Kind != model.KindReadings || len(pw.Readings) == 0 {
			continue
		}
		before, whole := pt.Before()
		if whole {
			pw.NewFrom = newFrom(before)
		}
		lo, hi := minuteSpan(pw.Readings)
		// Only its readings before NewFrom can be in minutes claimed: the
		// claims are of minutes before the latest timestamp placed.
		old := hi // the last minute of its readings before NewFrom
		switch pw.NewFrom {
		case 0:
		case math.MinInt64:
			old = math.MinInt64 // none: lo is above
		default:
			old = min(hi, pw.NewFrom-1)
		}
		sr := pt.Series()
		cr, from := sr.Claim()
		inFlight := cr >= oldest
		if inFlight && lo <= old && old >= from {
			waitTo = max(waitTo, cr)
		}
		if pw.NewFrom == 0 || hi < pw.NewFrom {
			continue
		}
		first := max(lo, pw.NewFrom)
		if inFlight {
			first = min(first, from)
		}
		sr.SetClaim(round, first)
		claimed = true
	}
	for _, c := range s.claimers {
		if c.round > waitTo {
			break
		}
		if !finished(c.bt) && !slices.Contains(bt.after, c.bt) {
			bt.after = append(bt.after, c.bt)
		}
	}
	return claimed
}

// minuteSpan returns the starts of the first and the last minute of rows.
func minuteSpan(rows []model.ReadingRow) (lo, hi int64) {
	lo, hi = math.MaxInt64, math.MinInt64
	for i := range rows {
		lo, hi = min(lo, rows[i].TS), max(hi, rows[i].TS)
	}
	return rollup.MinuteOf(lo), rollup.MinuteOf(hi)
}

// pruneClaimers forgets the claimers that finished, oldest first, up to
// the first still in flight: batches finish about in the order they were
// planned (and at most sink.commits + 1 are in flight).
func (s *Sink) pruneClaimers() {
	n := 0
	for n < len(s.claimers) && finished(s.claimers[n].bt) {
		n++
	}
	if n > 0 {
		rest := copy(s.claimers, s.claimers[n:])
		clear(s.claimers[rest:])
		s.claimers = s.claimers[:rest]
	}
}

// finished reports whether bt's commit, and its hook's AfterCommit, are
// done.
func finished(bt *batch) bool {
	select {
	case <-bt.done:
		return true
	default:
		return false
	}
}
