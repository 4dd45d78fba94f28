// Package rollmarks keeps on the gateway's disk the minutes whose rollups
// may be behind the raw store: every (tenant, device, minute) that a commit
// writes readings to is marked here, durable when the commit is: in the
// embedded raw store's own database, with the commit's own write (In,
// Stage), or, beside a raw store that does not write a batch atomically
// (Cassandra), in a database of its own, synced before the commit reaches
// the raw store (Open, Add). The rollup feed recomputes marked minutes from the
// raw store and forgets their marks once the recomputed rows are stored, so
// that a gateway killed at any point finds on restart every minute it may
// have written without rolling it up.
//
// Marks are grouped in generations (the feed starts a new one on every roll)
// and forgotten a whole generation at a time with one range deletion, so the
// database holds no per-mark tombstones.
package rollmarks

import (
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cockroachdb/pebble/v2"

	"github.com/sluicehq/sluice/internal/pebblelog"
)

// Minute is one marked minute of one device's readings.
type Minute struct {
	Tenant string
	Device string
	Minute int64 // first millisecond of the minute
}

// Store is an open marks database: a Pebble database of its own (Open),
// or a key range of one it shares with the raw store (In), whose commits
// then carry the marks of their own minutes (Stage).
type Store struct {
	db     *pebble.DB
	prefix []byte // every key of the store starts with it; empty when it owns db
	own    bool   // Close closes db

	// seq numbers the keys of packed marks within a run. A run never
	// writes a generation that still holds an earlier run's marks (the
	// feed starts above the highest it finds), so its keys cannot be an
	// earlier run's; seq starts from the clock as a second safeguard.
	seq atomic.Uint64

	mu     sync.Mutex
	forgot uint64 // Forget deleted every generation below it (in this run)
}

func newStore(db *pebble.DB, prefix []byte, own bool) *Store {
	s := &Store{db: db, prefix: prefix, own: own}
	s.seq.Store(uint64(time.Now().UnixNano()))
	return s
}

// In returns the marks kept in db under prefix, a key range the database's
// other users leave alone; db stays its owner's (Close leaves it open).
func In(db *pebble.DB, prefix []byte) *Store {
	return newStore(db, slices.Clone(prefix), false)
}

// Options tune the marks database.
type Options struct {
	MemTableBytes int64 // size of a memtable (up to two are held); 16 MiB if not positive
}

// Open opens (creating if needed) the marks database in dir with the
// default options.
func Open(dir string, logger *slog.Logger) (*Store, error) {
	return OpenWith(dir, Options{}, logger)
}

// OpenWith opens (creating if needed) the marks database in dir.
func OpenWith(dir string, opts Options, logger *slog.Logger) (*Store, error) {
	memTable := opts.MemTableBytes
	if memTable <= 0 {
		memTable = 16 << 20
	}
	db, err := pebble.Open(dir, &pebble.Options{
		Logger: pebblelog.New(logger, "rollmarks"),
		// Marks live seconds to minutes: a small memtable is flushed
		// rarely, since most marks are deleted before it fills.
		MemTableSize:       uint64(memTable),
		FormatMajorVersion: pebble.FormatNewest,
	})
	if err != nil {
		return nil, fmt.Errorf("open rollup marks %q: %w", dir, err)
	}
	return newStore(db, nil, true), nil
}

// Close closes the database (not one shared through In); the marks stay
// on disk.
func (s *Store) Close() error {
	if !s.own {
		return nil
	}
	if err := s.db.Close(); err != nil {
		return fmt.Errorf("close rollup marks: %w", err)
	}
	return nil
}

