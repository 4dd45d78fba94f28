// Package reader answers range reads over bucketed partitions on any
// backend. It never guesses partition keys and never scans: for each day of
// the range it reads the partition catalogue, keeps the partitions whose
// [MinTS, MaxTS] overlaps the range, and merges their rows in clustering
// order, dropping rows that more than one partition holds under the same key
// (a retry that reached a newer partition after the bucketing moved on).
//
// A page ends after a whole reading (all metrics of one timestamp) or event.
// Its cursor is the clustering position of the last row returned. Because
// the merge emits rows in global (ts, key) order, that position is also the
// position of every partition of the day, so each partition, including one
// created after the page was served, resumes with a range read after it.
package reader

import (
	"cmp"
	"container/heap"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/sluicehq/sluice/internal/model"
	"github.com/sluicehq/sluice/internal/store"
)

// Store is what the reader needs of a backend.
type Store interface {
	Catalogue(ctx context.Context, sd model.SeriesDay) ([]model.PartitionInfo, error)
	ScanReadings(ctx context.Context, pk model.PartitionKey, r store.Range, limit int) ([]model.ReadingRow, error)
	ScanAudit(ctx context.Context, pk model.PartitionKey, r store.Range, limit int) ([]model.AuditEvent, error)
}

// MaxLimit is the largest page a read may ask for.
const MaxLimit = 10_000

// chunk is how many rows are fetched from one partition at a time.
const chunk = 1024

// lastKey sorts after every metric name and event id (both are ASCII).
const lastKey = "\xff"

// Query selects rows of one series over [From, To).
type Query struct {
	Tenant string
	Series string
	From   int64
	To     int64
	Limit  int
	Cursor string
	// MaxDays bounds the UTC days the range may touch; 0 means MaxDays.
	// The read API sets it from read.max_days, which it has checked already.
	MaxDays int
}

// MaxDays is the longest range a read may span, in UTC days it touches,
// unless its Query says otherwise.
const MaxDays = 3660

// ErrBadQuery is returned for a query out of bounds (limit, range).
var ErrBadQuery = errors.New("invalid query")

// ErrBadCursor is returned for a cursor that does not decode or belongs to
// another query.
var ErrBadCursor = errors.New("invalid cursor")

type cursor struct {
	V      int    `json:"v"`
	Kind   string `json:"k"`
	Series string `json:"s"`
	TS     int64  `json:"t"`
	Key    string `json:"p,omitempty"`
	// End means "after every key of TS" (lastKey, which is not valid UTF-8
	// and so cannot travel as a JSON string).
	End bool `json:"e,omitempty"`
}

func encodeCursor(kind model.Kind, series string, pos store.Pos) string {
	c := cursor{V: 1, Kind: kind.String(), Series: series, TS: pos.TS, Key: pos.Key}
	if pos.Key == lastKey {
		c.Key, c.End = "", true
	}
	b, _ := json.Marshal(c)
	return base64.RawURLEncoding.EncodeToString(b)
}

func decodeCursor(s string, kind model.Kind, series string) (*store.Pos, error) {
	if s == "" {
		return nil, nil
	}
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil {
		return nil, fmt.Errorf("%w: not base64url", ErrBadCursor)
	}
	var c cursor
	if err := json.Unmarshal(b, &c); err != nil || c.V != 1 {
		return nil, fmt.Errorf("%w: unknown format", ErrBadCursor)
	}
	if c.Kind != kind.String() || c.Series != series {
		return nil, fmt.Errorf("%w: it belongs to a read of %s %q", ErrBadCursor, c.Kind, c.Series)
	}
	if c.End {
		c.Key = lastKey
	}
	return &store.Pos{TS: c.TS, Key: c.Key}, nil
}

