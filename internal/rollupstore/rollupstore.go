// Package rollupstore keeps minute rollups in an embedded Pebble database
// (under data_dir/rollups) when no ClickHouse is configured. It has the same
// semantics as the ClickHouse table: one entry per (tenant, metric, device,
// minute, writer, part), an insert keeps the highest version, tombstones
// (count 0) are kept so that an older version arriving later cannot come
// back, and reads fold the latest rows at query time.
package rollupstore

import (
	"bytes"
	"cmp"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"

	"github.com/cockroachdb/pebble/v2"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice/internal/model"
	"github.com/sluicehq/sluice/internal/pebblelog"
	"github.com/sluicehq/sluice/internal/pebblemetrics"
	"github.com/sluicehq/sluice/internal/rollup"
	"github.com/sluicehq/sluice/internal/store"
)

// Store is an open embedded rollup store. Safe for concurrent use.
type Store struct {
	db     *pebble.DB
	stalls *pebblemetrics.Stalls // Pebble's write stalls, for the metrics
}

// Options tune the store.
type Options struct {
	MemTableBytes int64 // size of a memtable (up to two are held); 64 MiB if not positive
}

// Open opens (creating if needed) the store in dir with the default
// options.
func Open(dir string, logger *slog.Logger) (*Store, error) {
	return OpenWith(dir, Options{}, logger)
}

// OpenWith opens (creating if needed) the store in dir.
func OpenWith(dir string, opts Options, logger *slog.Logger) (*Store, error) {
	st := &pebblemetrics.Stalls{}
	db, err := pebble.Open(dir, pebbleOptions(opts, logger, st))
	if err != nil {
		if strings.Contains(err.Error(), "merger name") {
			// Written before rows became merge operands (a development
			// version): its rows can only be recomputed.
			return nil, fmt.Errorf("open rollup store %q: %w; it was written by an earlier version of sluice: move the directory aside, start again, and rebuild the rollups of the days you need (query rollups rebuild)", dir, err)
		}
		return nil, fmt.Errorf("open rollup store %q: %w", dir, err)
	}
	return &Store{db: db, stalls: st}, nil
}

// pebbleOptions are the database's options, its write stalls counted in
// st.
func pebbleOptions(opts Options, logger *slog.Logger, st *pebblemetrics.Stalls) *pebble.Options {
	memTable := opts.MemTableBytes
	if memTable <= 0 {
		memTable = 64 << 20
	}
	// Written all the time in small synced batches, read now and then: a
	// large memtable (Pebble's default is 4 MiB), and many level-0 files
	// before compacting them, so that each day's rows are rewritten about a
	// quarter as often as with the default of 4 files.
	return &pebble.Options{Logger: pebblelog.New(logger, "rollupstore"), FormatMajorVersion: pebble.FormatNewest, Merger: latestMerger,
		MemTableSize: uint64(memTable), L0CompactionThreshold: l0CompactionThreshold, L0StopWritesThreshold: l0StopWritesThreshold,
		EventListener: st.Listener()}
}

// The rollup store's level 0 bounds (see pebbleOptions).
const (
	l0CompactionThreshold = 16
	l0StopWritesThreshold = 48
)

// Register adds the rollup store's metrics (package pebblemetrics, named
// sluice_rollup_store_*) to reg: the shape of its LSM tree, its flushes,
// compactions and write stalls, its memtables, its block cache and its
// size on disk.
func (s *Store) Register(reg prometheus.Registerer) error {
	return pebblemetrics.Register(reg, s.db, pebblemetrics.DB{Prefix: "sluice_rollup_store", What: "embedded rollup store",
		L0CompactionThreshold: l0CompactionThreshold, L0StopWritesThreshold: l0StopWritesThreshold, Stalls: s.stalls})
}

// Close closes the database.
func (s *Store) Close() error {
	if err := s.db.Close(); err != nil {
		return fmt.Errorf("close rollup store: %w", err)
	}
	return nil
}