// Keys. A write's marks are one key, gen (8 bytes, big-endian) | seq (8
// bytes, big-endian), whose value lists them (appendPacked), where seq is
// a number the store takes once per key: a commit of a thousand device-
// minutes inserts one key into the database's memtable, not a thousand at
// scattered places. Until 2026-11-29 each mark was a key of its own, with
// an empty value, which Each still reads:
//
//	gen (8 bytes, big-endian) | uvarint len tenant | tenant | uvarint len
//	device | device | minute (8 bytes, big-endian, sign bit flipped)
//
// The empty value tells the two apart.
func parseKey(k []byte) (uint64, Minute, error) {
	var m Minute
	if len(k) < 8+1+1+8 {
		return 0, m, fmt.Errorf("%w: short key %x", ErrCorrupt, k)
	}
	gen := binary.BigEndian.Uint64(k)
	rest := k[8:]
	str := func() (string, bool) {
		n, w := binary.Uvarint(rest)
		if w <= 0 || n > uint64(len(rest)-w) {
			return "", false
		}
		s := string(rest[w : w+int(n)])
		rest = rest[w+int(n):]
		return s, true
	}
	var ok bool
	if m.Tenant, ok = str(); !ok {
		return 0, m, fmt.Errorf("%w: key %x", ErrCorrupt, k)
	}
	if m.Device, ok = str(); !ok || len(rest) != 8 {
		return 0, m, fmt.Errorf("%w: key %x", ErrCorrupt, k)
	}
	m.Minute = int64(binary.BigEndian.Uint64(rest) ^ (1 << 63))
	return gen, m, nil
}

// packedVersion is the first byte of a packed value:
//
//	packedVersion | uvarint count | count × (uvarint len tenant | tenant |
//	uvarint len device | device | varint minute)
const packedVersion = 1

// maxPacked bounds the marks of one key, so that a large commit's value
// stays well below Pebble's limits and a corrupt count cannot ask for
// more.
const maxPacked = 4096

// appendPackedKey appends the key of a packed value.
func appendPackedKey(b []byte, gen, seq uint64) []byte {
	return binary.BigEndian.AppendUint64(binary.BigEndian.AppendUint64(b, gen), seq)
}

// appendPacked appends the value listing ms (at most maxPacked).
func appendPacked(b []byte, ms []Minute) []byte {
	b = append(b, packedVersion)
	b = binary.AppendUvarint(b, uint64(len(ms)))
	for _, m := range ms {
		b = binary.AppendUvarint(b, uint64(len(m.Tenant)))
		b = append(b, m.Tenant...)
		b = binary.AppendUvarint(b, uint64(len(m.Device)))
		b = append(b, m.Device...)
		b = binary.AppendVarint(b, m.Minute)
	}
	return b
}

// eachPacked calls fn with each mark of packed value v, in order. A
// tenant or device equal to the one before it shares its string.
func eachPacked(v []byte, fn func(Minute) error) error {
	if len(v) == 0 || v[0] != packedVersion {
		return fmt.Errorf("%w: packed value version", ErrCorrupt)
	}
	rest := v[1:]
	n, w := binary.Uvarint(rest)
	// Each mark takes at least three bytes.
	if w <= 0 || n > maxPacked || n > uint64(len(rest)-w)/3 {
		return fmt.Errorf("%w: packed value count", ErrCorrupt)
	}
	rest = rest[w:]
	str := func(prev string) (string, bool) {
		l, w := binary.Uvarint(rest)
		if w <= 0 || l > uint64(len(rest)-w) {
			return "", false
		}
		b := rest[w : w+int(l)]
		rest = rest[w+int(l):]
		if string(b) == prev {
			return prev, true
		}
		return string(b), true
	}
	var m Minute
	for i := range n {
		var ok1, ok2 bool
		m.Tenant, ok1 = str(m.Tenant)
		m.Device, ok2 = str(m.Device)
		var w int
		m.Minute, w = binary.Varint(rest)
		if !ok1 || !ok2 || w <= 0 {
			return fmt.Errorf("%w: packed mark %d", ErrCorrupt, i)
		}
		rest = rest[w:]
		if err := fn(m); err != nil {
			return err
		}
	}
	if len(rest) != 0 {
		return fmt.Errorf("%w: %d bytes after the packed marks", ErrCorrupt, len(rest))
	}
	return nil
}

