package pebblestore

import (
	"bytes"
	"cmp"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"slices"
	"sync"

	"github.com/cockroachdb/pebble/v2"

	"github.com/sluicehq/sluice/internal/model"
	"github.com/sluicehq/sluice/internal/store"
)

// # One key per reading
//
// A reading is stored under one key, its partition prefix and timestamp,
// and its value is the reading's cells: for each metric, in name order, the
// name's length as a uvarint, the name, and the cell as encodeReading
// writes it (flags, typed value, seq). The key is written with a Pebble
// merge, not a set, so that two writes of one timestamp still combine cell
// by cell as they did when each metric had a key of its own: the newer
// write's cell wins for a metric both hold, and a metric only the older one
// holds is kept. A retried reading therefore changes nothing, and a device
// that sends its metrics of one instant in two messages gets one reading.
//
// Stores written before this format hold one key per metric (the prefix,
// the timestamp, then the metric name: longer than a reading key) with a
// plain value. Reads take both: at one timestamp, a cell under the reading
// key wins over a per-metric key of the same metric, since every
// per-metric key was written before the first reading key (a store is
// opened by one gateway at a time, and an upgraded gateway writes reading
// keys only).
//
// Why: a reading of 5.5 metrics was 5.5 keys, each with its ~40-byte
// prefix, in the memtable, the WAL, every flush and every compaction; most
// of the embedded store's CPU went to them (docs/benchmarks.md, "One key
// per reading").

// appendCell appends one cell of a reading value.
func appendCell(b []byte, r model.ReadingRow) []byte {
	b = binary.AppendUvarint(b, uint64(len(r.Metric)))
	b = append(b, r.Metric...)
	return encodeReading(b, r)
}

// cellLen returns the length of the cell at the start of v (its name
// included), or an error.
func cellLen(v []byte) (nameStart, nameEnd, end int, err error) {
	n, k := binary.Uvarint(v)
	if k <= 0 || n == 0 || n > uint64(len(v)-k) {
		return 0, 0, 0, fmt.Errorf("reading cell name: %w", errCorrupt)
	}
	nameStart, nameEnd = k, k+int(n)
	rest := v[nameEnd:]
	if len(rest) < 1 || rest[0]>>3 != 0 {
		return 0, 0, 0, fmt.Errorf("reading cell flags: %w", errCorrupt)
	}
	l := 1
	switch model.ValueType(rest[0]>>1) & 3 {
	case model.TypeFloat, model.TypeInt:
		l += 8
	case model.TypeBool:
		l++
	case model.TypeString:
		s, k := binary.Uvarint(rest[1:])
		if k <= 0 || s > uint64(len(rest)) {
			return 0, 0, 0, fmt.Errorf("reading cell string: %w", errCorrupt)
		}
		l += k + int(s)
	}
	if rest[0]&1 != 0 {
		if l > len(rest) {
			return 0, 0, 0, fmt.Errorf("reading cell: %w", errCorrupt)
		}
		_, k := binary.Varint(rest[l:])
		if k <= 0 {
			return 0, 0, 0, fmt.Errorf("reading cell seq: %w", errCorrupt)
		}
		l += k
	}
	if l > len(rest) {
		return 0, 0, 0, fmt.Errorf("reading cell: %w", errCorrupt)
	}
	return nameStart, nameEnd, nameEnd + l, nil
}

// eachCell calls fn with the name and encoded cell (as decodeReading
// takes it) of every cell of a reading value, in order.
func eachCell(v []byte, fn func(name, cell []byte) error) error {
	for len(v) > 0 {
		ns, ne, end, err := cellLen(v)
		if err != nil {
			return err
		}
		if err := fn(v[ns:ne], v[ne:end]); err != nil {
			return err
		}
		v = v[end:]
	}
	return nil
}

// AppendEntry appends to key and val the key and value that Commit merges
// for catalogue entry pi in a batch of the given version. The benchmarks'
// limits use it, as AppendReading.
func AppendEntry(key, val []byte, pi model.PartitionInfo, version int64) ([]byte, []byte) {
	return catalogueKey(key, pi.Key), encodeInfo(appendVersion(val, version), pi)
}

// AppendReading appends to key and val the key and value that Commit
// merges for one reading: rows are its cells, all of one timestamp, with
// distinct metrics in name order. The benchmarks' limits use it (with
// pebble.Batch.Merge), so that they write exactly the gateway's keys.
func AppendReading(key, val []byte, pk model.PartitionKey, rows []model.ReadingRow) ([]byte, []byte) {
	key = appendTS(partitionPrefix(key, pk), rows[0].TS)
	for _, r := range rows {
		val = appendCell(val, r)
	}
	return key, val
}

