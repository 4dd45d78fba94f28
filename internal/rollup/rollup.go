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

// Point is one distinct reading of a window.
type Point struct {
	TS    int64
	Value float64
}

// Aggregate computes the aggregate of points sorted by TS with distinct TS.
// Count is 0 for no points.
func Aggregate(key Key, points []Point) Row {
	r := Row{Key: key}
	if len(points) == 0 {
		return r
	}
	r.Count = uint64(len(points))
	r.Min, r.Max = math.Inf(1), math.Inf(-1)
	for _, p := range points {
		r.Sum += p.Value
		r.Min = min(r.Min, p.Value)
		r.Max = max(r.Max, p.Value)
	}
	r.FirstTS, r.FirstValue = points[0].TS, points[0].Value
	last := points[len(points)-1]
	r.LastTS, r.LastValue = last.TS, last.Value
	return r
}

func compareKeys(x, y Key) int {
	if c := cmp.Compare(x.Minute, y.Minute); c != 0 {
		return c
	}
	if c := strings.Compare(x.Tenant, y.Tenant); c != 0 {
		return c
	}
	if c := strings.Compare(x.Device, y.Device); c != 0 {
		return c
	}
	return strings.Compare(x.Metric, y.Metric)
}

func sortRows(rows []Row) {
	slices.SortFunc(rows, func(x, y Row) int {
		if c := compareKeys(x.Key, y.Key); c != 0 {
			return c
		}
		if c := cmp.Compare(x.Writer, y.Writer); c != 0 {
			return c
		}
		return cmp.Compare(x.Part, y.Part)
	})
}

// Compute aggregates the readings of one device, as read back from the raw
// store, into one row per (metric, minute): what a rebuild writes. The
// readings must have distinct timestamps (a reader's output has). Rows get
// writer RebuildWriter, part 0 and the given version.
func Compute(tenant, device string, readings []model.Reading, version uint64) []Row {
	byKey := make(map[Key][]Point)
	for _, r := range readings {
		for _, m := range r.Metrics {
			k := Key{Tenant: tenant, Device: device, Metric: m.Name, Minute: MinuteOf(r.TS)}
			byKey[k] = append(byKey[k], Point{TS: r.TS, Value: m.Value})
		}
	}
	out := make([]Row, 0, len(byKey))
	for k, pts := range byKey {
		slices.SortFunc(pts, func(a, b Point) int { return cmp.Compare(a.TS, b.TS) })
		r := Aggregate(k, pts)
		r.Writer, r.Version = RebuildWriter, version
		out = append(out, r)
	}
	sortRows(out)
	return out
}
