package client

import (
	"context"
	"encoding/base64"
	"fmt"
	"iter"
	"net/url"

	"github.com/sluicehq/sluice/internal/model"
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

type deadLetterJSON struct {
	TS            string `json:"ts"`
	ID            string `json:"id"`
	Source        string `json:"source"`
	Topic         string `json:"topic"`
	Reason        string `json:"reason"`
	Error         string `json:"error"`
	Payload       string `json:"payload"`
	PayloadBase64 string `json:"payload_base64"`
	Truncated     bool   `json:"truncated"`
}

// DeadLetters returns one page of q. The tenant of each dead letter is left
// empty: the token decides it.
func (c *Client) DeadLetters(ctx context.Context, q DeadLettersQuery) (DeadLettersPage, error) {
	var body struct {
		DeadLetters []deadLetterJSON `json:"dead_letters"`
		NextCursor  string           `json:"next_cursor"`
	}
	if err := c.get(ctx, "/v1/deadletters", q.params(url.Values{}), &body); err != nil {
		return DeadLettersPage{}, err
	}
	page := DeadLettersPage{DeadLetters: make([]model.DeadLetter, len(body.DeadLetters)), NextCursor: body.NextCursor}
	for i, j := range body.DeadLetters {
		ts, err := parseTS(j.TS)
		if err != nil {
			return DeadLettersPage{}, fmt.Errorf("decode /v1/deadletters response: dead letter %d: ts: %w", i, err)
		}
		payload := []byte(j.Payload)
		if j.PayloadBase64 != "" {
			if payload, err = base64.StdEncoding.DecodeString(j.PayloadBase64); err != nil {
				return DeadLettersPage{}, fmt.Errorf("decode /v1/deadletters response: dead letter %d: payload_base64: %w", i, err)
			}
		}
		page.DeadLetters[i] = model.DeadLetter{TS: ts, ID: j.ID, Source: j.Source, Topic: j.Topic, Reason: j.Reason,
			Error: j.Error, Payload: payload, Truncated: j.Truncated}
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
