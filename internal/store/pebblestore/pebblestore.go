// Package pebblestore is the embedded storage backend: Sluice's tables laid
// out as ordered keys in one Pebble database. A partition is one contiguous
// key range ordered by its clustering key, and one day of one table is one
// contiguous range, so retention drops days with range deletes and never
// writes a per-row tombstone. Commit returns only after an fsync of the WAL.
package pebblestore

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/cockroachdb/pebble/v2"

	"github.com/sluicehq/sluice/internal/membudget"
	"github.com/sluicehq/sluice/internal/model"
	"github.com/sluicehq/sluice/internal/pebblelog"
	"github.com/sluicehq/sluice/internal/pebblemetrics"
	"github.com/sluicehq/sluice/internal/store"
)

// Options tune the embedded store.
type Options struct {
	CacheBytes    int64 // block cache size; 64 MiB if not positive
	MemTableBytes int64 // size of a memtable; 64 MiB if not positive
	// MemTables is how many memtables (the one written and those waiting
	// for their flush) may be held before writes wait; 4 if not positive.
	MemTables int
	// NoSync skips the fsync on commit. Only benchmarks that measure the
	// cost of durability set it.
	NoSync bool
}

// Store is an open embedded store. Its methods are safe for concurrent use.
type Store struct {
	db     *pebble.DB
	po     *pebble.Options // what db was opened with: its tables' format
	dir    string
	logger *slog.Logger
	wo     *pebble.WriteOptions
	ver    versions
	sealMu sync.Mutex // serialises PutAuditSeal's check and write
	// leafFiles numbers the files that seals write their leaves to.
	leafFiles atomic.Uint64
	stalls    *pebblemetrics.Stalls // Pebble's write stalls, for the metrics
}

// Version returns the version of the next batch (sink.Versioner): catalogue
// entries of a later version win however the commits land, so the sink
// commits batches that share entries concurrently.
func (s *Store) Version() int64 { return s.ver.next() }

// OptionsFor returns the options of the store under memory plan p: its
// memtables and block cache (store.pebble.cache_bytes when 0).
func OptionsFor(p membudget.Plan) Options {
	return Options{CacheBytes: p.StoreCache, MemTableBytes: p.StoreMemTable, MemTables: p.StoreMemTables}
}

// Open opens (creating if needed) the store in dir.
func Open(dir string, opts Options, logger *slog.Logger) (*Store, error) {
	st := &pebblemetrics.Stalls{}
	db, po, err := openDB(dir, opts, logger, st)
	if err != nil {
		return nil, fmt.Errorf("open embedded store %q: %w", dir, err)
	}
	// A seal's leaves written before a crash were never ingested: the next
	// seal of the day writes them again.
	if err := resetLeavesDir(dir, po); err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("open embedded store %q: %w", dir, err)
	}
	wo := pebble.Sync
	if opts.NoSync {
		wo = pebble.NoSync
	}
	return &Store{db: db, po: po, dir: dir, logger: logger, wo: wo, stalls: st}, nil
}

// OpenDB opens the Pebble database in dir with the store's settings (block
// cache and memtables of opts; merger), without the store around it: what
// the benchmarks' raw-store limits write to, so that they are measured on
// the same settings.
func OpenDB(dir string, opts Options, logger *slog.Logger) (*pebble.DB, error) {
	db, _, err := openDB(dir, opts, logger, nil)
	return db, err
}

// openDB opens the Pebble database in dir and returns it with the options
// it was opened with. Its write stalls are counted in st, unless st is nil.
func openDB(dir string, opts Options, logger *slog.Logger, st *pebblemetrics.Stalls) (*pebble.DB, *pebble.Options, error) {
	cacheBytes, memTable, memTables := opts.CacheBytes, opts.MemTableBytes, opts.MemTables
	if cacheBytes <= 0 {
		cacheBytes = 64 << 20
	}
	if memTable <= 0 {
		memTable = 64 << 20
	}
	if memTables <= 0 {
		memTables = 4
	}
	cache := pebble.NewCache(cacheBytes)
	defer cache.Unref()
	po := &pebble.Options{
		Cache:                       cache,
		Merger:                      storeMerger,
		Logger:                      pebblelog.New(logger, "pebble"),
		MemTableSize:                uint64(memTable),
		MemTableStopWritesThreshold: memTables,
		L0CompactionThreshold:       l0CompactionThreshold,
		L0StopWritesThreshold:       l0StopWritesThreshold,
		FormatMajorVersion:          pebble.FormatNewest,
	}
	for i := range po.Levels {
		po.Levels[i].BlockSize = dataBlockSize
		po.Levels[i].IndexBlockSize = indexBlockSize
	}
	if st != nil {
		po.EventListener = st.Listener()
	}
	// Defaulted here, not only in the copy Open makes: the leaf tables a
	// seal writes take their format from po.
	po.EnsureDefaults()
	db, err := pebble.Open(dir, po)
	if err != nil {
		return nil, nil, err
	}
	return db, po, nil
}

