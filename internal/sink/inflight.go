package sink

import (
	"fmt"

	"github.com/sluicehq/sluice/internal/model"
)

// WithInFlightCheck makes the sink check, before every catalogue read of
// series-days the planner does not hold, that no batch in flight carries
// an entry of one of them, and panic if one does: the read would then miss
// that entry, and the planner would go on from a stale count (see load).
// It is for tests; it costs a pass over every entry in flight per round.
func WithInFlightCheck() Option {
	return func(s *Sink) { s.checkInFlight = true }
}

// mustNotBeInFlight panics if a batch in flight carries a catalogue entry
// of one of sds (WithInFlightCheck).
func (s *Sink) mustNotBeInFlight(sds []model.SeriesDay) {
	want := make(map[model.SeriesDay]struct{}, len(sds))
	for _, sd := range sds {
		want[sd] = struct{}{}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for bt := range s.flight {
		for _, pi := range bt.b.Catalogue {
			if _, ok := want[pi.Key.SeriesDay()]; ok {
				panic(fmt.Sprintf("sink: catalogue of %v loaded while a batch in flight carries its entry %v", pi.Key.SeriesDay(), pi.Key))
			}
		}
	}
}
