package rollup

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"
)

// Step is the resolution of a series query: a minute, an hour or a UTC day.
type Step int64

// The steps `query rollups --step` accepts, in milliseconds.
const (
	StepMinute = Step(MinuteMillis)
	StepHour   = Step(60 * MinuteMillis)
	StepDay    = Step(24 * 60 * MinuteMillis)
)

// ParseStep parses 1m, 1h or 1d.
func ParseStep(s string) (Step, error) {
	switch s {
	case "1m":
		return StepMinute, nil
	case "1h":
		return StepHour, nil
	case "1d":
		return StepDay, nil
	}
	return 0, fmt.Errorf("step %q is not one of 1m, 1h, 1d", s)
}

func (s Step) String() string {
	switch s {
	case StepMinute:
		return "1m"
	case StepHour:
		return "1h"
	case StepDay:
		return "1d"
	}
	return time.Duration(s * Step(time.Millisecond)).String()
}

// Start returns the start of the step that holds ts.
func (s Step) Start(ts int64) int64 {
	m := ts - ts%int64(s)
	if ts < 0 && ts%int64(s) != 0 {
		m -= int64(s)
	}
	return m
}

// Filter selects rollup rows: one tenant, a metric (empty: all), a device
// (empty: all) and the minutes that overlap [From, To) (ms). DeviceFrom
// and DeviceTo narrow the devices further to [DeviceFrom, DeviceTo) in
// byte order, either end open when empty: how a day is read a slice of
// devices at a time.
type Filter struct {
	Tenant     string
	Device     string
	Metric     string
	From       int64
	To         int64
	DeviceFrom string
	DeviceTo   string
}

// HasDevice reports whether the filter selects device d.
func (f Filter) HasDevice(d string) bool {
	return (f.Device == "" || d == f.Device) && d >= f.DeviceFrom && (f.DeviceTo == "" || d < f.DeviceTo)
}

// Bucket is the combined aggregate of one step of one device's metric. As
// in a Row, Count counts every value, the float fields aggregate the float
// values and Typed the others.
type Bucket struct {
	Start      int64 // ms
	Count      uint64
	Sum        float64
	Min        float64
	Max        float64
	FirstTS    int64
	FirstValue float64
	LastTS     int64
	LastValue  float64
	Typed
}

// Mean is the mean of the numeric values, floats and ints together (the
// exact int sum rounded once), or NaN if there are none.
func (b Bucket) Mean() float64 {
	n := b.Numeric()
	if n == 0 {
		return math.NaN()
	}
	if b.IntCount == 0 {
		return b.Sum / float64(n)
	}
	return (b.Sum + b.IntSum.Float64()) / float64(n)
}

// Merge folds a partial aggregate into the bucket: counts and sums add
// (int sums exactly), the extremes are kept, the first value is the
// earliest and the last the latest (on equal timestamps, the larger value,
// so that the result does not depend on the order of the parts); each
// type apart.
func (b *Bucket) Merge(r Row) {
	if r.Count == 0 {
		return
	}
	if fc := r.FloatCount(); fc > 0 && b.FloatCount() == 0 {
		b.Sum, b.Min, b.Max = r.Sum, r.Min, r.Max
		b.FirstTS, b.FirstValue, b.LastTS, b.LastValue = r.FirstTS, r.FirstValue, r.LastTS, r.LastValue
	} else if fc > 0 {
		b.Sum += r.Sum
		b.Min = min(b.Min, r.Min)
		b.Max = max(b.Max, r.Max)
		if r.FirstTS < b.FirstTS || r.FirstTS == b.FirstTS && r.FirstValue > b.FirstValue {
			b.FirstTS, b.FirstValue = r.FirstTS, r.FirstValue
		}
		if r.LastTS > b.LastTS || r.LastTS == b.LastTS && r.LastValue > b.LastValue {
			b.LastTS, b.LastValue = r.LastTS, r.LastValue
		}
	}
	b.Count += r.Count
	b.MergeTyped(&r.Typed)
}