// dataBlockSize is the size of a table's data blocks before compression
// (Pebble's default is 4 KiB; CockroachDB, Pebble's main user, writes 32
// KiB). Flushes and compactions pay a cost per block (its compression,
// checksum and index entry) that larger blocks spread over more keys, and
// the catalogue reloads of a large fleet, read in key order a round at a
// time, find more of the keys they look for in a block they just read. A
// read of one key that misses the block cache decompresses a larger block.
// The fleet benchmark, 8,000,000 readings a run, rollups off: a million
// devices 6.63 and 5.71 against 5.78 and 5.06 CPU-s per million readings,
// 10,000 devices 3.68 and 4.02 against 3.49 and 3.80 (docs/benchmarks.md,
// item 30).
const dataBlockSize = 32 << 10

// indexBlockSize is the size a table's index may reach before Pebble
// splits it into a second level. Pebble's default (the data block size,
// then 4 KiB) gave every table of more than about a hundred data blocks a
// two-level index, and a lookup that misses the block cache then reads a
// second-level index block of every level it seeks: with a million devices
// a day (rollups off) those reads were a fifth of the gateway's CPU, in the
// planner's catalogue reloads. A table's index in one block is read once
// and usually stays cached, as every lookup in the table uses it: the fleet
// benchmark's million devices went from 22.3–23.9 to 12.4–13.2 CPU-s per
// million readings (docs/benchmarks.md). With 32 KiB data blocks a table
// has an eighth as many index entries, and few indexes reach even the
// default; the largest tables, in the bottom level, still would. Tables
// written before keep their index as it is; this only sets how new tables
// are written.
const indexBlockSize = 256 << 10

// l0CompactionThreshold sets how many sublevels of flushed tables level 0
// gathers before Pebble compacts it into the level below: Pebble scores
// level 0 at twice its depth over this threshold and compacts from a score
// of 1, so 8 compacts from four sublevels (Pebble's default, 4, from two)
// while the level below is within its target (500 tables in level 0 also
// start one). Every flush of a day's writes spans every series of the day,
// so each compaction out of level 0 rewrites the day's share of the base level
// beneath it: gathering twice as many flushes a compaction halves how often
// that share is rewritten, and with a million devices a day (a catalogue
// entry a reading, superseded by the device's next write) merges more
// superseded entries before they reach it. A lookup may search twice as
// many level 0 tables. The fleet benchmark's million devices, rollups off,
// 8,000,000 readings a run: 6.40 and 6.79 against 5.71 and 5.78 CPU-s per
// million readings (docs/benchmarks.md, item 29).
const l0CompactionThreshold = 8

// l0StopWritesThreshold is how many level 0 sublevels make writes wait for
// compactions (Pebble's default is 12): far enough above the four at which
// level 0 is compacted that a burst does not stall commits while the
// compaction it started runs.
const l0StopWritesThreshold = 32

// Flush writes the memtables out to tables and waits for it. Every commit
// is durable without it: benchmarks call it to charge each phase with the
// flush of what it wrote.
func (s *Store) Flush() error {
	if err := s.db.Flush(); err != nil {
		return fmt.Errorf("flush embedded store: %w", err)
	}
	return nil
}

// Close flushes nothing extra (every commit is already durable) and closes
// the database.
func (s *Store) Close() error {
	if err := s.db.Close(); err != nil {
		return fmt.Errorf("close embedded store: %w", err)
	}
	return nil
}