// Add marks minutes in generation gen and returns once they are synced.
func (s *Store) Add(gen uint64, ms []Minute) error {
	if len(ms) == 0 {
		return nil
	}
	b := s.db.NewBatch()
	defer b.Close()
	if err := s.Stage(pebbleSetter{b}, gen, ms); err != nil {
		return err
	}
	if err := b.Commit(pebble.Sync); err != nil {
		return fmt.Errorf("mark rollup minutes: %w", err)
	}
	return nil
}

// Setter takes the keys of a write in progress: a commit of the database
// the store shares (In), which writes them with its own, atomically. Set
// must copy key and value: the caller reuses them.
type Setter interface {
	Set(key, value []byte) error
}

type pebbleSetter struct{ b *pebble.Batch }

func (p pebbleSetter) Set(key, value []byte) error { return p.b.Set(key, value, nil) }

// Stage adds the marks of minutes, in generation gen, to w: a write of the
// database the store is in, durable when that write is. They take one key
// per maxPacked marks.
func (s *Store) Stage(w Setter, gen uint64, ms []Minute) error {
	var key, value []byte
	for len(ms) > 0 {
		n := min(len(ms), maxPacked)
		key = appendPackedKey(append(key[:0], s.prefix...), gen, s.seq.Add(1))
		value = appendPacked(value[:0], ms[:n])
		if err := w.Set(key, value); err != nil {
			return fmt.Errorf("mark rollup minutes: %w", err)
		}
		ms = ms[n:]
	}
	return nil
}

// versionKey holds the highest version a recompute used; it sorts after
// every mark (a generation of 2^64-1 is never reached).
var versionKey = []byte("\xff\xff\xff\xff\xff\xff\xff\xffversion")

// key returns k under the store's prefix.
func (s *Store) key(k []byte) []byte { return append(slices.Clone(s.prefix), k...) }

// Version returns what SetVersion stored last, 0 if nothing.
func (s *Store) Version() (uint64, error) {
	v, closer, err := s.db.Get(s.key(versionKey))
	if errors.Is(err, pebble.ErrNotFound) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("read the rollup version: %w", err)
	}
	defer closer.Close()
	if len(v) != 8 {
		return 0, fmt.Errorf("%w: version of %d bytes", ErrCorrupt, len(v))
	}
	return binary.BigEndian.Uint64(v), nil
}

// SetVersion stores v, synced.
func (s *Store) SetVersion(v uint64) error {
	if err := s.db.Set(s.key(versionKey), binary.BigEndian.AppendUint64(nil, v), pebble.Sync); err != nil {
		return fmt.Errorf("store the rollup version: %w", err)
	}
	return nil
}

// Each calls fn with every mark, by generation. An error from fn stops it.
func (s *Store) Each(fn func(gen uint64, m Minute) error) (err error) {
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: s.key(nil), UpperBound: s.key(versionKey[:8])})
	if err != nil {
		return fmt.Errorf("read rollup marks: %w", err)
	}
	defer func() {
		if cerr := it.Close(); cerr != nil && err == nil {
			err = fmt.Errorf("read rollup marks: %w", cerr)
		}
	}()
	for ok := it.First(); ok; ok = it.Next() {
		k := it.Key()[len(s.prefix):]
		v, err := it.ValueAndErr()
		if err != nil {
			return fmt.Errorf("read rollup marks: %w", err)
		}
		if len(v) == 0 {
			// One mark, written before marks were packed.
			gen, m, err := parseKey(k)
			if err != nil {
				return err
			}
			if err := fn(gen, m); err != nil {
				return err
			}
			continue
		}
		if len(k) != 16 {
			return fmt.Errorf("%w: key %x of packed marks", ErrCorrupt, k)
		}
		gen := binary.BigEndian.Uint64(k)
		if err := eachPacked(v, func(m Minute) error { return fn(gen, m) }); err != nil {
			return err
		}
	}
	return it.Error()
}

// ErrCorrupt is wrapped by errors about keys that do not parse.
var ErrCorrupt = errors.New("corrupt rollup mark")

