// Package rollup holds the per-minute aggregates of readings: the row
// (count, sum, min, max, first and last of one tenant, device, metric and
// minute, kept apart for float, int, bool and string values), how it is
// computed from readings read back from the raw store (Compute), encoded
// (for the outbox and the embedded rollup store) and combined at query
// time into coarser steps and rankings. It is pure: it
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
//
// Count counts every value of the window, whatever its type; Sum, Min,
// Max and the first and last value are those of its float values (zero
// when it has none), and Typed holds the aggregates of its int, bool and
// string values, so that a metric whose type changes within a minute
// loses nothing. The float values are counted by what is left:
// FloatCount, Count minus the typed counts. Rows written before typed
// values (and the columns and encodings that hold them) existed have no
// typed counts, so they read as the float rows they are.
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
	Typed
	Version uint64
}

// FloatCount is the number of float values of the row.
func (r *Row) FloatCount() uint64 { return r.Count - r.typedCount() }

// Compute aggregates the readings of one device, as read back from the raw
// store, into one row per (metric, minute): what a recompute writes. The
// readings must have distinct timestamps (a reader's output has); they are
// taken in time order (sorted here if they are not). Rows come out by
// minute, then metric, with writer RebuildWriter, part 0 and the given
// version.
func Compute(tenant, device string, readings []model.Reading, version uint64) []Row {
	return AppendCompute(nil, tenant, device, readings, version)
}

// AppendCompute is Compute appending the rows to dst, which it leaves as it
// is up to its length: a recompute collects many devices' rows in one
// slice without copying them there.
func AppendCompute(dst []Row, tenant, device string, readings []model.Reading, version uint64) []Row {
	if !slices.IsSortedFunc(readings, func(a, b model.Reading) int { return cmp.Compare(a.TS, b.TS) }) {
		readings = slices.Clone(readings)
		slices.SortFunc(readings, func(a, b model.Reading) int { return cmp.Compare(a.TS, b.TS) })
	}
	b := NewBuilder(dst, tenant, device, version)
	b.Grow(rowsEstimate(readings))
	for _, r := range readings {
		for i := range r.Metrics {
			b.Add(r.TS, &r.Metrics[i])
		}
	}
	return b.Rows()
}

// noFloat marks, while Compute runs, a row that has no float value yet.
const noFloat = math.MinInt64

// rowsEstimate is the number of rows Compute makes of readings sorted by
// time if every minute they span has the first reading's metrics, at most
// the number of values: exact for a device that reports the same metrics
// every minute, so that the rows are allocated once.
func rowsEstimate(readings []model.Reading) int {
	if len(readings) == 0 {
		return 0
	}
	n := 0
	for _, r := range readings {
		n += len(r.Metrics)
	}
	minutes := (MinuteOf(readings[len(readings)-1].TS)-MinuteOf(readings[0].TS))/MinuteMillis + 1
	if minutes < 0 || minutes > int64(n) {
		return n
	}
	return min(n, int(minutes)*len(readings[0].Metrics))
}
