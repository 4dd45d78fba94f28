package rollupfeed

import (
	"context"
	"fmt"
	"math"
	"strings"
	"unsafe"

	"github.com/sluicehq/sluice/internal/model"
	"github.com/sluicehq/sluice/internal/reader"
	"github.com/sluicehq/sluice/internal/rollup"
	"github.com/sluicehq/sluice/internal/store"
)

// streamer is a read session that hands a partition's values to a callback
// instead of building rows (pebblestore.Reads.EachReading): a recompute
// folds them straight into its rows, with no rows, readings or metric names
// allocated for them. whole is false when the partition must be read
// through the reader instead.
type streamer interface {
	EachReading(ctx context.Context, pk model.PartitionKey, r store.Range, fn func(name []byte, row *model.ReadingRow) error) (whole bool, err error)
}

// streamRun appends to dst the rows of device's readings in [from, to),
// folded as the raw store hands out their values, when the range lies in
// one UTC day and one partition of it. Otherwise (the reader then merges
// the copies that several partitions may hold of a reading) it reports
// read false and returns dst as it was. readings counts the readings
// folded.
func streamRun(ctx context.Context, raw reader.Store, st streamer, sc *scratch, tenant, device string, from, to int64, version uint64, dst []rollup.Row) (out []rollup.Row, read bool, readings int, err error) {
	day := model.DayOf(from)
	if model.DayOf(to-1) != day {
		return dst, false, 0, nil
	}
	parts, err := raw.Catalogue(ctx, model.SeriesDay{Kind: model.KindReadings, Tenant: tenant, Series: device, Day: day})
	if err != nil {
		return dst, false, 0, fmt.Errorf("read catalogue of %q on %s: %w", device, day, err)
	}
	var pk *model.PartitionKey
	for i := range parts {
		if parts[i].Overlaps(from, to) {
			if pk != nil {
				return dst, false, 0, nil
			}
			pk = &parts[i].Key
		}
	}
	if pk == nil {
		return dst, true, 0, nil
	}
	sc.b = rollup.NewBuilder(dst, tenant, device, version)
	sc.last, sc.readings = math.MinInt64, 0
	if sc.fold == nil {
		sc.fold = sc.add // one method value for every read of the worker
	}
	whole, err := st.EachReading(ctx, *pk, store.Range{From: from, To: to}, sc.fold)
	if err != nil || !whole {
		if err != nil {
			err = fmt.Errorf("read raw readings of %q: %w", device, err)
		}
		return sc.b.Discard(), false, 0, err
	}
	return sc.b.Rows(), true, sc.readings, nil
}

// scratch is what one recompute worker reuses from read to read.
type scratch struct {
	names    interner
	b        rollup.Builder
	fold     func(name []byte, row *model.ReadingRow) error // add
	last     int64                                          // the timestamp of the last value folded
	readings int                                            // distinct timestamps folded
	mt       model.Metric
}

// add folds one value streamed out of the raw store into b.
func (sc *scratch) add(name []byte, row *model.ReadingRow) error {
	if row.TS != sc.last {
		sc.readings, sc.last = sc.readings+1, row.TS
	}
	sc.mt = model.Metric{Name: sc.names.of(name), Value: row.Value, Type: row.Type, Int: row.Int, Str: row.Str}
	sc.b.Add(row.TS, &sc.mt)
	return nil
}

// interner hands out one string per metric name seen, so that the rows of
// a roll share their metric names instead of allocating one a row.
type interner struct{ m map[string]string }

// maxInterned bounds an interner: past it, it starts again empty.
const maxInterned = 1024

// str returns the one string handed out for name, a copy of it the first
// time.
func (in *interner) str(name string) string {
	if s, ok := in.m[name]; ok {
		return s
	}
	if in.m == nil || len(in.m) >= maxInterned {
		in.m = make(map[string]string, 64)
	}
	s := strings.Clone(name)
	in.m[s] = s
	return s
}

// of is str for a name's bytes: the view of b it looks up with is not
// kept.
func (in *interner) of(b []byte) string {
	return in.str(unsafe.String(unsafe.SliceData(b), len(b)))
}