// Key layouts. All begin with the UTC day (4 bytes, sign flipped), so
// that one day of every tenant is one key range: retention drops it with
// one range delete.
//
//	by minute: day 0x00 0x80|hour tenant 0 device 0 minute(8, sign flipped) writer(2) part(8)
//	by hour:   day 0x00 hour(1) tenant 0 metric 0 device 0 minute writer part
//	legacy:    day tenant 0 metric 0 device 0 minute writer part
//
// Rows are written by minute since 2026-11-28: one key per device-minute
// whose value holds the rows of all its metrics (minute.go), where the
// layouts before held one key per metric; a fleet whose readings carry
// several metrics writes, flushes and compacts that many times fewer keys.
// Stores written before hold the by-hour layout (from 2026-11-27) or the
// legacy one, which reads fold in. The hour of the day before the tenant
// makes rollups written in time order (a fleet reporting now, or a
// backfill in order) land after the previous hours' keys, so that the
// tables a flush writes barely overlap the ones before and compactions
// have less to rewrite. A tenant name is never empty, so a legacy key
// never has a 0 after its day.

// dayPrefix appends the first bytes of every key of day.
func dayPrefix(b []byte, day model.Day) []byte {
	return binary.BigEndian.AppendUint32(b, uint32(day)^(1<<31))
}

// hourPrefix appends the first bytes of every key of hour h (0–23) of day.
func hourPrefix(b []byte, day model.Day, h int) []byte {
	return append(dayPrefix(b, day), 0, byte(h))
}

// under appends to base (a day's or an hour's prefix) the parts of the key
// that name tenant, metric and device, as far as they are given.
func under(base []byte, tenant, metric, device string) []byte {
	for _, part := range [3]string{tenant, metric, device} {
		if part == "" {
			return base
		}
		base = append(append(base, part...), 0)
	}
	return base
}

func dayOfKey(k []byte) model.Day { return model.Day(binary.BigEndian.Uint32(k) ^ (1 << 31)) }

// hourOf returns the hour of its day (0–23) of a time in ms.
func hourOf(ms int64) int {
	return int((ms - model.DayOf(ms).Start()) / (60 * rollup.MinuteMillis))
}

// minuteHour is the byte after a by-minute key's 0 that holds its hour.
const minuteHour = 0x80

// minutePrefix appends the first bytes of every by-minute key of hour h
// (0–23) of day.
func minutePrefix(b []byte, day model.Day, h int) []byte {
	return append(dayPrefix(b, day), 0, minuteHour|byte(h))
}

// isMinuteKey reports whether k is in the by-minute layout.
func isMinuteKey(k []byte) bool {
	return len(k) > 5 && k[4] == 0 && k[5]&minuteHour != 0
}

// AppendMinute appends to key and val the key and value that Insert merges
// for run, the rows of one device-minute (tenant, device, minute, writer
// and part) sorted by metric, each metric once. The benchmarks' limits use
// it to write the store's own keys.
func AppendMinute(key, val []byte, run []rollup.Row) ([]byte, []byte) {
	return appendKey(key, &run[0]), appendMinuteValue(val, run)
}

// appendKey appends the key of r's device-minute.
func appendKey(b []byte, r *rollup.Row) []byte {
	b = minutePrefix(b, model.DayOf(r.Minute), hourOf(r.Minute))
	b = append(append(b, r.Tenant...), 0)
	b = append(append(b, r.Device...), 0)
	b = binary.BigEndian.AppendUint64(b, uint64(r.Minute)^(1<<63))
	b = binary.BigEndian.AppendUint16(b, r.Writer)
	return binary.BigEndian.AppendUint64(b, r.Part)
}

// hourKey is r's key in the by-hour layout.
func hourKey(r rollup.Row) []byte {
	return appendRowKey(hourPrefix(nil, model.DayOf(r.Minute), hourOf(r.Minute)), r)
}

// legacyKey is r's key in the legacy layout.
func legacyKey(r rollup.Row) []byte {
	return appendRowKey(dayPrefix(nil, model.DayOf(r.Minute)), r)
}

// appendRowKey appends to base (r's hour or day prefix) the rest of r's
// key, which the by-hour and legacy layouts share.
func appendRowKey(base []byte, r rollup.Row) []byte {
	b := under(base, r.Tenant, r.Metric, r.Device)
	b = binary.BigEndian.AppendUint64(b, uint64(r.Minute)^(1<<63))
	b = binary.BigEndian.AppendUint16(b, r.Writer)
	return binary.BigEndian.AppendUint64(b, r.Part)
}

