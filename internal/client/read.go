package client

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"net/url"
	"strconv"
	"time"

	"github.com/sluicehq/sluice/internal/model"
	"github.com/sluicehq/sluice/internal/wire"
)

// Range is what a readings or audit query shares: a time range and a page.
type Range struct {
	// From (inclusive) and To (exclusive); a zero time leaves the bound to
	// the server (To: now, From: 24 hours before To).
	From, To time.Time
	// Limit is the page size, 1..MaxLimit; 0 leaves it to the server (1000).
	Limit int
	// Cursor continues a previous page; empty starts at From.
	Cursor string
}

func (r Range) params(v url.Values) url.Values {
	if !r.From.IsZero() {
		v.Set("from", r.From.UTC().Format(TimeFormat))
	}
	if !r.To.IsZero() {
		v.Set("to", r.To.UTC().Format(TimeFormat))
	}
	if r.Limit != 0 {
		v.Set("limit", strconv.Itoa(r.Limit))
	}
	if r.Cursor != "" {
		v.Set("cursor", r.Cursor)
	}
	return v
}

// ReadingsQuery selects readings of one device.
type ReadingsQuery struct {
	Device string
	Range
}

// ReadingsPage is one page of readings, in timestamp order. NextCursor is
// empty on the last page.
type ReadingsPage struct {
	Readings   []model.Reading
	NextCursor string
}

// AuditQuery selects audit events of one stream.
type AuditQuery struct {
	Stream string
	Range
}

// AuditPage is one page of audit events, in (ts, event_id) order.
// NextCursor is empty on the last page.
type AuditPage struct {
	Events     []model.AuditEvent
	NextCursor string
}

// PartitionsQuery selects the partitions of one series on one day.
type PartitionsQuery struct {
	Kind   model.Kind
	Series string // device for readings, stream for audit
	Day    model.Day
}

// Readings returns one page of q.
func (c *Client) Readings(ctx context.Context, q ReadingsQuery) (ReadingsPage, error) {
	if q.Device == "" {
		return ReadingsPage{}, errors.New("readings query: device is required")
	}
	var body wire.ReadingsPage
	if err := c.get(ctx, "/v1/readings", q.params(url.Values{"device": {q.Device}}), &body); err != nil {
		return ReadingsPage{}, err
	}
	page := ReadingsPage{Readings: make([]model.Reading, len(body.Readings)), NextCursor: body.NextCursor}
	for i, j := range body.Readings {
		r, err := j.Model()
		if err != nil {
			return ReadingsPage{}, fmt.Errorf("decode /v1/readings response: reading %d: %w", i, err)
		}
		page.Readings[i] = r
	}
	return page, nil
}

// Audit returns one page of q.
func (c *Client) Audit(ctx context.Context, q AuditQuery) (AuditPage, error) {
	if q.Stream == "" {
		return AuditPage{}, errors.New("audit query: stream is required")
	}
	var body wire.EventsPage
	if err := c.get(ctx, "/v1/audit", q.params(url.Values{"stream": {q.Stream}}), &body); err != nil {
		return AuditPage{}, err
	}
	page := AuditPage{Events: make([]model.AuditEvent, len(body.Events)), NextCursor: body.NextCursor}
	for i, j := range body.Events {
		e, err := j.Model()
		if err != nil {
			return AuditPage{}, fmt.Errorf("decode /v1/audit response: event %d: %w", i, err)
		}
		page.Events[i] = e
	}
	return page, nil
}

// Partitions returns the catalogue entries of q's series-day, in sub-bucket
// order as the server lists them. The tenant of each key is left empty: the
// token decides it.
func (c *Client) Partitions(ctx context.Context, q PartitionsQuery) ([]model.PartitionInfo, error) {
	l, err := c.PartitionList(ctx, q)
	return l.Partitions, err
}

// PartitionList is the answer of GET /v1/partitions.
type PartitionList struct {
	Partitions []model.PartitionInfo
	// Unsettled says the gateway could not make the entries exact first:
	// their counts, sizes and time ranges may run ahead of the partitions.
	Unsettled bool
}

// PartitionList is Partitions with the unsettled flag.
func (c *Client) PartitionList(ctx context.Context, q PartitionsQuery) (PartitionList, error) {
	if q.Series == "" {
		return PartitionList{}, errors.New("partitions query: series is required")
	}
	params := url.Values{"kind": {q.Kind.String()}, "series": {q.Series}, "day": {q.Day.String()}}
	var body wire.PartitionsPage
	if err := c.get(ctx, "/v1/partitions", params, &body); err != nil {
		return PartitionList{}, err
	}
	out := PartitionList{Partitions: make([]model.PartitionInfo, len(body.Partitions)), Unsettled: body.Unsettled}
	for i, j := range body.Partitions {
		p, err := j.Model()
		if err != nil {
			return PartitionList{}, fmt.Errorf("decode /v1/partitions response: partition %d: %w", i, err)
		}
		out.Partitions[i] = p
	}
	return out, nil
}

// ReadingPages yields the pages of q in order, starting at q.Cursor and
// following next_cursor until a page has none. An error ends the sequence
// and is yielded with a zero page.
func (c *Client) ReadingPages(ctx context.Context, q ReadingsQuery) iter.Seq2[ReadingsPage, error] {
	return pages(q.Cursor, func(cursor string) (ReadingsPage, string, error) {
		q.Cursor = cursor
		p, err := c.Readings(ctx, q)
		return p, p.NextCursor, err
	})
}

// AuditPages yields the pages of q in order, as ReadingPages does.
func (c *Client) AuditPages(ctx context.Context, q AuditQuery) iter.Seq2[AuditPage, error] {
	return pages(q.Cursor, func(cursor string) (AuditPage, string, error) {
		q.Cursor = cursor
		p, err := c.Audit(ctx, q)
		return p, p.NextCursor, err
	})
}

// pages follows cursors from first. A server that hands back the cursor it
// was given would loop forever; that is reported as an error.
func pages[P any](first string, fetch func(cursor string) (P, string, error)) iter.Seq2[P, error] {
	return func(yield func(P, error) bool) {
		cursor := first
		for {
			p, next, err := fetch(cursor)
			if err != nil {
				var zero P
				yield(zero, err)
				return
			}
			if !yield(p, nil) || next == "" {
				return
			}
			if next == cursor {
				var zero P
				yield(zero, fmt.Errorf("server returned the cursor it was given (%q); stopping", next))
				return
			}
			cursor = next
		}
	}
}
