package sink

import (
	"fmt"

	"github.com/sluicehq/sluice/internal/model"
)

// checkInFlight makes load check, before every catalogue read, that no
// batch in flight carries an entry of a series-day it is about to read
// (see load). The sink's tests set it; it costs a pass over every entry in
// flight per round.
var checkInFlight bool

// notInFlight panics if a batch in flight carries a catalogue entry of one
// of sds: the catalogue read would then miss it, and the planner would go
// on from a stale count.
func (s *Sink) notInFlight(sds []model.SeriesDay) {
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
