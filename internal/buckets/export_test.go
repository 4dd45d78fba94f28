package buckets

import (
	"fmt"

	"github.com/sluicehq/sluice/internal/model"
)

// EvictChecks returns how many series-days eviction has looked at.
func (p *Planner) EvictChecks() uint64 { return p.checked }

// The calls below are the planner's API by series-day key, for the tests;
// the sink uses the handles (Lookup, Load, Place, TakeEntries).

// Known reports whether the series-day's catalogue is loaded.
func (p *Planner) Known(sd model.SeriesDay) bool {
	return p.days.get(sd) != nil
}

// Assign is Place for a series-day given by its key, returning the key of
// the partition.
func (p *Planner) Assign(sd model.SeriesDay, ts int64, rows, bytes int64) (model.PartitionKey, error) {
	s := p.days.get(sd)
	if s == nil {
		return model.PartitionKey{}, fmt.Errorf("series-day %v not loaded", sd)
	}
	pt, err := p.Place(s, ts, rows, bytes)
	if err != nil {
		return model.PartitionKey{}, err
	}
	return pt.info.Key, nil
}

// TakeDirty is TakeEntries without the partitions.
func (p *Planner) TakeDirty() []model.PartitionInfo {
	es := p.TakeEntries(nil)
	out := make([]model.PartitionInfo, len(es))
	for i, e := range es {
		out[i] = e.Info
	}
	return out
}

// Forget drops a series-day from memory.
// Entries already queued for it are still handed out by TakeEntries.
func (p *Planner) Forget(sd model.SeriesDay) { p.Unload(sd) }

// SettledSweeps returns how often the remembered records were swept to
// clear a day's.
func (p *Planner) SettledSweeps() int { return p.settled.sweeps }

// Infos returns what the planner holds of each partition of s.
func (s *Series) Infos() []model.PartitionInfo {
	var out []model.PartitionInfo // nil when none, as a catalogue read
	for _, pt := range s.parts {
		out = append(out, pt.info)
	}
	return out
}