// Commit writes the batch atomically and durably.
func (s *Store) Commit(ctx context.Context, b *store.Batch) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	pb := s.db.NewBatchWithSize(batchSize(b))
	defer pb.Close()
	var key, val []byte
	for _, pw := range b.Partitions {
		prefix := partitionPrefix(key[:0], pw.Key)
		plen := len(prefix)
		key = prefix
		var err error
		if key, val, err = appendReadings(pb, key, val, pw.Readings); err != nil {
			return fmt.Errorf("stage readings of %v: %w", pw.Key, err)
		}
		for _, e := range pw.Events {
			key = appendTS(key[:plen], e.TS)
			key = append(key, e.EventID...)
			val = encodeAudit(val[:0], e)
			if err := pb.Set(key, val, nil); err != nil {
				return fmt.Errorf("stage audit event of %v: %w", pw.Key, err)
			}
			// The id index points at the event's home, for the idempotency check.
			ik := auditIDKey(nil, pw.Key.Tenant, model.DayOf(e.TS), e.EventID)
			iv := appendStr(nil, pw.Key.Series)
			iv = appendTS(binary.BigEndian.AppendUint32(iv, pw.Key.Sub), e.TS)
			if err := pb.Set(ik, iv, nil); err != nil {
				return fmt.Errorf("stage audit id: %w", err)
			}
		}
		key = key[:0]
	}
	for _, pi := range b.Catalogue {
		key, val = AppendEntry(key[:0], val[:0], pi, b.Version)
		if err := pb.Merge(key, val, nil); err != nil {
			return fmt.Errorf("stage catalogue entry %v: %w", pi.Key, err)
		}
	}
	for _, dl := range b.DeadLetters {
		k := appendTS(deadPrefix(nil, dl.Tenant, model.DayOf(dl.TS)), dl.TS)
		k = append(k, dl.ID...)
		if err := pb.Set(k, encodeDead(nil, dl), nil); err != nil {
			return fmt.Errorf("stage dead letter: %w", err)
		}
	}
	if b.Also != nil {
		if err := b.Also(batchSetter{pb}); err != nil {
			return fmt.Errorf("stage the batch's companion keys: %w", err)
		}
	}
	if err := s.db.Apply(pb, s.wo); err != nil {
		return fmt.Errorf("commit %d rows: %w", b.Rows(), err)
	}
	return nil
}

// batchSetter hands a Pebble batch to store.Batch.Also.
type batchSetter struct{ b *pebble.Batch }

func (w batchSetter) Set(key, value []byte) error { return w.b.Set(key, value, nil) }

// MarksIn returns the database and the key range (every key starting with
// the prefix) in which the rollups keep their marks (rollmarks.In), so
// that a commit carries the marks of its minutes in its own write
// (store.Batch.Also). No table of the store uses that range.
func (s *Store) MarksIn() (*pebble.DB, []byte) { return s.db, []byte{tabMarks} }

// batchSize estimates the bytes of b in a Pebble batch, so that the batch
// is allocated once instead of grown by copying as rows are added.
func batchSize(b *store.Batch) int {
	n := 64
	for _, pw := range b.Partitions {
		key := 32 + len(pw.Key.Tenant) + len(pw.Key.Series) // prefix, timestamp, lengths
		n += len(pw.Readings) * (key + 32)
		for _, e := range pw.Events {
			n += 2*key + int(e.Size()) + 32 // the event and its id index entry
		}
	}
	return n + 64*len(b.Catalogue)
}

// Catalogue returns every partition of one series-day, ordered by sub-bucket.
func (s *Store) Catalogue(ctx context.Context, sd model.SeriesDay) ([]model.PartitionInfo, error) {
	out, err := s.Catalogues(ctx, []model.SeriesDay{sd})
	if err != nil {
		return nil, err
	}
	return out[0], nil
}

// Catalogues reads the catalogues of many series-days (out[i] for sds[i])
// with one iterator, seeking forward through them in key order: with many
// distinct devices, a new iterator per series-day was most of the CPU of
// the rounds that load them.
func (s *Store) Catalogues(ctx context.Context, sds []model.SeriesDay) ([][]model.PartitionInfo, error) {
	return catalogues(ctx, s, sds)
}

