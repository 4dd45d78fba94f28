package rollupapi

import (
	"encoding/json"
	"math"

	"github.com/sluicehq/sluice/internal/rollup"
	"github.com/sluicehq/sluice/internal/wire"
)

func ptr[T any](v T) *T { return &v }

// finite returns f, or nil for NaN and infinities, which JSON cannot hold.
func finite(f float64) *float64 {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return nil
	}
	return &f
}

// BucketOf is the JSON form of a bucket: each type's aggregates only when
// it has values of that type.
func BucketOf(b rollup.Bucket) Bucket {
	out := Bucket{Start: ts(b.Start), Count: b.Count, Mean: finite(b.Mean())}
	if fc := b.FloatCount(); fc > 0 {
		out.FloatCount, out.Sum, out.Min, out.Max = fc, finite(b.Sum), finite(b.Min), finite(b.Max)
	}
	if m, t, ok := b.First(); ok {
		out.First, out.FirstTS = ptr(wire.Value(m)), ts(t)
	}
	if m, t, ok := b.Last(); ok {
		out.Last, out.LastTS = ptr(wire.Value(m)), ts(t)
	}
	if b.IntCount > 0 {
		out.IntCount, out.IntSum, out.IntMin, out.IntMax = b.IntCount, json.Number(b.IntSum.String()), ptr(b.IntMin), ptr(b.IntMax)
		out.IntFirst, out.IntFirstTS, out.IntLast, out.IntLastTS = ptr(b.IntFirst), ts(b.IntFirstTS), ptr(b.IntLast), ts(b.IntLastTS)
	}
	if b.BoolCount > 0 {
		out.BoolCount, out.TrueCount = b.BoolCount, ptr(b.TrueCount)
		out.BoolFirst, out.BoolFirstTS, out.BoolLast, out.BoolLastTS = ptr(b.BoolFirst), ts(b.BoolFirstTS), ptr(b.BoolLast), ts(b.BoolLastTS)
	}
	if b.StrCount > 0 {
		out.StrCount = b.StrCount
		out.StrFirst, out.StrFirstTS, out.StrLast, out.StrLastTS = ptr(b.StrFirst), ts(b.StrFirstTS), ptr(b.StrLast), ts(b.StrLastTS)
	}
	return out
}

// RankOf is the JSON form of a rank.
func RankOf(k rollup.Rank) Rank {
	out := Rank{Device: k.Device, Value: k.Value, Count: k.Count, Mean: finite(k.Mean), Max: finite(k.Max)}
	if k.Agg.IntCount > 0 {
		out.IntSum = json.Number(k.Agg.IntSum.String())
	}
	if k.Agg.BoolCount > 0 {
		out.TrueCount = ptr(k.Agg.TrueCount)
	}
	if m, t, ok := k.Agg.Last(); ok {
		out.Last, out.LastTS = ptr(wire.Value(m)), ts(t)
	}
	return out
}
