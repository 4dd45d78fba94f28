package readapi

import (
	"container/heap"
	"context"
	"errors"
	"net/http"

	"github.com/sluicehq/sluice/internal/hotparts"
	"github.com/sluicehq/sluice/internal/httpx"
	"github.com/sluicehq/sluice/internal/model"
	"github.com/sluicehq/sluice/internal/readparam"
	"github.com/sluicehq/sluice/internal/wire"
)

// Ranking a tenant's partitions of a day: GET /v1/partitions/top.

// PartitionLister is implemented by a store that lists the catalogue of a
// tenant's kind on a day without reading rows (pebblestore, cqlstore, and
// retention.Hide over them).
type PartitionLister interface {
	EachPartition(ctx context.Context, tenant string, kind model.Kind, day model.Day, fn func(model.PartitionInfo) error) error
}

// HottestFunc returns up to n of a tenant's partitions of kind on day that
// this gateway wrote fastest recently, fastest first (sink.Sink.Hottest).
type HottestFunc func(tenant string, kind model.Kind, day model.Day, n int) []hotparts.Rate

// WithHottest lets GET /v1/partitions/top rank by rate, from the gateway's
// own write counters. Without it (query --direct) by=rate is refused.
func WithHottest(fn HottestFunc) Option {
	return func(h *Handler) { h.hottest = fn }
}

// MaxTopLimit is the most partitions one ranking returns.
const MaxTopLimit = 100

// DefaultTopLimit is the ranking's length when the request names none.
const DefaultTopLimit = 10

// TopPartitions serves GET /v1/partitions/top?day=&by=rows|bytes|rate&limit=&kind=:
// the tenant's largest partitions of a day (by rows or bytes, from the
// catalogue: every entry of the tenant-day is read, no row), or the ones
// this gateway wrote fastest recently (by rate, from memory).
func (h *Handler) TopPartitions(w http.ResponseWriter, r *http.Request) {
	v := r.URL.Query()
	kind := model.KindReadings
	if s := v.Get("kind"); s != "" {
		k, err := model.ParseKind(s)
		if err != nil {
			h.fail(w, r, &readparam.Error{Param: "kind", Reason: err.Error()})
			return
		}
		kind = k
	}
	day := model.DayOf(h.now().UnixMilli())
	if s := v.Get("day"); s != "" {
		d, err := readparam.Day("day", s)
		if err != nil {
			h.fail(w, r, err)
			return
		}
		day = d
	}
	by := v.Get("by")
	switch by {
	case "":
		by = "rows"
	case "rows", "bytes":
	case "rate":
		if h.hottest == nil {
			h.fail(w, r, &readparam.Error{Param: "by", Reason: "rate is measured by a running gateway: ask it, not --direct"})
			return
		}
	default:
		h.fail(w, r, &readparam.Error{Param: "by", Reason: "must be rows, bytes or rate"})
		return
	}
	limit, err := readparam.Limit(v, "limit", DefaultTopLimit, MaxTopLimit)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	ctx, cancel := h.deadline(r)
	defer cancel()
	tenant := httpx.Tenant(r.Context())
	out := wire.TopPartitionsPage{Kind: kind.String(), Day: day.String(), By: by, Partitions: []wire.RankedPartition{}}
	if by == "rate" {
		err = h.topByRate(ctx, &out, tenant, kind, day, limit)
	} else {
		err = h.topBySize(ctx, &out, tenant, kind, day, limit, by == "bytes")
	}
	if err != nil {
		h.fail(w, r, err)
		return
	}
	for _, p := range out.Partitions {
		out.Unsettled = out.Unsettled || p.Ahead
	}
	httpx.JSON(w, http.StatusOK, out)
}

// topBySize ranks the tenant-day's catalogue, keeping only limit entries in
// memory however many there are.
func (h *Handler) topBySize(ctx context.Context, out *wire.TopPartitionsPage, tenant string, kind model.Kind, day model.Day, limit int, byBytes bool) error {
	l, ok := h.st.(PartitionLister)
	if !ok {
		return errors.New("this store cannot list a tenant-day's partitions")
	}
	size := func(p model.PartitionInfo) int64 {
		if byBytes {
			return p.Bytes
		}
		return p.Rows
	}
	top := &sizeHeap{size: size}
	err := l.EachPartition(ctx, tenant, kind, day, func(p model.PartitionInfo) error {
		if p.Rows == 0 {
			return nil // registered, nothing counted yet
		}
		if top.Len() < limit {
			heap.Push(top, p)
		} else if top.less(top.ps[0], p) {
			top.ps[0] = p
			heap.Fix(top, 0)
		}
		return nil
	})
	if err != nil {
		return err
	}
	ps := make([]model.PartitionInfo, top.Len())
	for i := len(ps) - 1; i >= 0; i-- {
		ps[i] = heap.Pop(top).(model.PartitionInfo)
	}
	h.settleRanked(ctx, ps)
	out.Partitions = make([]wire.RankedPartition, len(ps))
	for i, p := range ps {
		out.Partitions[i] = wire.RankedPartition{Partition: wire.PartitionOf(p)}
	}
	return nil
}

