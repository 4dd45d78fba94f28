// Package outbox is a bounded, durable FIFO of records waiting to be
// delivered elsewhere: the rollup rows that wait for ClickHouse (with the
// embedded rollup store, only rows whose direct write failed, waiting to be
// retried). It keeps its records in a small Pebble database of its own
// (under data_dir/outbox), so they survive a restart or a crash; Append
// returns only once the record is synced to disk, and does not keep the
// payload it was given.
//
// The outbox is bounded by the bytes of the records it holds. When a record
// does not fit, Append returns ErrFull and stores nothing: the caller decides
// (the rollup feed counts the rows as dropped and marks their days dirty with
// MarkDirty, so that an operator knows which days to rebuild). Records are
// removed only by Ack, after the consumer delivered them, so a consumer that
// crashes between delivery and Ack delivers them again: delivery must be
// idempotent.
//
// Append and MarkDirty may be called concurrently with Peek and Ack; a
// single consumer calls Peek and Ack.
package outbox

import (
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"sync"

	"github.com/cockroachdb/pebble/v2"

	"github.com/sluicehq/sluice/internal/model"
	"github.com/sluicehq/sluice/internal/pebblelog"
)

// ErrFull is returned by Append when the record would pass the size bound.
var ErrFull = errors.New("outbox full")

// Key layout: 'q' seq -> uvarint(rows) payload; 'd' day -> empty.
const (
	tabQueue = 'q'
	tabDirty = 'd'
)

// Record is one appended unit.
type Record struct {
	Seq     uint64
	Rows    int
	Payload []byte
}

// Depth is what the outbox holds.
type Depth struct {
	Records int
	Rows    int
	Bytes   int64
}

// Outbox is an open outbox.
type Outbox struct {
	db       *pebble.DB
	maxBytes int64

	mu    sync.Mutex // guards depth and next
	depth Depth
	next  uint64

	dirtyMu  sync.Mutex // orders MarkDirty and ClearDirty, guards dirtySeq
	dirtySeq uint64     // the number of the last dirty mark written
}

// Open opens (creating if needed) the outbox in dir, bounded to maxBytes of
// record payload.
func Open(dir string, maxBytes int64, logger *slog.Logger) (*Outbox, error) {
	db, err := pebble.Open(dir, &pebble.Options{Logger: pebblelog.New(logger, "outbox"), FormatMajorVersion: pebble.FormatNewest})
	if err != nil {
		return nil, fmt.Errorf("open outbox %q: %w", dir, err)
	}
	o := &Outbox{db: db, maxBytes: maxBytes}
	it, err := db.NewIter(&pebble.IterOptions{LowerBound: []byte{tabQueue}, UpperBound: []byte{tabQueue + 1}})
	if err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("open outbox %q: %w", dir, err)
	}
	for ok := it.First(); ok; ok = it.Next() {
		rows, n := binary.Uvarint(it.Value())
		if n <= 0 || len(it.Key()) != 9 {
			_ = it.Close()
			_ = db.Close()
			return nil, fmt.Errorf("open outbox %q: corrupt record %x", dir, it.Key())
		}
		o.depth.Records++
		o.depth.Rows += int(rows)
		o.depth.Bytes += int64(len(it.Value()) - n)
		o.next = binary.BigEndian.Uint64(it.Key()[1:]) + 1
	}
	if err := it.Close(); err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("open outbox %q: %w", dir, err)
	}
	marks, err := o.marks()
	if err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("open outbox %q: %w", dir, err)
	}
	for _, m := range marks {
		o.dirtySeq = max(o.dirtySeq, m.seq)
	}
	return o, nil
}

// Close closes the database; records stay on disk.
func (o *Outbox) Close() error {
	if err := o.db.Close(); err != nil {
		return fmt.Errorf("close outbox: %w", err)
	}
	return nil
}

func queueKey(seq uint64) []byte {
	return binary.BigEndian.AppendUint64([]byte{tabQueue}, seq)
}

// Append stores a record of rows rows durably, or returns ErrFull.
func (o *Outbox) Append(payload []byte, rows int) error {
	o.mu.Lock()
	if o.depth.Bytes+int64(len(payload)) > o.maxBytes {
		o.mu.Unlock()
		return fmt.Errorf("%w: %d bytes held, bound %d, record of %d bytes", ErrFull, o.depth.Bytes, o.maxBytes, len(payload))
	}
	seq := o.next
	o.next++
	// Reserve the space now; a failed write gives it back.
	o.depth.Records++
	o.depth.Rows += rows
	o.depth.Bytes += int64(len(payload))
	o.mu.Unlock()

	v := binary.AppendUvarint(make([]byte, 0, len(payload)+binary.MaxVarintLen64), uint64(rows))
	v = append(v, payload...)
	if err := o.db.Set(queueKey(seq), v, pebble.Sync); err != nil {
		o.mu.Lock()
		o.depth.Records--
		o.depth.Rows -= rows
		o.depth.Bytes -= int64(len(payload))
		o.mu.Unlock()
		return fmt.Errorf("append to outbox: %w", err)
	}
	return nil
}

// Peek returns the oldest records, oldest first, up to maxRows rows in
// total but always at least one record when any is held.
func (o *Outbox) Peek(maxRows int) ([]Record, error) {
	it, err := o.db.NewIter(&pebble.IterOptions{LowerBound: []byte{tabQueue}, UpperBound: []byte{tabQueue + 1}})
	if err != nil {
		return nil, fmt.Errorf("read outbox: %w", err)
	}
	var out []Record
	rows := 0
	for ok := it.First(); ok; ok = it.Next() {
		n, k := binary.Uvarint(it.Value())
		if k <= 0 {
			_ = it.Close()
			return nil, fmt.Errorf("read outbox: corrupt record %x", it.Key())
		}
		if len(out) > 0 && rows+int(n) > maxRows {
			break
		}
		out = append(out, Record{Seq: binary.BigEndian.Uint64(it.Key()[1:]), Rows: int(n), Payload: append([]byte(nil), it.Value()[k:]...)})
		rows += int(n)
	}
	if err := it.Close(); err != nil {
		return nil, fmt.Errorf("read outbox: %w", err)
	}
	return out, nil
}