// decode returns the row stored under k with value v. Values are the row's
// aggregate alone (rollup.EncodeValue), its key fields taken from k; a value
// written before that is a whole row (rollup.EncodeRow), read as it is.
func decode(k, v []byte) (rollup.Row, error) {
	if !rollup.IsValue(v) {
		r, err := rollup.DecodeRow(v)
		if err != nil {
			return rollup.Row{}, fmt.Errorf("decode rollup entry: %w", err)
		}
		return r, nil
	}
	var r rollup.Row
	if err := parseKey(k, &r); err != nil {
		return rollup.Row{}, err
	}
	if err := rollup.DecodeValue(v, &r); err != nil {
		return rollup.Row{}, fmt.Errorf("decode rollup entry %x: %w", k, err)
	}
	return r, nil
}

// parseMinuteKey reads the tenant, device, minute, writer and part of a
// by-minute key.
func parseMinuteKey(k []byte, r *rollup.Row) error {
	bad := func(what string) error {
		return fmt.Errorf("rollup key %x: no %s: %w", k, what, rollup.ErrCorrupt)
	}
	rest := k[6:]
	for _, f := range [2]struct {
		s    *string
		name string
	}{{&r.Tenant, "tenant"}, {&r.Device, "device"}} {
		n := bytes.IndexByte(rest, 0)
		if n < 0 {
			return bad(f.name)
		}
		*f.s = string(rest[:n])
		rest = rest[n+1:]
	}
	if len(rest) != 8+2+8 {
		return bad("minute, writer and part")
	}
	r.Minute = int64(binary.BigEndian.Uint64(rest) ^ (1 << 63))
	r.Writer = binary.BigEndian.Uint16(rest[8:])
	r.Part = binary.BigEndian.Uint64(rest[10:])
	return nil
}

// decodeEach calls emit with each row stored under k with value v: the
// rows of every metric of a by-minute key, the one row of another.
func decodeEach(k, v []byte, emit func(rollup.Row) error) error {
	if !isMinuteKey(k) {
		r, err := decode(k, v)
		if err != nil {
			return err
		}
		return emit(r)
	}
	var key rollup.Row
	if err := parseMinuteKey(k, &key); err != nil {
		return err
	}
	if err := decodeMinute(key, v, emit); err != nil {
		return fmt.Errorf("decode rollup entry %x: %w", k, err)
	}
	return nil
}

// parseKey reads the key fields of r from k, a by-hour or legacy key.
func parseKey(k []byte, r *rollup.Row) error {
	bad := func(what string) error {
		return fmt.Errorf("rollup key %x: no %s: %w", k, what, rollup.ErrCorrupt)
	}
	if len(k) < 4 {
		return bad("day")
	}
	rest := k[4:]
	if len(rest) > 0 && rest[0] == 0 { // by hour
		if len(rest) < 2 {
			return bad("hour")
		}
		rest = rest[2:]
	}
	strs := [3]*string{&r.Tenant, &r.Metric, &r.Device}
	for i, name := range [3]string{"tenant", "metric", "device"} {
		n := bytes.IndexByte(rest, 0)
		if n < 0 {
			return bad(name)
		}
		*strs[i] = string(rest[:n])
		rest = rest[n+1:]
	}
	if len(rest) != 8+2+8 {
		return bad("minute, writer and part")
	}
	r.Minute = int64(binary.BigEndian.Uint64(rest) ^ (1 << 63))
	r.Writer = binary.BigEndian.Uint16(rest[8:])
	r.Part = binary.BigEndian.Uint64(rest[10:])
	return nil
}

// Insert keeps, for each row, the highest version of it, durably. It reads
// nothing: the rows of each device-minute are one merge operand, and the
// store's merger keeps of each metric the row with the highest version,
// whatever order they arrive in and however a device-minute's rows are
// split over inserts. Rows of one device-minute are best given together
// (Compute gives them so): each run of them is one operand.
func (s *Store) Insert(ctx context.Context, rows []rollup.Row) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	b := s.db.NewBatch()
	defer b.Close()
	var k, v []byte
	var scratch []rollup.Row
	for i := 0; i < len(rows); {
		j := runEnd(rows, i)
		for n := i; n < j; n++ {
			if r := &rows[n]; r.Tenant == "" || r.Device == "" || r.Metric == "" {
				return fmt.Errorf("insert rollup rows: row %d: tenant %q, device %q and metric %q must not be empty", n, r.Tenant, r.Device, r.Metric)
			}
		}
		run := minuteRun(rows[i:j], scratch)
		if len(run) > 0 && &run[0] != &rows[i] {
			scratch = run[:0]
		}
		k, v = AppendMinute(k[:0], v[:0], run)
		if err := b.Merge(k, v, nil); err != nil {
			return fmt.Errorf("insert rollup rows: %w", err)
		}
		i = j
	}
	if err := s.db.Apply(b, pebble.Sync); err != nil {
		return fmt.Errorf("insert %d rollup rows: %w", len(rows), err)
	}
	return nil
}