// settleRankedMax bounds the series-days one ranking asks the gateway to
// settle: each one the sink does not hold costs its flusher, which plans
// no writes meanwhile, a catalogue read and maybe recounts, so a tenant
// polling the ranking must not buy more than a few per call. The claims
// past it are listed as they are stored, marked ahead.
const settleRankedMax = 8

// settleRanked has the gateway settle the series-days of the ranked entries
// that are claims it settles itself (its own writer slot, see
// WithReconciles; at most settleRankedMax series-days, the highest ranked
// first), and replaces those entries with what the catalogue holds then:
// they become exact (and killed predecessors' of the slot are
// reconciled); other gateways' stay claims, marked. Only the listed
// series-days are settled, so a ranking does not force every busy
// partition of the gateway to write its entry again. The order stays the
// one the claims gave.
func (h *Handler) settleRanked(ctx context.Context, ps []model.PartitionInfo) {
	if h.settle == nil {
		return
	}
	var sds []model.SeriesDay
	seen := make(map[model.SeriesDay]bool)
	for _, p := range ps {
		if len(sds) == settleRankedMax {
			break
		}
		if !p.Ahead || h.reconciles != nil && !h.reconciles(p.Key.Sub) {
			continue
		}
		if sd := p.Key.SeriesDay(); !seen[sd] {
			seen[sd] = true
			sds = append(sds, sd)
		}
	}
	if len(sds) == 0 {
		return
	}
	if err := h.settle(ctx, sds...); err != nil {
		h.logger.Warn("partitions ranked unsettled: their counts may run ahead", "err", err)
		return
	}
	fresh := make(map[model.PartitionKey]model.PartitionInfo)
	for _, sd := range sds {
		parts, err := h.st.Catalogue(ctx, sd)
		if err != nil {
			h.logger.Warn("partitions ranked unsettled: their counts may run ahead", "series_day", sd, "err", err)
			return
		}
		for _, p := range parts {
			fresh[p.Key] = p
		}
	}
	for i, p := range ps {
		if f, ok := fresh[p.Key]; ok {
			ps[i] = f
		}
	}
}

// topByRate lists the gateway's hottest partitions of the tenant-day with
// their catalogue entries (one catalogue read per series-day listed).
func (h *Handler) topByRate(ctx context.Context, out *wire.TopPartitionsPage, tenant string, kind model.Kind, day model.Day, limit int) error {
	rates := h.hottest(tenant, kind, day, limit)
	entries := make(map[model.SeriesDay][]model.PartitionInfo)
	for _, rt := range rates {
		sd := rt.Key.SeriesDay()
		if _, ok := entries[sd]; ok {
			continue
		}
		parts, err := h.st.Catalogue(ctx, sd)
		if err != nil {
			return err
		}
		entries[sd] = parts
	}
	for _, rt := range rates {
		pi := model.PartitionInfo{Key: rt.Key}
		for _, p := range entries[rt.Key.SeriesDay()] {
			if p.Key == rt.Key {
				pi = p
			}
		}
		out.Partitions = append(out.Partitions, wire.RankedPartition{Partition: wire.PartitionOf(pi), RowsPerSecond: rt.RowsPerSecond})
	}
	return nil
}

// sizeHeap is a min-heap of catalogue entries by size, ties broken by key
// so that the ranking is stable.
type sizeHeap struct {
	ps   []model.PartitionInfo
	size func(model.PartitionInfo) int64
}

// less orders a before b when a ranks lower (smaller, or equal and later
// by series and sub-bucket).
func (h *sizeHeap) less(a, b model.PartitionInfo) bool {
	if sa, sb := h.size(a), h.size(b); sa != sb {
		return sa < sb
	}
	if a.Key.Series != b.Key.Series {
		return a.Key.Series > b.Key.Series
	}
	return a.Key.Sub > b.Key.Sub
}

func (h *sizeHeap) Len() int           { return len(h.ps) }
func (h *sizeHeap) Less(i, j int) bool { return h.less(h.ps[i], h.ps[j]) }
func (h *sizeHeap) Swap(i, j int)      { h.ps[i], h.ps[j] = h.ps[j], h.ps[i] }
func (h *sizeHeap) Push(x any)         { h.ps = append(h.ps, x.(model.PartitionInfo)) }
func (h *sizeHeap) Pop() any {
	p := h.ps[len(h.ps)-1]
	h.ps = h.ps[:len(h.ps)-1]
	return p
}