// DecodeReading is AppendReading's inverse, for the benchmarks' limits
// that read the raw store back as the gateway would: the series of a
// reading key (a view of key) and the reading's rows, appended to rows. A
// key that is not a reading key (another table, or a per-metric key of an
// older store) is an error, and rows then comes back as it was given.
// The sub-bucket is not returned: a caller that reads several partitions
// of a device merges them itself.
func DecodeReading(key, val []byte, rows []model.ReadingRow) (series []byte, out []model.ReadingRow, err error) {
	rest, ok := bytes.CutPrefix(key, []byte{tabReadings})
	if !ok || len(rest) < 4 {
		return nil, rows, fmt.Errorf("reading key %x: %w", key, errCorrupt)
	}
	rest = rest[4:]    // the day
	for i := range 2 { // the tenant, then the series
		n := bytes.IndexByte(rest, 0)
		if n < 0 {
			return nil, rows, fmt.Errorf("reading key %x: %w", key, errCorrupt)
		}
		if i == 1 {
			series = rest[:n]
		}
		rest = rest[n+1:]
	}
	if len(rest) != 4+8 { // the sub-bucket and the timestamp
		return nil, rows, fmt.Errorf("reading key %x: %w", key, errCorrupt)
	}
	n := len(rows)
	if rows, err = appendCells(rows, int64(binary.BigEndian.Uint64(rest[4:])^1<<63), val); err != nil {
		return nil, rows[:n], err
	}
	return series, rows, nil
}

// appendCells appends the rows of a reading value, all of time ts, in the
// order of its cells (metric names).
func appendCells(rows []model.ReadingRow, ts int64, v []byte) ([]model.ReadingRow, error) {
	err := eachCell(v, func(name, cell []byte) error {
		row := model.ReadingRow{TS: ts, Metric: string(name)}
		if err := decodeReading(cell, &row); err != nil {
			return fmt.Errorf("reading at %d, metric %s: %w", ts, name, err)
		}
		rows = append(rows, row)
		return nil
	})
	return rows, err
}

// appendReadings stages the rows of one partition (pk's prefix in key) as
// one merge per timestamp: store.LastOfEachCell puts them in (ts, metric)
// order, the later row of a cell written twice in the batch winning, so
// each timestamp's run is a reading's cells in name order.
func appendReadings(pb *pebble.Batch, key, val []byte, rows []model.ReadingRow) ([]byte, []byte, error) {
	rows = store.LastOfEachCell(rows)
	plen := len(key)
	for i := 0; i < len(rows); {
		j := i + 1
		for j < len(rows) && rows[j].TS == rows[i].TS {
			j++
		}
		key = appendTS(key[:plen], rows[i].TS)
		val = val[:0]
		for _, r := range rows[i:j] {
			val = appendCell(val, r)
		}
		if err := pb.Merge(key, val, nil); err != nil {
			return key, val, err
		}
		i = j
	}
	return key, val, nil
}

// storeMerger is the database's merger: reading keys combine their cells
// (cellMerge), every other merged key (catalogue entries) keeps its
// highest-versioned value. Its name is the one stores were created with
// before reading keys were merged, so that they open: Pebble refuses a
// database whose merger name differs.
var storeMerger = &pebble.Merger{
	Name: catalogueMergerName,
	Merge: func(key, value []byte) (pebble.ValueMerger, error) {
		if len(key) > 0 && key[0] == tabReadings {
			m := cellMerges.Get().(*cellMerge)
			m.first = append(m.first[:0], value...)
			return m, nil
		}
		return newLatestVersion(value), nil
	},
}

// cellMerges recycles the mergers of reading keys. Every read of a reading
// key that is still a merge operand, and every flush and compaction of
// one, makes a merger, and most hold one operand, whose copy Finish hands
// back: Pebble closes the closer Finish returns when it no longer needs
// the value, and the merger then goes back here with its buffer, instead
// of three allocations a key.
var cellMerges = sync.Pool{New: func() any { return new(cellMerge) }}

// maxPooledValue is the largest buffer a recycled merger (of reading keys
// or catalogue entries) keeps.
const maxPooledValue = 4 << 10

// cellMerge combines the values of one reading key: first is the first
// operand Pebble handed over (in a buffer of its own, kept across uses),
// ops the newer ones, oldest first, and older the older ones, newest first,
// as Pebble hands them over (appending both ways keeps a key written many
// times linear, where inserting at the front was quadratic).
type cellMerge struct {
	first      []byte
	ops, older [][]byte
}

func (m *cellMerge) MergeNewer(value []byte) error {
	m.ops = append(m.ops, bytes.Clone(value))
	return nil
}

func (m *cellMerge) MergeOlder(value []byte) error {
	m.older = append(m.older, bytes.Clone(value))
	return nil
}

// Finish never fails: Pebble retries a failed flush or compaction for
// ever, and a memtable that cannot be flushed stops every write of the
// store, so one corrupt operand would wedge the gateway (mergeCells). The
// value it returns is valid until Pebble closes m.
func (m *cellMerge) Finish(bool) ([]byte, io.Closer, error) {
	if len(m.ops) == 0 && len(m.older) == 0 {
		return m.first, m, nil
	}
	slices.Reverse(m.older)
	values := append(append(m.older, m.first), m.ops...)
	m.older = values[:0] // keep the larger slice for the next use
	return mergeCells(values), m, nil
}

