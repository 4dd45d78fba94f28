package sink

import (
	"context"
	"fmt"
	"slices"

	"golang.org/x/sync/errgroup"

	"github.com/sluicehq/sluice/internal/buckets"
	"github.com/sluicehq/sluice/internal/model"
)

// resolve returns the planner state of every series-day the group writes
// (per request: its readings', then its audit events'), loading the
// catalogue of those the planner does not hold.
func (s *Sink) resolve(ctx context.Context, group []*pending) ([][]*buckets.Series, error) {
	out := make([][]*buckets.Series, len(group))
	rs := &s.resolving
	defer rs.reset()
	need := func(sd model.SeriesDay, slot **buckets.Series) {
		var read bool
		*slot, read = s.planner.Resolve(sd)
		// A day the planner has not seen yet (Resolve then says read) is
		// looked up in the store once, before anything of it is placed.
		if read && s.planner.DayUnknown(sd.Day) {
			s.planner.SetDay(sd.Day, s.catalogueEmpty(ctx, sd.Day))
			*slot, read = s.planner.Resolve(sd)
		}
		if read {
			rs.add(sd, slot)
		}
	}
	for gi, p := range group {
		hs := make([]*buckets.Series, len(p.req.Readings)+len(p.req.Audit))
		for i := range p.req.Readings {
			r := &p.req.Readings[i]
			day := model.DayOf(r.TS)
			// A device's readings mostly come together (an MQTT message).
			if prev := i - 1; prev >= 0 && hs[prev] != nil && r.DeviceID == p.req.Readings[prev].DeviceID && day == model.DayOf(p.req.Readings[prev].TS) {
				hs[i] = hs[prev]
				continue
			}
			need(model.SeriesDay{Kind: model.KindReadings, Tenant: p.req.Tenant, Series: r.DeviceID, Day: day}, &hs[i])
		}
		for i := range p.req.Audit {
			e := &p.req.Audit[i]
			need(model.SeriesDay{Kind: model.KindAudit, Tenant: p.req.Tenant, Series: e.Stream, Day: model.DayOf(e.TS)}, &hs[len(p.req.Readings)+i])
		}
		out[gi] = hs
	}
	if len(rs.missing) == 0 {
		s.noteHeld()
		return out, nil
	}
	hs, err := s.load(ctx, rs.missing, false)
	if err != nil {
		return nil, err
	}
	for _, f := range rs.fills {
		*f.slot = hs[f.i]
	}
	return out, nil
}

// resolving is what resolve collects of a round's series-days the planner
// does not hold: each once in missing (index maps it to its place there),
// and every slot to fill with its state once missing is loaded. One map
// entry a series-day missing, no allocation for each (with a million
// devices a day, nearly every one is missing); the map and slices are the
// flusher's, kept from round to round, emptied (grown anew every round,
// they were a sixth of the gateway's allocations at a million devices).
type resolving struct {
	index   map[model.SeriesDay]int
	missing []model.SeriesDay
	fills   []fill
}

// fill is a slot resolve fills once missing is loaded, with its
// series-day's index in missing.
type fill struct {
	slot **buckets.Series
	i    int
}

// maxResolving bounds the series-days of a round whose room resolving
// keeps: past it (a round of unusually many, at midnight UTC or after a
// restart), the map and slices go, rather than every later round clearing
// a map sized for that peak.
const maxResolving = 1 << 14

// add notes that slot is to be filled with the state of sd, once loaded.
func (rs *resolving) add(sd model.SeriesDay, slot **buckets.Series) {
	if rs.index == nil {
		rs.index = make(map[model.SeriesDay]int)
	}
	i, ok := rs.index[sd]
	if !ok {
		i = len(rs.missing)
		rs.index[sd] = i
		rs.missing = append(rs.missing, sd)
	}
	rs.fills = append(rs.fills, fill{slot, i})
}

// reset empties rs, keeping its room up to maxResolving, and drops what it
// pointed to.
func (rs *resolving) reset() {
	if len(rs.missing) > maxResolving {
		*rs = resolving{}
		return
	}
	clear(rs.index)
	clear(rs.missing)
	clear(rs.fills)
	rs.missing, rs.fills = rs.missing[:0], rs.fills[:0]
}