// Rows returns the latest version of every row in the filter's range,
// tombstones excluded, in no particular order. It reads the filter's hours
// of each day that has rows, and a day's rows in the legacy layout if it
// has any.
func (s *Store) Rows(ctx context.Context, f rollup.Filter) ([]rollup.Row, error) {
	var out []rollup.Row
	if err := s.EachRow(ctx, f, func(r rollup.Row) { out = append(out, r) }); err != nil {
		return nil, err
	}
	return out, nil
}

// EachRow calls fn with the rows Rows returns, as it reads them, holding
// none (but on a day that also holds keys of an older layout, whose rows
// are gathered to keep each one's highest version, as Rows does): for a
// reader that folds them, whose memory then does not grow with the rows.
// Each row is fn's to keep.
func (s *Store) EachRow(ctx context.Context, f rollup.Filter, fn func(r rollup.Row)) error {
	from, to := rollup.MinuteOf(f.From), f.To
	if to <= from {
		return nil
	}
	first, last := model.DayOf(from), model.DayOf(to-1)
	it, err := s.db.NewIterWithContext(ctx, &pebble.IterOptions{LowerBound: dayPrefix(nil, first), UpperBound: dayPrefix(nil, last+1)})
	if err != nil {
		return fmt.Errorf("read rollup rows: %w", err)
	}
	live := func(r rollup.Row) {
		if r.Count > 0 {
			fn(r)
		}
	}
	for day := first; day <= last; day++ {
		// Jump over days without rows.
		if !it.SeekGE(dayPrefix(nil, day)) {
			if err := it.Error(); err != nil {
				_ = it.Close()
				return fmt.Errorf("read rollup rows: %w", err)
			}
			break
		}
		if day = dayOfKey(it.Key()); day > last {
			break
		}
		lo, hi := 0, 23
		if day == first {
			lo = hourOf(from)
		}
		if day == last {
			hi = hourOf(to - 1)
		}
		hasHour, legacy, err := oldLayouts(it, day)
		if err != nil {
			_ = it.Close()
			return fmt.Errorf("read rollup rows: %w", err)
		}
		emit := live
		var both map[rowID]rollup.Row
		if hasHour || legacy {
			// A row may be in more than one layout (written before an
			// upgrade and recomputed after it): keep its highest version,
			// tombstones included, before leaving them out.
			both = map[rowID]rollup.Row{}
			emit = func(r rollup.Row) {
				id := rowID{r.Key, r.Writer, r.Part}
				if o, ok := both[id]; !ok || r.Version > o.Version {
					both[id] = r
				}
			}
		}
		for h := lo; h <= hi; h++ {
			if err := scanMinutes(it, minutePrefix(nil, day, h), f, from, to, emit); err != nil {
				_ = it.Close()
				return err
			}
		}
		for h := lo; h <= hi && hasHour; h++ {
			if err := scanUnder(it, hourPrefix(nil, day, h), f, from, to, emit); err != nil {
				_ = it.Close()
				return err
			}
		}
		if legacy {
			if err := scanUnder(it, dayPrefix(nil, day), f, from, to, emit); err != nil {
				_ = it.Close()
				return err
			}
		}
		if both != nil {
			// In key order, so that a query's sums add up the same way
			// each time.
			for _, id := range slices.SortedFunc(maps.Keys(both), compareIDs) {
				live(both[id])
			}
		}
	}
	if err := it.Close(); err != nil {
		return fmt.Errorf("read rollup rows: %w", err)
	}
	return nil
}