// Close recycles m once Pebble is done with the value Finish returned.
func (m *cellMerge) Close() error {
	clear(m.older[:cap(m.older)])
	clear(m.ops)
	m.older, m.ops = m.older[:0], m.ops[:0]
	if cap(m.first) > maxPooledValue {
		m.first = nil
	}
	cellMerges.Put(m)
	return nil
}

// mergeCells returns the union of the cells of values (oldest first), the newest cell of each metric winning, in name order. An
// operand that does not parse is left out, as the rollup store's merger
// ranks an operand that does not decode below every valid one; if none
// parses, the newest is returned as it is, and reads report it corrupt.
func mergeCells(values [][]byte) []byte {
	type cell struct{ name, value []byte }
	var cells []cell
	valid := false
	for i := len(values) - 1; i >= 0; i-- { // newest first: the first cell of a name wins
		n := len(cells)
		err := eachCell(values[i], func(name, value []byte) error {
			if !slices.ContainsFunc(cells, func(c cell) bool { return bytes.Equal(c.name, name) }) {
				cells = append(cells, cell{name, value})
			}
			return nil
		})
		if err != nil {
			cells = cells[:n] // the operand is left out whole
			continue
		}
		valid = true
	}
	if !valid {
		return slices.Clone(values[len(values)-1])
	}
	slices.SortFunc(cells, func(a, b cell) int { return bytes.Compare(a.name, b.name) })
	var dst []byte
	for _, c := range cells {
		dst = binary.AppendUvarint(dst, uint64(len(c.name)))
		dst = append(append(dst, c.name...), c.value...)
	}
	return dst
}

// scanReadings returns up to limit rows of a readings partition inside r,
// in clustering order (ts, metric): the cells of each reading key, and the
// per-metric keys of an older store, merged at each timestamp.
func scanReadings(ctx context.Context, src iterSource, pk model.PartitionKey, r store.Range, limit int) ([]model.ReadingRow, error) {
	out, err := scanReadingRows(ctx, src, pk, r, limit)
	if err != nil {
		return nil, fmt.Errorf("scan %v: %w", pk, err)
	}
	return out, nil
}

func scanReadingRows(ctx context.Context, src iterSource, pk model.PartitionKey, r store.Range, limit int) ([]model.ReadingRow, error) {
	if limit < 1 {
		return nil, nil
	}
	prefix := partitionPrefix(nil, pk)
	from := r.From
	var after *store.Pos
	if r.After != nil && r.After.TS >= from {
		// Resume at the cursor's timestamp: the rest of its reading.
		from, after = r.After.TS, r.After
	}
	lower := appendTS(slices.Clone(prefix), from)
	upper := appendTS(slices.Clone(prefix), r.To)
	if bytes.Compare(lower, upper) >= 0 {
		return nil, nil
	}
	it, release, err := src.iter(ctx, lower, upper)
	if err != nil {
		return nil, err
	}
	// The rows of the timestamp being read are out[start:]: no copy from a
	// group of their own (a recompute reads mostly one reading).
	// Room for a reading of a few metrics (a recompute of one minute reads
	// mostly one): grown from nothing, it was allocated four times.
	out := make([]model.ReadingRow, 0, min(limit, 8))
	start := 0
	// settle drops the rows of the timestamp just read that are at or
	// before the cursor, and reports whether out has room for more; when
	// it has not, out is cut to limit.
	settle := func() bool {
		if after != nil && len(out) > start && out[start].TS == after.TS {
			kept := out[:start]
			for _, row := range out[start:] {
				if row.Metric > after.Key {
					kept = append(kept, row)
				}
			}
			out = kept
		}
		if len(out) >= limit {
			out = out[:limit]
			return false
		}
		start = len(out)
		return true
	}
	more := true
	for ok := it.First(); ok; ok = it.Next() {
		k := it.Key()[len(prefix):]
		if len(k) < 8 {
			_ = release()
			return nil, fmt.Errorf("short key: %w", errCorrupt)
		}
		ts := int64(binary.BigEndian.Uint64(k) ^ 1<<63)
		if len(out) > start && out[start].TS != ts {
			if more = settle(); !more {
				break
			}
		}
		if len(k) == 8 {
			out, err = appendCells(out, ts, it.Value())
		} else {
			group := out[start:]
			err = addLegacy(&group, ts, k[8:], it.Value())
			out = append(out[:start], group...)
		}
		if err != nil {
			_ = release()
			return nil, err
		}
	}
	if more {
		settle()
	}
	if err := release(); err != nil {
		return nil, err
	}
	return out, nil
}

// addLegacy adds the cell of a per-metric key (written before reading
// keys) to the rows of its timestamp, unless the reading key holds the
// metric: every reading key is newer than every per-metric key.
func addLegacy(group *[]model.ReadingRow, ts int64, name, v []byte) error {
	i, found := slices.BinarySearchFunc(*group, string(name), func(r model.ReadingRow, n string) int { return cmp.Compare(r.Metric, n) })
	if found {
		return nil
	}
	row := model.ReadingRow{TS: ts, Metric: string(name)}
	if err := decodeReading(v, &row); err != nil {
		return fmt.Errorf("reading at %d, metric %s: %w", ts, name, err)
	}
	*group = slices.Insert(*group, i, row)
	return nil
}