// Forget deletes every mark of a generation below gen. It does not sync: a
// deletion lost in a crash only makes the next start recompute those
// minutes again. Each call deletes only the generations the calls before
// it (in this run) did not: range deletions that do not overlap, which
// the database's reads pass over cheaply. (Nested ones, each from the
// first generation, made every read of the raw store, where the marks of
// the embedded store live, pay for all of them: 12 ms a read after ten
// minutes of calls every second.)
func (s *Store) Forget(below uint64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if below <= s.forgot {
		return nil
	}
	start := s.key(nil)
	if s.forgot > 0 {
		start = binary.BigEndian.AppendUint64(start, s.forgot)
	}
	end := binary.BigEndian.AppendUint64(s.key(nil), below)
	if err := s.db.DeleteRange(start, end, pebble.NoSync); err != nil {
		return fmt.Errorf("forget rollup marks: %w", err)
	}
	s.forgot = below
	return nil
}

// TakeOver moves into s the marks, and the version, of a marks database of
// its own left in dir by an earlier Sluice (before marks were kept in the
// raw store), then deletes dir; it returns how many marks it moved. With no
// database in dir it does nothing. The moved marks are synced before dir
// is renamed aside (dir + ".taken-over", removed then, or by the next
// call if a crash came first), so that a crash at any point leaves either
// dir whole, moved again by the next start, or nothing to take over.
func (s *Store) TakeOver(dir string, logger *slog.Logger) (int, error) {
	aside := dir + ".taken-over"
	if err := os.RemoveAll(aside); err != nil {
		return 0, fmt.Errorf("remove %q, whose marks were taken over: %w", aside, err)
	}
	if _, err := os.Stat(dir); errors.Is(err, fs.ErrNotExist) {
		return 0, nil
	} else if err != nil {
		return 0, fmt.Errorf("take over rollup marks in %q: %w", dir, err)
	}
	old, err := Open(dir, logger)
	if err != nil {
		return 0, fmt.Errorf("%w (an earlier Sluice's rollup marks; move the directory aside to start without them, then verify and rebuild the rollups of the minutes written last before it stopped)", err)
	}
	b := s.db.NewBatch()
	defer b.Close()
	n := 0
	var gen uint64
	var ms []Minute
	err = old.Each(func(g uint64, m Minute) error {
		n++
		// Stage splits a long list itself; the bound keeps ms small.
		if g != gen || len(ms) == maxPacked {
			if err := s.Stage(pebbleSetter{b}, gen, ms); err != nil {
				return err
			}
			gen, ms = g, ms[:0]
		}
		ms = append(ms, m)
		return nil
	})
	if err == nil {
		err = s.Stage(pebbleSetter{b}, gen, ms)
	}
	v, verr := old.Version()
	if cerr := old.Close(); err == nil {
		err = cmp.Or(verr, cerr)
	}
	if err != nil {
		return 0, fmt.Errorf("take over rollup marks in %q: %w", dir, err)
	}
	if mine, err := s.Version(); err != nil {
		return 0, err
	} else if v > mine {
		if err := b.Set(s.key(versionKey), binary.BigEndian.AppendUint64(nil, v), nil); err != nil {
			return 0, fmt.Errorf("take over rollup marks in %q: %w", dir, err)
		}
	}
	if err := b.Commit(pebble.Sync); err != nil {
		return 0, fmt.Errorf("take over rollup marks in %q: %w", dir, err)
	}
	if err := os.Rename(dir, aside); err != nil {
		return n, fmt.Errorf("set aside the rollup marks database %q, taken over: %w", dir, err)
	}
	if err := syncDir(filepath.Dir(dir)); err != nil {
		return n, fmt.Errorf("set aside the rollup marks database %q, taken over: %w", dir, err)
	}
	if err := os.RemoveAll(aside); err != nil {
		return n, fmt.Errorf("remove the rollup marks database %q, taken over: %w", aside, err)
	}
	return n, nil
}

// syncDir makes the entries of directory dir durable.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	return cmp.Or(err, d.Close())
}