// Ack removes records returned by Peek, once delivered.
func (o *Outbox) Ack(recs []Record) error {
	if len(recs) == 0 {
		return nil
	}
	b := o.db.NewBatch()
	defer b.Close()
	for _, r := range recs {
		if err := b.Delete(queueKey(r.Seq), nil); err != nil {
			return fmt.Errorf("ack outbox records: %w", err)
		}
	}
	// No sync: after a crash the records are delivered again, idempotently.
	if err := o.db.Apply(b, pebble.NoSync); err != nil {
		return fmt.Errorf("ack outbox records: %w", err)
	}
	o.mu.Lock()
	for _, r := range recs {
		o.depth.Records--
		o.depth.Rows -= r.Rows
		o.depth.Bytes -= int64(len(r.Payload))
	}
	o.mu.Unlock()
	return nil
}

// Depth returns what the outbox holds.
func (o *Outbox) Depth() Depth {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.depth
}

// DirtyDay is a day of one tenant whose rollups lost rows: rebuilding that
// tenant's day from the raw store repairs them. Tenant is empty for a mark
// written before marks named their tenant: it is shown to every tenant, and
// the first whole-day rebuild of its day by any tenant clears it.
type DirtyDay struct {
	Tenant string
	Day    model.Day
}

func dirtyKey(tenant string, d model.Day) []byte {
	return append(binary.BigEndian.AppendUint32([]byte{tabDirty}, uint32(d)^(1<<31)), tenant...)
}

// MarkDirty records durably that rows of these tenant-days could not be
// kept. Each mark gets the next number (see DirtySeq); a mark written again
// takes a new one. It works when the outbox is full: the markers are a few
// bytes each.
func (o *Outbox) MarkDirty(marks []DirtyDay) error {
	o.dirtyMu.Lock()
	defer o.dirtyMu.Unlock()
	b := o.db.NewBatch()
	defer b.Close()
	seq := o.dirtySeq + 1
	for _, m := range marks {
		if err := b.Set(dirtyKey(m.Tenant, m.Day), binary.BigEndian.AppendUint64(nil, seq), nil); err != nil {
			return fmt.Errorf("mark days dirty: %w", err)
		}
	}
	if err := o.db.Apply(b, pebble.Sync); err != nil {
		return fmt.Errorf("mark days dirty: %w", err)
	}
	o.dirtySeq = seq
	return nil
}

// DirtySeq returns the number of the last dirty mark written: a rebuild
// that starts now repairs the losses of marks up to it, not those of marks
// written later (see ClearDirty).
func (o *Outbox) DirtySeq() uint64 {
	o.dirtyMu.Lock()
	defer o.dirtyMu.Unlock()
	return o.dirtySeq
}

type mark struct {
	DirtyDay
	seq uint64 // 0 for a mark written before marks were numbered
}

func (o *Outbox) marks() ([]mark, error) {
	it, err := o.db.NewIter(&pebble.IterOptions{LowerBound: []byte{tabDirty}, UpperBound: []byte{tabDirty + 1}})
	if err != nil {
		return nil, fmt.Errorf("list dirty days: %w", err)
	}
	var out []mark
	for ok := it.First(); ok; ok = it.Next() {
		k, v := it.Key(), it.Value()
		if len(k) < 5 {
			continue
		}
		m := mark{DirtyDay: DirtyDay{Tenant: string(k[5:]), Day: model.Day(binary.BigEndian.Uint32(k[1:5]) ^ (1 << 31))}}
		if len(v) == 8 {
			m.seq = binary.BigEndian.Uint64(v)
		}
		out = append(out, m)
	}
	if err := it.Close(); err != nil {
		return nil, fmt.Errorf("list dirty days: %w", err)
	}
	return out, nil
}

// Dirty lists the tenant-days marked dirty, by day (oldest first), then
// tenant.
func (o *Outbox) Dirty() ([]DirtyDay, error) {
	marks, err := o.marks()
	var out []DirtyDay
	for _, m := range marks {
		out = append(out, m.DirtyDay)
	}
	return out, err
}

// ClearDirty forgets the dirty marks of tenant's days (and the marks of
// those days that name no tenant) numbered up to upTo: what a rebuild of
// those days that started when DirtySeq was upTo repaired. A mark written
// since, for a loss the rebuild may have missed, stays.
func (o *Outbox) ClearDirty(tenant string, days []model.Day, upTo uint64) error {
	o.dirtyMu.Lock()
	defer o.dirtyMu.Unlock()
	b := o.db.NewBatch()
	defer b.Close()
	for _, d := range days {
		for _, k := range [][]byte{dirtyKey(tenant, d), dirtyKey("", d)} {
			v, closer, err := o.db.Get(k)
			if errors.Is(err, pebble.ErrNotFound) {
				continue
			}
			if err != nil {
				return fmt.Errorf("clear dirty days: %w", err)
			}
			seq := uint64(0)
			if len(v) == 8 {
				seq = binary.BigEndian.Uint64(v)
			}
			_ = closer.Close()
			if seq > upTo {
				continue
			}
			if err := b.Delete(k, nil); err != nil {
				return fmt.Errorf("clear dirty days: %w", err)
			}
		}
	}
	if err := o.db.Apply(b, pebble.Sync); err != nil {
		return fmt.Errorf("clear dirty days: %w", err)
	}
	return nil
}