func catalogues(ctx context.Context, src iterSource, sds []model.SeriesDay) ([][]model.PartitionInfo, error) {
	out := make([][]model.PartitionInfo, len(sds))
	if len(sds) == 0 {
		return out, nil
	}
	prefixes, order := sortedKeys(len(sds), func(b []byte, i int) []byte { return seriesDayCataloguePrefix(b, sds[i]) })
	it, release, err := src.iter(ctx, prefixes[order[0]], prefixEnd(prefixes[order[len(order)-1]]))
	if err != nil {
		return nil, fmt.Errorf("read catalogues of %d series-days: %w", len(sds), err)
	}
	var m mark // where the last read left the iterator
	for n, i := range order {
		if n%256 == 0 {
			if err := ctx.Err(); err != nil {
				_ = release()
				return nil, err
			}
		}
		if out[i], err = readCatalogue(out[i], it, &m, prefixes[i], sds[i]); err != nil {
			_ = release()
			return nil, err
		}
	}
	if err := release(); err != nil {
		return nil, fmt.Errorf("read catalogues of %d series-days: %w", len(sds), err)
	}
	return out, nil
}

// readCatalogue appends to out the catalogue entries of sd, whose keys
// start with p, read through it from where m says it stands (span.seek),
// and records in m that it stands past them.
func readCatalogue(out []model.PartitionInfo, it *span, m *mark, p []byte, sd model.SeriesDay) ([]model.PartitionInfo, error) {
	for ok := it.seek(m, p); ok && bytes.HasPrefix(it.Key(), p); ok = it.Next() {
		k := it.Key()
		if len(k) != len(p)+4 {
			continue // a longer series name with this one's encoding as a prefix
		}
		pi := model.PartitionInfo{Key: sd.Partition(binary.BigEndian.Uint32(k[len(p):]))}
		if err := decodeInfo(it.Value(), &pi); err != nil {
			return nil, fmt.Errorf("read catalogue entry %v: %w", pi.Key, err)
		}
		out = append(out, pi)
	}
	// The next SeekGE clears the iterator's error: check it before, or a
	// read that failed midway would return a catalogue cut short.
	if err := it.Error(); err != nil {
		return nil, fmt.Errorf("read catalogue of %v: %w", sd, err)
	}
	m.setPastPrefix(p)
	return out, nil
}

// CatalogueEmpty reports whether no catalogue entry of day d is stored
// (sink.CatalogueDays).
func (s *Store) CatalogueEmpty(ctx context.Context, d model.Day) (bool, error) {
	lower := appendDay([]byte{tabCatalogue}, d)
	it, release, err := s.iter(ctx, lower, prefixEnd(lower))
	if err != nil {
		return false, fmt.Errorf("look for catalogue entries of %v: %w", d, err)
	}
	empty := !it.it.First()
	if err := release(); err != nil {
		return false, fmt.Errorf("look for catalogue entries of %v: %w", d, err)
	}
	return empty, nil
}

// sortedKeys builds n keys with appendKey into one shared buffer and
// returns them with their indexes in key order: what a batch of lookups
// through one iterator, seeking forward, needs.
func sortedKeys(n int, appendKey func(b []byte, i int) []byte) (keys [][]byte, order []int) {
	// Built first, then sliced, since appending may move the buffer.
	var buf []byte
	ends := make([]int, n)
	for i := range n {
		buf = appendKey(buf, i)
		ends[i] = len(buf)
		if i == 0 {
			// Room for the rest at about the first's length, so that the
			// buffer is not grown a dozen times over a round's keys.
			buf = slices.Grow(buf, (n-1)*(len(buf)+len(buf)/4))
		}
	}
	keys, order = make([][]byte, n), make([]int, n)
	start := 0
	for i, end := range ends {
		keys[i], order[i] = buf[start:end:end], i
		start = end
	}
	slices.SortFunc(order, func(a, b int) int { return bytes.Compare(keys[a], keys[b]) })
	return keys, order
}

// AuditSeen reports, for each id, whether an event with that id is stored.
// It looks the ids up in key order through one iterator: a Get per id
// would open the iterators of every level's table again and read its index
// blocks, and with many ids a day those miss the block cache (half the CPU
// of ingesting a million audit events on the default memory budget).
func (s *Store) AuditSeen(ctx context.Context, ids []store.AuditID) ([]bool, error) {
	seen := make([]bool, len(ids))
	if len(ids) == 0 {
		return seen, nil
	}
	keys, order := sortedKeys(len(ids), func(b []byte, i int) []byte { return auditIDKey(b, ids[i].Tenant, ids[i].Day, ids[i].EventID) })
	it, err := s.db.NewIterWithContext(ctx, &pebble.IterOptions{
		LowerBound: keys[order[0]],
		UpperBound: append(bytes.Clone(keys[order[len(order)-1]]), 0),
	})
	if err != nil {
		return nil, fmt.Errorf("look up %d audit ids: %w", len(ids), err)
	}
	for n, i := range order {
		if n%256 == 0 {
			if err := ctx.Err(); err != nil {
				_ = it.Close()
				return nil, err
			}
		}
		k := keys[i]
		if !it.SeekGE(k) {
			// The next seek clears a read error: an id must not be taken
			// for unseen because its read failed.
			if err := it.Error(); err != nil {
				_ = it.Close()
				return nil, fmt.Errorf("look up audit id %q: %w", ids[i].EventID, err)
			}
			continue
		}
		seen[i] = bytes.Equal(it.Key(), k)
	}
	if err := it.Close(); err != nil {
		return nil, fmt.Errorf("look up %d audit ids: %w", len(ids), err)
	}
	return seen, nil
}