// oldLayouts reports whether day holds keys in the by-hour and in the
// legacy layout (written before the by-minute one), through it, an
// iterator whose bounds include the day.
func oldLayouts(it *pebble.Iterator, day model.Day) (hasHour, legacy bool, err error) {
	if it.SeekGE(hourPrefix(nil, day, 0)) {
		k := it.Key()
		hasHour = dayOfKey(k) == day && len(k) > 5 && k[4] == 0 && k[5] < minuteHour
	}
	// Legacy keys follow the day's hours (a tenant's first byte is above
	// their 0).
	legacy = it.SeekGE(append(dayPrefix(nil, day), 1)) && dayOfKey(it.Key()) == day
	return hasHour, legacy, it.Error()
}

// scanMinutes calls emit with every row under base (an hour's by-minute
// prefix) that f and [from, to) select, tombstones included. Under a
// tenant, the keys are in device order, so a filter's devices are one
// range of them.
func scanMinutes(it *pebble.Iterator, base []byte, f rollup.Filter, from, to int64, emit func(rollup.Row)) error {
	p := under(bytes.Clone(base), f.Tenant, f.Device, "")
	lo, end := p, []byte(nil)
	if f.Tenant != "" && f.Device == "" {
		lo = append(bytes.Clone(p), f.DeviceFrom...)
		if f.DeviceTo != "" {
			end = append(bytes.Clone(p), f.DeviceTo...)
		}
	}
	var key rollup.Row
	for ok := it.SeekGE(lo); ok && bytes.HasPrefix(it.Key(), p) && (end == nil || bytes.Compare(it.Key(), end) < 0); ok = it.Next() {
		k := it.Key()
		if err := parseMinuteKey(k, &key); err != nil {
			return err
		}
		if key.Minute < from || key.Minute >= to || !f.HasDevice(key.Device) {
			continue
		}
		err := eachMinuteEntry(it.Value(), func(metric, value []byte) error {
			if f.Metric != "" && string(metric) != f.Metric {
				return nil
			}
			r := key
			r.Metric = string(metric)
			if err := rollup.DecodeValue(value, &r); err != nil {
				return fmt.Errorf("metric %q: %w", metric, err)
			}
			emit(r)
			return nil
		})
		if err != nil {
			return fmt.Errorf("decode rollup entry %x: %w", k, err)
		}
	}
	return it.Error()
}

// rowID is what names a row: the rest of it is its aggregate and version.
type rowID struct {
	rollup.Key
	writer uint16
	part   uint64
}

func compareIDs(a, b rowID) int {
	return cmp.Or(strings.Compare(a.Tenant, b.Tenant), strings.Compare(a.Metric, b.Metric), strings.Compare(a.Device, b.Device),
		cmp.Compare(a.Minute, b.Minute), cmp.Compare(a.writer, b.writer), cmp.Compare(a.part, b.part))
}

// scanUnder calls emit with every row under base (an hour's prefix, or a
// day's for the legacy layout) that f and [from, to) select, tombstones
// included.
func scanUnder(it *pebble.Iterator, base []byte, f rollup.Filter, from, to int64, emit func(rollup.Row)) error {
	var ok bool
	// scan reads the rows under p, and below end if it is not nil, from the
	// iterator's position on.
	scan := func(p, end []byte) error {
		for ; ok && bytes.HasPrefix(it.Key(), p) && (end == nil || bytes.Compare(it.Key(), end) < 0); ok = it.Next() {
			r, err := decode(it.Key(), it.Value())
			if err != nil {
				return err
			}
			if r.Minute < from || r.Minute >= to || !f.HasDevice(r.Device) {
				continue
			}
			emit(r)
		}
		return nil
	}
	devices := f.Device != "" || f.DeviceFrom != "" || f.DeviceTo != ""
	if devices && f.Metric == "" && f.Tenant != "" {
		// Some devices, every metric: the devices sit under each metric of
		// the tenant, so jump from metric to metric instead of reading
		// every device's rows. A device's key part is its name and a 0, so
		// names order their keys, and a key is below the bytes of DeviceTo
		// exactly when its device is.
		tp := under(bytes.Clone(base), f.Tenant, "", "")
		for ok = it.SeekGE(tp); ok && bytes.HasPrefix(it.Key(), tp); {
			rest := it.Key()[len(tp):]
			i := bytes.IndexByte(rest, 0)
			if i < 0 {
				return fmt.Errorf("read rollup rows: key %x has no metric", it.Key())
			}
			metric := string(rest[:i])
			mp := under(bytes.Clone(base), f.Tenant, metric, f.Device)
			lo, end := deviceRange(mp, f)
			if ok = it.SeekGE(lo); !ok && it.Error() != nil {
				return it.Error() // the next metric's seek would clear it
			}
			if err := scan(mp, end); err != nil {
				return err
			}
			ok = it.SeekGE(append(append(bytes.Clone(tp), metric...), 1)) // the next metric
		}
		return it.Error()
	}
	p := under(bytes.Clone(base), f.Tenant, f.Metric, f.Device)
	lo, end := p, []byte(nil)
	if f.Tenant != "" && f.Metric != "" {
		lo, end = deviceRange(p, f)
	}
	if len(lo) == 4 {
		// A day's prefix alone (the legacy layout, every tenant): start
		// past the day's hours, which sort before every tenant.
		lo = append(bytes.Clone(lo), 1)
	}
	ok = it.SeekGE(lo)
	if err := scan(p, end); err != nil {
		return err
	}
	return it.Error()
}