func (q Query) check(kind model.Kind) (*store.Pos, error) {
	if q.Limit < 1 || q.Limit > MaxLimit {
		return nil, fmt.Errorf("%w: limit must be 1..%d, got %d", ErrBadQuery, MaxLimit, q.Limit)
	}
	// Each day of the range costs one catalogue read, so the span is
	// bounded; SpanDays also refuses times outside the valid range, which
	// keeps day numbers far from overflow.
	days, err := model.SpanDays(q.From, q.To)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrBadQuery, err)
	}
	if most := int64(cmp.Or(q.MaxDays, MaxDays)); days > most {
		return nil, fmt.Errorf("%w: the range may span at most %d days, got %d", ErrBadQuery, most, days)
	}
	after, err := decodeCursor(q.Cursor, kind, q.Series)
	if err != nil {
		return nil, err
	}
	// The cursor's position is the last row of a page of this range.
	if after != nil && (after.TS < q.From || after.TS >= q.To) {
		return nil, fmt.Errorf("%w: its position lies outside the range", ErrBadCursor)
	}
	return after, nil
}

// Readings returns up to q.Limit readings of device q.Series in timestamp
// order, and a cursor when more remain.
func Readings(ctx context.Context, st Store, q Query) ([]model.Reading, string, error) {
	after, err := q.check(model.KindReadings)
	if err != nil {
		return nil, "", err
	}
	var out []model.Reading
	scan := func(ctx context.Context, pk model.PartitionKey, r store.Range, n int) ([]model.ReadingRow, error) {
		return st.ScanReadings(ctx, pk, r, n)
	}
	pos := func(r model.ReadingRow) store.Pos { return store.Pos{TS: r.TS, Key: r.Metric} }
	emit := func(r model.ReadingRow) bool {
		// A page ends after a whole reading.
		if n := len(out); n == q.Limit && out[n-1].TS != r.TS {
			return false
		}
		out = model.AppendRow(out, q.Series, r)
		return true
	}
	more, err := mergeRange(ctx, st, model.KindReadings, q, after, scan, pos, emit)
	if err != nil || !more {
		return out, "", err
	}
	return out, encodeCursor(model.KindReadings, q.Series, store.Pos{TS: out[len(out)-1].TS, Key: lastKey}), nil
}

// Audit returns up to q.Limit events of stream q.Series in (ts, event_id)
// order, and a cursor when more remain.
func Audit(ctx context.Context, st Store, q Query) ([]model.AuditEvent, string, error) {
	after, err := q.check(model.KindAudit)
	if err != nil {
		return nil, "", err
	}
	var out []model.AuditEvent
	scan := func(ctx context.Context, pk model.PartitionKey, r store.Range, n int) ([]model.AuditEvent, error) {
		return st.ScanAudit(ctx, pk, r, n)
	}
	pos := func(e model.AuditEvent) store.Pos { return store.Pos{TS: e.TS, Key: e.EventID} }
	emit := func(e model.AuditEvent) bool {
		if len(out) == q.Limit {
			return false
		}
		out = append(out, e)
		return true
	}
	more, err := mergeRange(ctx, st, model.KindAudit, q, after, scan, pos, emit)
	if err != nil || !more {
		return out, "", err
	}
	last := out[len(out)-1]
	return out, encodeCursor(model.KindAudit, q.Series, store.Pos{TS: last.TS, Key: last.EventID}), nil
}

// Partitions lists the catalogue of one series-day.
func Partitions(ctx context.Context, st Store, sd model.SeriesDay) ([]model.PartitionInfo, error) {
	parts, err := st.Catalogue(ctx, sd)
	if err != nil {
		return nil, fmt.Errorf("read catalogue of %s %q on %s: %w", sd.Kind, sd.Series, sd.Day, err)
	}
	return parts, nil
}

