package rollup

import (
	"math"
	"slices"
	"strings"

	"github.com/sluicehq/sluice/internal/model"
)

// Builder folds the values of one device, in time order, into one row per
// (metric, minute), appended to a slice: what Compute does with readings,
// for a caller that has values one at a time (a recompute streaming a
// device's cells out of the raw store, with no readings built).
type Builder struct {
	out            []Row
	base, start    int   // the first row of the builder, of the current minute
	minute         int64 // the current minute
	tenant, device string
	version        uint64
}

// NewBuilder starts rows of tenant's device with the given version,
// appended to dst (which it leaves as it is up to its length).
func NewBuilder(dst []Row, tenant, device string, version uint64) Builder {
	return Builder{out: dst, base: len(dst), start: len(dst), minute: math.MinInt64, tenant: tenant, device: device, version: version}
}

// Add folds value mt, taken at ts, in. Values must come in time order
// (ties in any order); one timestamp's values must have distinct names.
func (b *Builder) Add(ts int64, mt *model.Metric) {
	if m := MinuteOf(ts); m != b.minute {
		b.sortMinute()
		b.start, b.minute = len(b.out), m
	}
	i := b.start
	for i < len(b.out) && b.out[i].Metric != mt.Name {
		i++
	}
	if i == len(b.out) {
		b.out = append(b.out, Row{Key: Key{Tenant: b.tenant, Device: b.device, Metric: mt.Name, Minute: b.minute},
			Writer: RebuildWriter, Version: b.version, Min: math.Inf(1), Max: math.Inf(-1), FirstTS: noFloat})
	}
	row := &b.out[i]
	switch mt.Type {
	case model.TypeInt:
		row.addInt(ts, mt.Int)
	case model.TypeBool:
		row.addBool(ts, mt.Int != 0)
	case model.TypeString:
		row.addStr(ts, mt.Str)
	default:
		v := mt.Value
		if row.FirstTS == noFloat {
			row.FirstTS, row.FirstValue = ts, v
		}
		row.Sum += v
		row.Min = min(row.Min, v)
		row.Max = max(row.Max, v)
		row.LastTS, row.LastValue = ts, v
	}
	row.Count++
}

// Grow makes room for n more rows.
func (b *Builder) Grow(n int) { b.out = slices.Grow(b.out, n) }

// Rows ends the builder and returns dst with its rows appended: by minute,
// then metric.
func (b *Builder) Rows() []Row {
	b.sortMinute()
	for i := b.base; i < len(b.out); i++ {
		if r := &b.out[i]; r.FirstTS == noFloat { // no float values: their fields are zero
			r.Min, r.Max, r.FirstTS = 0, 0, 0
		}
	}
	return b.out
}

func (b *Builder) sortMinute() {
	slices.SortFunc(b.out[b.start:], func(x, y Row) int { return strings.Compare(x.Metric, y.Metric) })
}

// Discard ends the builder without its rows: it returns dst as it was
// (possibly grown), the rows it had appended cleared.
func (b *Builder) Discard() []Row {
	clear(b.out[b.base:])
	return b.out[:b.base]
}