// deviceRange returns where the rows of f's devices begin under mp, a
// prefix ending with a metric (or a device, when f names one), and the key
// they end before (nil: the prefix's end).
func deviceRange(mp []byte, f rollup.Filter) (lo, end []byte) {
	if f.Device != "" {
		return mp, nil
	}
	lo = append(bytes.Clone(mp), f.DeviceFrom...)
	if f.DeviceTo != "" {
		end = append(bytes.Clone(mp), f.DeviceTo...)
	}
	return lo, end
}

// Devices lists, sorted, the devices of tenant (not empty) with live
// rollup rows on day, keeping none of the rows. On a day that also holds
// rows in a layout before the by-minute one, a row is live by its highest
// version in any layout, which point reads of its other keys find.
func (s *Store) Devices(ctx context.Context, tenant string, day model.Day) ([]string, error) {
	if tenant == "" {
		return nil, errors.New("list devices with rollups: no tenant")
	}
	it, err := s.db.NewIterWithContext(ctx, &pebble.IterOptions{LowerBound: dayPrefix(nil, day), UpperBound: dayPrefix(nil, day+1)})
	if err != nil {
		return nil, fmt.Errorf("list devices with rollups: %w", err)
	}
	seen, err := s.devices(it, tenant, day)
	if cerr := it.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return nil, fmt.Errorf("list devices with rollups: %w", err)
	}
	return slices.Sorted(maps.Keys(seen)), nil
}

// devices is Devices through it, an iterator over the day.
func (s *Store) devices(it *pebble.Iterator, tenant string, day model.Day) (map[string]struct{}, error) {
	hasHour, legacy, err := oldLayouts(it, day)
	if err != nil {
		return nil, err
	}
	mixed := hasHour || legacy
	seen := map[string]struct{}{}
	// each reads the rows under p; on a day of more than one layout a row
	// counts by its newest version, which others gives the keys of.
	each := func(p []byte, others ...func(rollup.Row) []byte) error {
		for ok := it.SeekGE(p); ok && bytes.HasPrefix(it.Key(), p); {
			var device string
			err := decodeEach(it.Key(), it.Value(), func(r rollup.Row) error {
				device = r.Device
				if _, done := seen[r.Device]; done {
					return nil
				}
				if mixed {
					var err error
					if r, err = s.newest(r, others); err != nil {
						return err
					}
				}
				if r.Count > 0 {
					seen[r.Device] = struct{}{}
				}
				return nil
			})
			if err != nil {
				return err
			}
			if _, done := seen[device]; done && isMinuteKey(it.Key()) {
				// By minute, a device's keys are together: skip the rest.
				ok = it.SeekGE(append(append(bytes.Clone(p), device...), 1))
				continue
			}
			ok = it.Next()
		}
		return it.Error()
	}
	var olds []func(rollup.Row) []byte
	if hasHour {
		olds = append(olds, hourKey)
	}
	if legacy {
		olds = append(olds, legacyKey)
	}
	minuteKey := func(r rollup.Row) []byte { return appendKey(nil, &r) }
	for h := range 24 {
		if err := each(under(minutePrefix(nil, day, h), tenant, "", ""), olds...); err != nil {
			return nil, err
		}
	}
	for h := 0; h < 24 && hasHour; h++ {
		if err := each(under(hourPrefix(nil, day, h), tenant, "", ""), minuteKey, legacyKey); err != nil {
			return nil, err
		}
	}
	if legacy {
		if err := each(under(dayPrefix(nil, day), tenant, "", ""), minuteKey, hourKey); err != nil {
			return nil, err
		}
	}
	return seen, nil
}