// Latest keeps, of rows with the same (key, writer, part), the one with the
// highest version: what ReplacingMergeTree keeps after merging, and what
// FINAL returns. Tombstones stay in the result; Combine skips them.
func Latest(rows []Row) []Row {
	type id struct {
		Key
		w uint16
		p uint64
	}
	idx := make(map[id]int, len(rows))
	var out []Row
	for _, r := range rows {
		k := id{r.Key, r.Writer, r.Part}
		if i, ok := idx[k]; ok {
			if r.Version > out[i].Version {
				out[i] = r
			}
			continue
		}
		idx[k] = len(out)
		out = append(out, r)
	}
	return out
}

// Combine folds the latest rows of one device's metric into buckets of the
// step, ordered by start. Rows must already be deduplicated by Latest.
func Combine(rows []Row, step Step) []Bucket {
	idx := make(map[int64]int)
	var out []Bucket
	for _, r := range rows {
		if r.Count == 0 {
			continue
		}
		s := step.Start(r.Minute)
		i, ok := idx[s]
		if !ok {
			i = len(out)
			idx[s] = i
			out = append(out, Bucket{Start: s})
		}
		out[i].Merge(r)
	}
	slices.SortFunc(out, func(a, b Bucket) int { return cmp.Compare(a.Start, b.Start) })
	return out
}

// By is what `query top` ranks devices by.
type By string

// The rankings.
const (
	ByMax   By = "max"
	ByMean  By = "mean"
	ByCount By = "count"
)

// ParseBy parses max, mean or count.
func ParseBy(s string) (By, error) {
	switch By(s) {
	case ByMax, ByMean, ByCount:
		return By(s), nil
	}
	return "", fmt.Errorf("by %q is not one of max, mean, count", s)
}

// Rank is one device's place in a top list.
type Rank struct {
	Device string
	Value  float64 // the ranking value: max, mean or count
	Count  uint64
	Mean   float64 // of the numeric values (NaN if none)
	Max    float64 // of the numeric values (NaN if none)
	// Agg is the device's aggregate over the whole range (Start 0).
	Agg Bucket
}

// Top ranks the devices of latest rows (one metric, one time range) by by,
// highest first, ties by device name, and keeps limit of them. By count
// every device is ranked, whatever the type of its values; by max or mean
// only those with numeric (float or int) values: a device whose values in
// the range are all bools or strings is left out.
func Top(rows []Row, by By, limit int) []Rank {
	per := make(map[string]*Bucket)
	for _, r := range rows {
		if r.Count == 0 {
			continue
		}
		b := per[r.Device]
		if b == nil {
			b = &Bucket{}
			per[r.Device] = b
		}
		b.Merge(r)
	}
	out := make([]Rank, 0, len(per))
	for d, b := range per {
		if by != ByCount && b.Numeric() == 0 {
			continue
		}
		out = append(out, RankOf(d, *b, by))
	}
	SortRanks(out)
	if limit > 0 && len(out) > limit {
		out = out[:limit]
	}
	return out
}

// RankOf builds the rank of a device from its combined bucket.
func RankOf(device string, b Bucket, by By) Rank {
	r := Rank{Device: device, Count: b.Count, Mean: b.Mean(), Max: b.NumericMax(), Agg: b}
	switch by {
	case ByMax:
		r.Value = r.Max
	case ByMean:
		r.Value = r.Mean
	case ByCount:
		r.Value = float64(b.Count)
	}
	return r
}

// SortRanks orders ranks highest value first, then by device.
func SortRanks(rs []Rank) {
	slices.SortFunc(rs, func(a, b Rank) int {
		if a.Value != b.Value {
			if a.Value > b.Value {
				return -1
			}
			return 1
		}
		return strings.Compare(a.Device, b.Device)
	})
}