// mergeRange merges day after day until emit refuses a row (more is then
// true) or the range is exhausted.
func mergeRange[T any](ctx context.Context, st Store, kind model.Kind, q Query, after *store.Pos,
	scan func(context.Context, model.PartitionKey, store.Range, int) ([]T, error),
	pos func(T) store.Pos, emit func(T) bool,
) (bool, error) {
	from := q.From
	if after != nil && after.TS > from {
		from = after.TS
	}
	for day := model.DayOf(from); day.Start() < q.To; day++ {
		if err := ctx.Err(); err != nil {
			return false, err
		}
		sd := model.SeriesDay{Kind: kind, Tenant: q.Tenant, Series: q.Series, Day: day}
		parts, err := st.Catalogue(ctx, sd)
		if err != nil {
			return false, fmt.Errorf("read catalogue of %v: %w", sd, err)
		}
		rng := store.Range{From: max(q.From, day.Start()), To: min(q.To, day.End()), After: after}
		more, err := mergeDay(ctx, parts, rng, scan, pos, emit)
		if err != nil || more {
			return more, err
		}
	}
	return false, nil
}

// source is one partition's rows, fetched a chunk at a time.
type source[T any] struct {
	pk   model.PartitionKey
	rng  store.Range
	buf  []T
	i    int
	done bool
}

type sourceHeap[T any] struct {
	s   []*source[T]
	pos func(T) store.Pos
}

func (h *sourceHeap[T]) Len() int { return len(h.s) }
func (h *sourceHeap[T]) Less(i, j int) bool {
	a, b := h.pos(h.s[i].buf[h.s[i].i]), h.pos(h.s[j].buf[h.s[j].i])
	if a == b {
		return h.s[i].pk.Sub > h.s[j].pk.Sub // newest partition first: its copy wins
	}
	return a.Less(b)
}
func (h *sourceHeap[T]) Swap(i, j int) { h.s[i], h.s[j] = h.s[j], h.s[i] }
func (h *sourceHeap[T]) Push(x any)    { h.s = append(h.s, x.(*source[T])) }
func (h *sourceHeap[T]) Pop() any {
	x := h.s[len(h.s)-1]
	h.s = h.s[:len(h.s)-1]
	return x
}

func mergeDay[T any](ctx context.Context, parts []model.PartitionInfo, rng store.Range,
	scan func(context.Context, model.PartitionKey, store.Range, int) ([]T, error),
	pos func(T) store.Pos, emit func(T) bool,
) (bool, error) {
	h := &sourceHeap[T]{pos: pos}
	// fill makes sure src has a row at src.i, fetching the next chunk.
	fill := func(src *source[T]) (bool, error) {
		if src.i < len(src.buf) {
			return true, nil
		}
		if src.done {
			return false, nil
		}
		if err := ctx.Err(); err != nil {
			return false, err
		}
		if n := len(src.buf); n > 0 {
			p := pos(src.buf[n-1])
			src.rng.After = &p
		}
		rows, err := scan(ctx, src.pk, src.rng, chunk)
		if err != nil {
			return false, err
		}
		src.buf, src.i, src.done = rows, 0, len(rows) < chunk
		return len(rows) > 0, nil
	}
	for _, pi := range parts {
		// A partition whose rows all lie before the cursor has nothing for
		// this page: skip it rather than issue a scan that returns nothing.
		if !pi.Overlaps(rng.From, rng.To) || (rng.After != nil && pi.MaxTS < rng.After.TS) {
			continue
		}
		src := &source[T]{pk: pi.Key, rng: rng}
		ok, err := fill(src)
		if err != nil {
			return false, err
		}
		if ok {
			h.s = append(h.s, src)
		}
	}
	heap.Init(h)
	var last store.Pos // the last row emitted, if emitted
	emitted := false
	for h.Len() > 0 {
		src := h.s[0]
		row := src.buf[src.i]
		if p := pos(row); !emitted || last != p {
			if !emit(row) {
				return true, nil
			}
			last, emitted = p, true
		}
		src.i++
		ok, err := fill(src)
		if err != nil {
			return false, err
		}
		if ok {
			heap.Fix(h, 0)
		} else {
			heap.Pop(h)
		}
	}
	return false, nil
}