// newest returns r, or the row of r's metric stored under one of keys (r's
// keys in the other layouts) if that one has a higher version.
func (s *Store) newest(r rollup.Row, keys []func(rollup.Row) []byte) (rollup.Row, error) {
	best := r
	for _, key := range keys {
		k := key(r)
		v, closer, err := s.db.Get(k)
		if errors.Is(err, pebble.ErrNotFound) {
			continue
		}
		if err != nil {
			return r, err
		}
		err = decodeEach(k, v, func(o rollup.Row) error {
			if o.Metric == r.Metric && o.Version > best.Version {
				best = o
			}
			return nil
		})
		_ = closer.Close()
		if err != nil {
			return r, err
		}
	}
	return best, nil
}

// Series folds one device's metric into buckets of the step.
func (s *Store) Series(ctx context.Context, f rollup.Filter, step rollup.Step) ([]rollup.Bucket, error) {
	rows, err := s.Rows(ctx, f)
	if err != nil {
		return nil, err
	}
	return rollup.Combine(rows, step), nil
}

// Top ranks the devices of a metric.
func (s *Store) Top(ctx context.Context, f rollup.Filter, by rollup.By, limit int) ([]rollup.Rank, error) {
	rows, err := s.Rows(ctx, f)
	if err != nil {
		return nil, err
	}
	return rollup.Top(rows, by, limit), nil
}

// Retention. A rollup bucket is one UTC day of every tenant (Tenant ""),
// as in ClickHouse, dropped with one range delete. There is no catalogue.

// Buckets lists the days before the given one that hold rollups.
func (s *Store) Buckets(ctx context.Context, before model.Day) ([]store.Bucket, error) {
	it, err := s.db.NewIterWithContext(ctx, &pebble.IterOptions{UpperBound: dayPrefix(nil, before)})
	if err != nil {
		return nil, fmt.Errorf("list rollup days: %w", err)
	}
	var out []store.Bucket
	for ok := it.First(); ok; ok = it.SeekGE(dayPrefix(nil, out[len(out)-1].Day+1)) {
		out = append(out, store.Bucket{Kind: store.BucketRollups, Day: dayOfKey(it.Key())})
	}
	if err := it.Close(); err != nil {
		return nil, fmt.Errorf("list rollup days: %w", err)
	}
	return out, nil
}

// Measure counts the day's rollup rows (every version and tombstone kept;
// a device-minute key holds one per metric) and their bytes.
func (s *Store) Measure(ctx context.Context, b store.Bucket) (store.BucketSize, error) {
	var size store.BucketSize
	if b.Kind != store.BucketRollups {
		return size, nil
	}
	it, err := s.db.NewIterWithContext(ctx, &pebble.IterOptions{LowerBound: dayPrefix(nil, b.Day), UpperBound: dayPrefix(nil, b.Day+1)})
	if err != nil {
		return size, fmt.Errorf("measure %s: %w", b, err)
	}
	for ok := it.First(); ok; ok = it.Next() {
		if isMinuteKey(it.Key()) {
			size.Rows += minuteRows(it.Value())
		} else {
			size.Rows++
		}
		size.Bytes += int64(len(it.Key()) + len(it.Value()))
	}
	if err := it.Close(); err != nil {
		return size, fmt.Errorf("measure %s: %w", b, err)
	}
	if size.Rows > 0 {
		size.Partitions = 1
	}
	return size, nil
}

// DropData drops the day with one durable range delete.
func (s *Store) DropData(_ context.Context, b store.Bucket) (int, error) {
	if b.Kind != store.BucketRollups {
		return 0, nil
	}
	if err := s.db.DeleteRange(dayPrefix(nil, b.Day), dayPrefix(nil, b.Day+1), pebble.Sync); err != nil {
		return 0, fmt.Errorf("drop %s: %w", b, err)
	}
	return 1, nil
}

// DropCatalogue does nothing: the embedded rollup store has no catalogue.
func (s *Store) DropCatalogue(context.Context, store.Bucket) (int, error) { return 0, nil }
