package client

import (
	"context"
	"fmt"
	"iter"
	"net/url"

	"github.com/sluicehq/sluice/internal/model"
	"github.com/sluicehq/sluice/internal/wire"
)

// DeadLettersQuery selects the tenant's dead letters in a time range.
type DeadLettersQuery struct {
	Range
}

// DeadLettersPage is one page of dead letters, in (ts, id) order.
// NextCursor is empty on the last page.
type DeadLettersPage struct {
	DeadLetters []model.DeadLetter
	NextCursor  string
}

// DeadLetters returns one page of q. The tenant of each dead letter is left
// empty: the token decides it.
func (c *Client) DeadLetters(ctx context.Context, q DeadLettersQuery) (DeadLettersPage, error) {
	var body wire.DeadLettersPage
	if err := c.get(ctx, "/v1/deadletters", q.params(url.Values{}), &body); err != nil {
		return DeadLettersPage{}, err
	}
	page := DeadLettersPage{DeadLetters: make([]model.DeadLetter, len(body.DeadLetters)), NextCursor: body.NextCursor}
	for i, j := range body.DeadLetters {
		dl, err := j.Model()
		if err != nil {
			return DeadLettersPage{}, fmt.Errorf("decode /v1/deadletters response: dead letter %d: %w", i, err)
		}
		page.DeadLetters[i] = dl
	}
	return page, nil
}

// DeadLetterPages yields the pages of q in order, as ReadingPages does.
func (c *Client) DeadLetterPages(ctx context.Context, q DeadLettersQuery) iter.Seq2[DeadLettersPage, error] {
	return pages(q.Cursor, func(cursor string) (DeadLettersPage, string, error) {
		q.Cursor = cursor
		p, err := c.DeadLetters(ctx, q)
		return p, p.NextCursor, err
	})
}
