package rollupfeed

import (
	"encoding/binary"
	"errors"
	"math"
	"sort"
	"time"
	"unsafe"

	"github.com/sluicehq/sluice/internal/model"
	"github.com/sluicehq/sluice/internal/rollup"
	"github.com/sluicehq/sluice/internal/store"
)

// WithCarriedMinutes has the feed sum a device-minute that one commit
// wrote whole straight from that commit's rows, instead of reading it back
// from the raw store: the minutes of a partition write from its NewFrom on
// (store.PartitionWrite.NewFrom, set by the sink when built with
// sink.WithNewMinutes). No other commit wrote to them before, and the
// sink commits none that writes to them until this one's AfterCommit
// returned, so the rows are what a recompute would read, with a version
// below that of any recompute that reads a later write of the minute
// (roll). Their cells wait in memory for the next roll (at most
// carryBytes of them; past it minutes are recomputed as usual) with
// their marks kept, so a crash before they are stored loses nothing.
//
// It must only be given a raw store that this gateway alone writes and
// that commits a batch atomically (the embedded store): NewFrom speaks
// for this gateway's own writes only.
func WithCarriedMinutes() Option {
	return func(f *Feed) { f.carry = true }
}

// carryBytes bounds the cells carried to the next roll; past half of it
// AfterCommit calls for a roll at once. At 5 to 6 metrics a reading it is
// some 25,000 readings: two such buffers, one filling while the roller
// stores the other, are what carrying holds.
const carryBytes = 4 << 20

// carried is the cells of the carried minutes, in the order AfterCommit
// took them: a pointer-free buffer, so that the collector never scans it
// and it is reused from roll to roll. Each partition write's carried
// cells are one entry:
//
//	uvarint len, tenant, uvarint len, device, uvarint cells,
//	then per cell: varint ts, uvarint len, metric, type byte, 8 bytes
//	[, uvarint len, string]
//
// where the 8 bytes, big-endian, are a float's bits or the int (a bool's
// 0 or 1; zero for a string, whose bytes follow).
type carried struct {
	b       []byte
	minutes int       // device-minutes carried
	gen     uint64    // the lowest generation of their marks, when b holds any
	since   time.Time // when the first of them was carried
}

// carryLocked appends to f.carried the cells of pw's minutes from
// pw.NewFrom on (from the minute after it if that one has not ended at
// now), the marks of gen, and returns the start of the first
// minute it carried: math.MaxInt64 when it carried none, every minute of
// pw then being recomputed as usual. The caller counts the minutes in
// f.carried.minutes. f.mu is held.
func (f *Feed) carryLocked(pw *store.PartitionWrite, gen uint64, now time.Time) int64 {
	from := pw.NewFrom
	if from == 0 {
		return math.MaxInt64
	}
	if from != math.MinInt64 && from+rollup.MinuteMillis > now.UnixMilli() {
		// The first new minute has not ended, and the device wrote the
		// minute before it: one writing several times a minute, live,
		// whose further writes to the minute its recompute waits for
		// (carried, the minute would be stored twice). A later minute
		// follows a minute with no write: a device writing less often.
		from += rollup.MinuteMillis
	}
	// The cells the raw store keeps of the write, in (ts, metric) order:
	// what a read of it hands out.
	rows := store.LastOfEachCell(pw.Readings)
	if len(rows) == 0 || rollup.MinuteOf(rows[len(rows)-1].TS) < from {
		return math.MaxInt64
	}
	i := sort.Search(len(rows), func(i int) bool { return rollup.MinuteOf(rows[i].TS) >= from })
	size := 3*binary.MaxVarintLen64 + len(pw.Key.Tenant) + len(pw.Key.Series)
	for j := i; j < len(rows); j++ {
		size += 3*binary.MaxVarintLen64 + 9 + len(rows[j].Metric) + len(rows[j].Str)
	}
	c := &f.carried
	if len(c.b)+size > carryBytes {
		return math.MaxInt64
	}
	if len(c.b) == 0 {
		c.gen, c.since = gen, now
	}
	c.gen = min(c.gen, gen)
	b := appendString(c.b, pw.Key.Tenant)
	b = appendString(b, pw.Key.Series)
	b = binary.AppendUvarint(b, uint64(len(rows)-i))
	for j := i; j < len(rows); j++ {
		r := &rows[j]
		b = binary.AppendVarint(b, r.TS)
		b = appendString(b, r.Metric)
		b = append(b, byte(r.Type))
		// What the raw store keeps of the value, so that the sum is what
		// a read of it makes.
		var v uint64
		switch r.Type {
		case model.TypeFloat:
			v = math.Float64bits(r.Value)
		case model.TypeInt:
			v = uint64(r.Int)
		case model.TypeBool:
			v = uint64(r.Int & 1)
		}
		b = binary.BigEndian.AppendUint64(b, v)
		if r.Type == model.TypeString {
			b = appendString(b, r.Str)
		}
	}
	c.b = b
	return from
}

