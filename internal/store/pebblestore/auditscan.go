package pebblestore

import (
	"bytes"
	"container/heap"
	"context"
	"encoding/binary"
	"fmt"
	"unsafe"

	"github.com/cockroachdb/pebble/v2"

	"github.com/sluicehq/sluice/internal/model"
	"github.com/sluicehq/sluice/internal/store"
)

// EachAudit calls fn with the events of the audit partitions parts inside
// [r.From, r.To) (r.After is not used), merged across them in (TS, event id) order; of an event stored in two
// partitions, the copy in the later sub-bucket wins, as in reads. It is
// how a whole stream-day is read for sealing and verifying: one iterator
// per partition, held to the end, instead of pages of copied events
// re-seeked from a cursor. fn gets the same *AuditEvent each time, refilled;
// its strings and attributes stay valid after fn returns, so a copy of the
// struct may be kept. It stops at fn's first error and returns it.
func (s *Store) EachAudit(ctx context.Context, parts []model.PartitionKey, r store.Range, fn func(*model.AuditEvent) error) (err error) {
	h := &auditHeads{}
	defer func() {
		for _, hd := range h.s {
			if cerr := hd.it.Close(); cerr != nil && err == nil {
				err = fmt.Errorf("read audit events of %v: %w", hd.pk, cerr)
			}
		}
	}()
	for _, pk := range parts {
		if pk.Kind != model.KindAudit {
			return fmt.Errorf("read audit events of %v: not an audit partition", pk)
		}
		prefix := partitionPrefix(nil, pk)
		it, err := s.db.NewIterWithContext(ctx, &pebble.IterOptions{
			LowerBound: appendTS(bytes.Clone(prefix), r.From),
			UpperBound: appendTS(bytes.Clone(prefix), r.To),
		})
		if err != nil {
			return fmt.Errorf("read audit events of %v: %w", pk, err)
		}
		hd := &auditHead{it: it, pk: pk, prefix: len(prefix)}
		if !hd.first() {
			if err := it.Close(); err != nil {
				return fmt.Errorf("read audit events of %v: %w", pk, err)
			}
			continue
		}
		h.s = append(h.s, hd)
	}
	heap.Init(h)
	var (
		e    model.AuditEvent
		last []byte // the previous event's TS and id
		slab []byte // backs the events' strings, a block at a time
		n    int
	)
	for h.Len() > 0 {
		if n++; n%1024 == 0 {
			if err := ctx.Err(); err != nil {
				return err
			}
		}
		hd := h.s[0]
		k := hd.key
		if len(k) < 8 {
			return fmt.Errorf("read audit events of %v: short key: %w", hd.pk, errCorrupt)
		}
		if last == nil || !bytes.Equal(k, last) {
			v, err := hd.it.ValueAndErr()
			if err != nil {
				return fmt.Errorf("read audit events of %v: %w", hd.pk, err)
			}
			if len(slab) < len(k)+len(v) {
				slab = make([]byte, max(64<<10, len(k)+len(v)))
			}
			own := slab[: len(k)+len(v) : len(k)+len(v)]
			slab = slab[len(own):]
			copy(own, k)
			copy(own[len(k):], v)
			last = own[:len(k)]
			e = model.AuditEvent{TS: int64(binary.BigEndian.Uint64(own) ^ 1<<63), EventID: view(own[8:len(k)]), Stream: hd.pk.Series}
			if err := decodeAuditInto(own[len(k):], &e, true); err != nil {
				return fmt.Errorf("read audit events of %v: %w", hd.pk, err)
			}
			if err := fn(&e); err != nil {
				return err
			}
		}
		if hd.next() {
			heap.Fix(h, 0)
			continue
		}
		heap.Pop(h)
		if err := hd.it.Close(); err != nil {
			return fmt.Errorf("read audit events of %v: %w", hd.pk, err)
		}
	}
	return nil
}

// view returns the bytes of b as a string without copying them: b must
// never change afterwards.
func view(b []byte) string { return unsafe.String(unsafe.SliceData(b), len(b)) }

// auditHead is one partition's iterator, positioned at its next event.
type auditHead struct {
	it     *pebble.Iterator
	pk     model.PartitionKey
	prefix int    // length of the partition's key prefix
	key    []byte // the current key after the prefix: TS and event id
}

func (hd *auditHead) first() bool { return hd.at(hd.it.First()) }
func (hd *auditHead) next() bool  { return hd.at(hd.it.Next()) }

func (hd *auditHead) at(ok bool) bool {
	if ok {
		hd.key = hd.it.Key()[hd.prefix:]
	}
	return ok
}

type auditHeads struct{ s []*auditHead }

func (h *auditHeads) Len() int { return len(h.s) }
func (h *auditHeads) Less(i, j int) bool {
	if c := bytes.Compare(h.s[i].key, h.s[j].key); c != 0 {
		return c < 0
	}
	return h.s[i].pk.Sub > h.s[j].pk.Sub // the later sub-bucket's copy first
}
func (h *auditHeads) Swap(i, j int) { h.s[i], h.s[j] = h.s[j], h.s[i] }
func (h *auditHeads) Push(x any)    { h.s = append(h.s, x.(*auditHead)) }
func (h *auditHeads) Pop() any {
	x := h.s[len(h.s)-1]
	h.s = h.s[:len(h.s)-1]
	return x
}
