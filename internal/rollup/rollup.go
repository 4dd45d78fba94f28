// Package rollup holds the per-minute aggregates of readings: the row
// (count, sum, min, max, first and last of one tenant, device, metric and
// minute), how it is computed from readings read back from the raw store
// (Compute), encoded (for the outbox and the embedded rollup store) and
// combined at query time into coarser steps and rankings. It is pure: it
// does no I/O and never reads the clock.
//
// # Versions and parts
//
// Rows are keyed by (tenant, device, metric, minute, writer, part). Rows
// recomputed from the raw store, by a gateway after a commit or by a
// rebuild, are whole minutes with writer RebuildWriter and part 0; a store
// keeps the highest Version of each key, so that the latest recompute wins
// however often an insert is retried. Rows with other writers and parts
// are partial aggregates written by gateways before 2026-11-27, which
// summed in-memory windows; readers still combine every live part of a
// minute (sum of counts and sums, min, max, earliest first, latest last),
// and a rebuild retracts them with tombstones (rows with Count 0).
package rollup

import (
	"cmp"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/sluicehq/sluice/internal/model"
)

// MinuteMillis is the length of a window.
const MinuteMillis = int64(time.Minute / time.Millisecond)

// MinuteOf returns the start of the minute that holds ts (ms since the epoch).
func MinuteOf(ts int64) int64 {
	m := ts - ts%MinuteMillis
	if ts < 0 && ts%MinuteMillis != 0 {
		m -= MinuteMillis
	}
	return m
}

// Key names one window.
type Key struct {
	Tenant string
	Device string
	Metric string
	Minute int64 // first millisecond of the minute
}

// RebuildWriter is the writer id of rows written by a rebuild from the raw
// store. Gateways use writer ids 0..255 (buckets.writer_id).
const RebuildWriter = math.MaxUint16

// Row is one emitted partial aggregate of a window. A row with Count == 0
// is a tombstone: it retracts an earlier version of the same row.
type Row struct {
	Key
	Writer     uint16
	Part       uint64
	Count      uint64
	Sum        float64
	Min        float64
	Max        float64
	FirstTS    int64
	FirstValue float64
	LastTS     int64
	LastValue  float64
	Version    uint64
}

// Compute aggregates the readings of one device, as read back from the raw
// store, into one row per (metric, minute): what a recompute writes. The
// readings must have distinct timestamps (a reader's output has); they are
// taken in time order (sorted here if they are not). Rows come out by
// minute, then metric, with writer RebuildWriter, part 0 and the given
// version.
func Compute(tenant, device string, readings []model.Reading, version uint64) []Row {
	if !slices.IsSortedFunc(readings, func(a, b model.Reading) int { return cmp.Compare(a.TS, b.TS) }) {
		readings = slices.Clone(readings)
		slices.SortFunc(readings, func(a, b model.Reading) int { return cmp.Compare(a.TS, b.TS) })
	}
	var out []Row
	start := 0 // the first row of the current minute in out
	minute := int64(math.MinInt64)
	for _, r := range readings {
		if m := MinuteOf(r.TS); m != minute {
			slices.SortFunc(out[start:], func(x, y Row) int { return strings.Compare(x.Metric, y.Metric) })
			start, minute = len(out), m
		}
		for _, mt := range r.Metrics {
			i := start
			for i < len(out) && out[i].Metric != mt.Name {
				i++
			}
			if i == len(out) {
				out = append(out, Row{Key: Key{Tenant: tenant, Device: device, Metric: mt.Name, Minute: minute},
					Writer: RebuildWriter, Version: version, Min: math.Inf(1), Max: math.Inf(-1), FirstTS: r.TS, FirstValue: mt.Value})
			}
			row := &out[i]
			row.Count++
			row.Sum += mt.Value
			row.Min = min(row.Min, mt.Value)
			row.Max = max(row.Max, mt.Value)
			row.LastTS, row.LastValue = r.TS, mt.Value
		}
	}
	slices.SortFunc(out[start:], func(x, y Row) int { return strings.Compare(x.Metric, y.Metric) })
	return out
}