func appendString(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

// takeCarried returns the carried cells, if any, and leaves the spare
// buffer to fill. f.mu is held.
func (f *Feed) takeCarried() carried {
	if len(f.carried.b) == 0 {
		return carried{}
	}
	c := f.carried
	f.carried = carried{b: f.carrySpare[:0]}
	f.carrySpare = nil
	return c
}

// putCarriedBack returns cells taken with takeCarried that could not be
// stored yet, ahead of the ones carried since. f.mu is held.
func (f *Feed) putCarriedBack(c carried) {
	if len(c.b) == 0 {
		return // nothing was taken: the spare buffer is still the spare
	}
	if len(f.carried.b) > 0 {
		c.gen = min(c.gen, f.carried.gen)
	}
	c.b = append(c.b, f.carried.b...)
	c.minutes += f.carried.minutes
	f.carried = c
}

// storeCarried sums the carried cells into rows of the given version and
// stores them, a bounded slice of rows at a time; it returns the buffer
// for reuse. The strings of the rows it makes share the buffer's memory:
// store copies them before it returns, and the rows are cleared.
func (f *Feed) storeCarried(c carried, version uint64) ([]byte, error) {
	chunk := max(1, f.cfg.BatchRows/4)
	rows := f.rowBuf(chunk + 64)
	defer func() { f.putRows(rows) }()
	var mt model.Metric
	b := c.b
	for len(b) > 0 {
		tenant, rest, err := carriedString(b)
		if err != nil {
			return c.b, err
		}
		// A real string: a failed store keeps the tenant (its dirty
		// days), past the buffer's reuse.
		tenant = f.carryNames.str(tenant)
		device, rest, err := carriedString(rest)
		if err != nil {
			return c.b, err
		}
		n, k := binary.Uvarint(rest)
		if k <= 0 {
			return c.b, errCarried
		}
		rest = rest[k:]
		bl := rollup.NewBuilder(rows, tenant, device, version)
		for range n {
			ts, k := binary.Varint(rest)
			if k <= 0 {
				return c.b, errCarried
			}
			name, r, err := carriedString(rest[k:])
			if err != nil || len(r) == 0 {
				return c.b, errCarried
			}
			mt = model.Metric{Name: f.carryNames.str(name), Type: model.ValueType(r[0])}
			if !mt.Type.Valid() || len(r) < 9 {
				return c.b, errCarried
			}
			u := binary.BigEndian.Uint64(r[1:])
			if r = r[9:]; mt.Type == model.TypeFloat {
				mt.Value = math.Float64frombits(u)
			} else {
				mt.Int = int64(u)
			}
			if mt.Type == model.TypeString {
				if mt.Str, r, err = carriedString(r); err != nil {
					return c.b, err
				}
			}
			bl.Add(ts, &mt)
			rest = r
		}
		rows = bl.Rows()
		b = rest
		if len(rows) >= chunk || len(b) == 0 {
			f.store(rows)
			clear(rows)
			rows = rows[:0]
		}
	}
	return c.b, nil
}

// errCarried says the carried buffer does not hold what carryLocked wrote:
// a bug, never the input's doing (it was validated before the commit).
var errCarried = errors.New("rollups: carried cells are corrupt")

// carriedString reads a uvarint-prefixed string of b, sharing b's memory.
func carriedString(b []byte) (string, []byte, error) {
	n, k := binary.Uvarint(b)
	if k <= 0 || n > uint64(len(b)-k) {
		return "", nil, errCarried
	}
	b = b[k:]
	if n == 0 {
		return "", b, nil
	}
	return unsafe.String(&b[0], int(n)), b[n:], nil
}