// load reads the catalogues of series-days the planner does not hold,
// installs them in the planner and reconciles the entries an earlier run
// left ahead. It returns their states, in the order of missing. With
// onlyAhead, a series-day without an entry to reconcile is not installed
// (its state is nil).
//
// No commit in flight carries an entry of a series-day the planner does
// not hold, so the catalogue read is never behind the planner's last
// word: the planner forgets a series-day only once every entry it handed
// out for it was reported Landed (buckets.Planner.Landed), and the
// committer reports a batch's entries landed in the same critical section
// that takes the batch out of flight, after its commit returned. The
// sink's tests check it (WithInFlightCheck).
func (s *Sink) load(ctx context.Context, missing []model.SeriesDay, onlyAhead bool) ([]*buckets.Series, error) {
	if s.checkInFlight {
		s.mustNotBeInFlight(missing)
	}
	loaded, err := s.catalogues(ctx, missing)
	if err != nil {
		return nil, err
	}
	s.m.catalogueReads.Add(float64(len(missing)))
	hs := make([]*buckets.Series, len(missing))
	for i, sd := range missing {
		if onlyAhead && !slices.ContainsFunc(loaded[i], func(pi model.PartitionInfo) bool {
			return pi.Ahead && s.planner.Reconciles(pi.Key.Sub)
		}) {
			loaded[i] = nil
			continue
		}
		for _, pi := range loaded[i] {
			s.noteSplit(pi.Key)
			if pi.Rows > s.bcfg.MaxRows || pi.Bytes > s.bcfg.MaxBytes {
				s.m.overBound.Inc()
				s.logger.Warn("catalogue entry past the partition bound",
					"partition", pi.Key.String(), "rows", pi.Rows, "bytes", pi.Bytes,
					"max_rows", s.bcfg.MaxRows, "max_bytes", s.bcfg.MaxBytes)
			}
		}
		hs[i] = s.planner.Load(sd, loaded[i])
	}
	s.noteHeld()
	if err := s.reconcile(ctx, hs, loaded); err != nil {
		for i, sd := range missing {
			if hs[i] != nil {
				s.planner.Unload(sd) // loaded again, and reconciled, next time
			}
		}
		return nil, err
	}
	return hs, nil
}

// splitWarnAt is the split sequence number at which a series-day is logged
// as near its limit (the alert SluiceSeriesDayNearSplitLimit fires past
// it).
const splitWarnAt = buckets.MaxSplits * 8 / 10

// splitDays holds the largest split sequence number of this writer on the
// newest UTC day seen (top[0]) and on the day before it (top[1]). Two
// fields, not a map by day: the flusher notes every entry of every round.
type splitDays struct {
	newest model.Day
	seen   bool
	top    [2]int
}

// note records split number n on day d and returns the largest number of
// the two days it keeps; a day before them is ignored (ok false).
func (sp *splitDays) note(d model.Day, n int) (top int, ok bool) {
	switch {
	case !sp.seen || d-sp.newest >= 2:
		sp.newest, sp.seen, sp.top = d, true, [2]int{}
	case d > sp.newest:
		sp.newest, sp.top = d, [2]int{0, sp.top[0]}
	case d < sp.newest-1:
		return 0, false
	}
	i := sp.newest - d
	sp.top[i] = max(sp.top[i], n)
	return max(sp.top[0], sp.top[1]), true
}

// noteSplit updates sluice_buckets_split_partitions_max with a partition
// this gateway placed rows in or loaded. The gauge is the largest split
// sequence number of this writer over the two newest UTC days seen (older
// days fall out as new ones arrive; a day is kept beside the newest so that
// a device running ahead of the clock does not hide today). Only the
// flusher calls it.
func (s *Sink) noteSplit(k model.PartitionKey) {
	n := 0
	if w, seq, ok := buckets.SplitSeq(k.Sub); ok && int(w) == s.bcfg.Writer {
		n = seq
	}
	top, ok := s.splits.note(k.Day, n)
	if !ok {
		return
	}
	if n == splitWarnAt {
		s.logger.Warn("series-day near its split partition limit: its rows will be refused past the limit",
			"partition", k.String(), "splits", n, "limit", buckets.MaxSplits)
	}
	s.m.splitsMax.Set(float64(top))
}

// noteHeld updates the gauges of the series-days the planner holds and
// remembers.
func (s *Sink) noteHeld() {
	s.m.seriesDays.Set(float64(s.planner.Len()))
	s.m.settled.Set(float64(s.planner.Settled()))
}

// catalogueEmpty reports whether the store holds no catalogue entry of day
// d; false when it cannot tell.
func (s *Sink) catalogueEmpty(ctx context.Context, d model.Day) bool {
	cd, ok := s.st.(CatalogueDays)
	if !ok {
		return false
	}
	empty, err := cd.CatalogueEmpty(ctx, d)
	if err != nil {
		s.logger.Warn("could not tell whether a day has catalogue entries: its series-days' catalogues are read on every reload",
			"day", d.String(), "err", err)
		return false
	}
	return empty
}

// catalogues reads the catalogues of sds, in one call when the store is a
// CatalogueLoader, else one call per series-day, catalogueLoads at a time.
func (s *Sink) catalogues(ctx context.Context, sds []model.SeriesDay) ([][]model.PartitionInfo, error) {
	if l, ok := s.st.(CatalogueLoader); ok {
		out, err := l.Catalogues(ctx, sds)
		if err == nil && len(out) != len(sds) {
			err = fmt.Errorf("store returned %d catalogues for %d series-days", len(out), len(sds))
		}
		return out, err
	}
	out := make([][]model.PartitionInfo, len(sds))
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(catalogueLoads)
	for i, sd := range sds {
		g.Go(func() error {
			parts, err := s.st.Catalogue(gctx, sd)
			out[i] = parts
			return err
		})
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	return out, nil
}