// scan iterates the rows of one partition inside r, at most limit of them,
// calling fn with the clustering key suffix (ts then key) and value.
func scan(ctx context.Context, src iterSource, pk model.PartitionKey, r store.Range, limit int, fn func(ts int64, ck, v []byte) error) error {
	if err := scanPrefix(ctx, src, partitionPrefix(nil, pk), r, limit, fn); err != nil {
		return fmt.Errorf("scan %v: %w", pk, err)
	}
	return nil
}

// scanPrefix iterates the keys prefix+ts+ck inside r.
func scanPrefix(ctx context.Context, src iterSource, prefix []byte, r store.Range, limit int, fn func(ts int64, ck, v []byte) error) error {
	lower := appendTS(append([]byte(nil), prefix...), r.From)
	if r.After != nil {
		after := appendTS(append([]byte(nil), prefix...), r.After.TS)
		after = append(append(after, r.After.Key...), 0) // the smallest key after it
		if bytes.Compare(after, lower) > 0 {
			lower = after
		}
	}
	upper := appendTS(append([]byte(nil), prefix...), r.To)
	if bytes.Compare(lower, upper) >= 0 {
		return nil
	}
	it, release, err := src.iter(ctx, lower, upper)
	if err != nil {
		return err
	}
	n := 0
	for ok := it.First(); ok && n < limit; ok = it.Next() {
		k := it.Key()[len(prefix):]
		if len(k) < 8 {
			_ = release()
			return fmt.Errorf("short key: %w", errCorrupt)
		}
		ts := int64(binary.BigEndian.Uint64(k) ^ 1<<63)
		if err := fn(ts, k[8:], it.Value()); err != nil {
			_ = release()
			return err
		}
		n++
	}
	if err := release(); err != nil {
		return err
	}
	return nil
}

// ScanReadings returns up to limit rows of a readings partition inside r, in
// clustering order (TS, metric).
func (s *Store) ScanReadings(ctx context.Context, pk model.PartitionKey, r store.Range, limit int) ([]model.ReadingRow, error) {
	return scanReadings(ctx, s, pk, r, limit)
}

// ScanAudit returns up to limit events of an audit partition inside r, in
// clustering order (TS, event id).
func (s *Store) ScanAudit(ctx context.Context, pk model.PartitionKey, r store.Range, limit int) ([]model.AuditEvent, error) {
	return scanAudit(ctx, s, pk, r, limit)
}

func scanAudit(ctx context.Context, src iterSource, pk model.PartitionKey, r store.Range, limit int) ([]model.AuditEvent, error) {
	var out []model.AuditEvent
	err := scan(ctx, src, pk, r, limit, func(ts int64, ck, v []byte) error {
		e := model.AuditEvent{TS: ts, EventID: string(ck), Stream: pk.Series}
		if err := decodeAudit(v, &e); err != nil {
			return err
		}
		out = append(out, e)
		return nil
	})
	return out, err
}

// ScanDeadLetters returns up to limit dead letters of one tenant-day inside
// r, in (TS, ID) order.
func (s *Store) ScanDeadLetters(ctx context.Context, tenant string, day model.Day, r store.Range, limit int) ([]model.DeadLetter, error) {
	prefix := deadPrefix(nil, tenant, day)
	var out []model.DeadLetter
	err := scanPrefix(ctx, s, prefix, r, limit, func(ts int64, ck, v []byte) error {
		dl := model.DeadLetter{Tenant: tenant, TS: ts, ID: string(ck)}
		if err := decodeDead(v, &dl); err != nil {
			return err
		}
		out = append(out, dl)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("scan dead letters of %s on %s: %w", tenant, day, err)
	}
	return out, nil
}
