package sink

import (
	"sync/atomic"
	"time"
)

// saturation tracks since when the pipeline has been refusing writes: set
// by the first refusal, cleared by the next admission or once a batch's
// worth of room is free again (so that a gateway that clients stopped
// writing to, because it said it was not ready, does not stay saturated).
type saturation struct {
	since atomic.Int64 // unix nanoseconds of the first refusal; 0: not saturated
}

func (s *saturation) refused(now time.Time) { s.since.CompareAndSwap(0, now.UnixNano()) }

func (s *saturation) admitted() {
	if s.since.Load() != 0 {
		s.since.Store(0)
	}
}

// Saturated reports how long the pipeline has been full: admission has
// refused writes (sink.queue_rows rows waiting) since then without room
// for sink.batch_rows more rows. 0 when it is not.
func (s *Sink) Saturated(now time.Time) time.Duration {
	since := s.sat.since.Load()
	if since == 0 {
		return 0
	}
	// The budget has no read-only view: the check holds a batch's room for
	// an instant, and only while the pipeline already refuses writes.
	probe := int64(min(s.cfg.BatchRows, s.cfg.QueueRows))
	if s.budget.TryAcquire(probe) {
		s.budget.Release(probe)
		s.sat.since.CompareAndSwap(since, 0)
		return 0
	}
	return max(now.Sub(time.Unix(0, since)), time.Nanosecond)
}
