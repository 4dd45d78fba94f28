package cqlstore

import (
	"container/heap"
	"context"
	"fmt"

	"github.com/sluicehq/sluice/internal/model"
)

// seriesPage is how many catalogue rows one request of EachSeries reads
// from one shard.
const seriesPage = 1000

// EachSeries calls fn with every device (kind readings) or stream (kind
// audit) that has a catalogue entry for tenant on day, once each, in byte
// order. It reads only the series column of the day's 64 catalogue
// partitions, never a readings or audit row. A series whose partition was
// registered but never counted is listed too: that partition may hold the
// rows of a commit that failed.
//
// A series lives in one catalogue shard, where rows are clustered by
// (series, sub): each shard yields its series sorted, the entries of one
// series (one per sub-bucket, of every writer) next to each other. So
// EachSeries pages through the 64 shards side by side, drops the repeats
// within each, and merges them, holding at most one page of names per
// shard, whatever the number of series. Each page is a request of its own,
// resumed from the previous page's paging state: the driver may retry it
// without fn seeing a name twice.
//
// It stops at the first error fn returns, or when ctx ends. fn is called
// from one goroutine at a time.
func (s *Store) EachSeries(ctx context.Context, tenant string, kind model.Kind, day model.Day, fn func(series string) error) error {
	fail := func(err error) error {
		return fmt.Errorf("list series of %s %s on %s: %w", tenant, kind, day, err)
	}
	page := s.seriesPage
	if page <= 0 {
		page = seriesPage
	}
	next := func(c *shardCursor) op {
		return func(ctx context.Context) error { return s.fillSeries(ctx, tenant, kind, day, page, c) }
	}
	cursors := make([]*shardCursor, catalogueShards)
	first := make([]op, catalogueShards)
	for shard := range cursors {
		cursors[shard] = &shardCursor{shard: shard}
		first[shard] = next(cursors[shard])
	}
	if err := s.run(ctx, "catalogue_read", first); err != nil {
		return fail(err)
	}
	h := make(seriesHeap, 0, len(cursors))
	for _, c := range cursors {
		if len(c.names) > 0 {
			h = append(h, c)
		}
	}
	heap.Init(&h)
	for len(h) > 0 {
		if err := ctx.Err(); err != nil {
			return fail(err)
		}
		c := h[0]
		name := c.names[0]
		c.names = c.names[1:]
		if err := fn(name); err != nil {
			return err
		}
		if len(c.names) == 0 {
			if err := s.do(ctx, "catalogue_read", next(c)); err != nil {
				return fail(err)
			}
		}
		if len(c.names) == 0 {
			heap.Pop(&h)
		} else {
			heap.Fix(&h, 0)
		}
	}
	return nil
}

// shardCursor is EachSeries' position in one catalogue shard.
type shardCursor struct {
	shard int
	names []string // series read and not yet handed out, sorted, distinct
	last  string   // the last series read: rows of the next page equal to it are more of its sub-bucket entries
	state []byte   // paging state of the next page
	done  bool     // the shard has no page left
}

// fillSeries reads c's shard page by page until it has a series not handed
// out yet or the shard ends. c changes only when a page was read whole, so
// a failed read can be tried again.
func (s *Store) fillSeries(ctx context.Context, tenant string, kind model.Kind, day model.Day, page int, c *shardCursor) error {
	for len(c.names) == 0 && !c.done {
		it := s.query(`SELECT series FROM catalogue WHERE tenant = ? AND kind = ? AND day = ? AND shard = ?`,
			tenant, kind.String(), dayValue(day), c.shard).PageSize(page).PageState(c.state).IterContext(ctx)
		state := it.PageState()
		names, last := c.names[:0], c.last
		var name string
		for it.Scan(&name) {
			if name != last {
				names = append(names, name)
				last = name
			}
		}
		if err := it.Close(); err != nil {
			return err
		}
		c.names, c.last, c.state, c.done = names, last, state, len(state) == 0
	}
	return nil
}

// seriesHeap orders shard cursors by their next series.
type seriesHeap []*shardCursor

func (h seriesHeap) Len() int           { return len(h) }
func (h seriesHeap) Less(i, j int) bool { return h[i].names[0] < h[j].names[0] }
func (h seriesHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *seriesHeap) Push(x any)        { *h = append(*h, x.(*shardCursor)) }
func (h *seriesHeap) Pop() any {
	old := *h
	c := old[len(old)-1]
	*h = old[:len(old)-1]
	return c
}
