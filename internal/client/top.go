package client

import (
	"context"
	"fmt"
	"net/url"
	"strconv"

	"github.com/sluicehq/sluice/internal/model"
	"github.com/sluicehq/sluice/internal/wire"
)

// TopPartitionsQuery ranks a tenant's partitions of one kind on one day.
type TopPartitionsQuery struct {
	Kind model.Kind
	// Day is the UTC day; nil leaves it to the server (today).
	Day *model.Day
	// By is "rows" or "bytes" (largest, from the catalogue) or "rate"
	// (hottest, from the gateway's recent write counters); empty: rows.
	By string
	// Limit is how many, 1..100; 0 leaves it to the server (10).
	Limit int
}

// RankedPartition is a catalogue entry with, ranked by rate, its recent
// write rate on the gateway that answered.
type RankedPartition struct {
	model.PartitionInfo
	RowsPerSecond float64
}

// TopPartitionList is the answer of GET /v1/partitions/top.
type TopPartitionList struct {
	Kind       model.Kind
	Day        model.Day
	By         string
	Partitions []RankedPartition
	// Unsettled says some entries are claims whose counts may run ahead.
	Unsettled bool
}

// TopPartitions ranks partitions as q asks.
func (c *Client) TopPartitions(ctx context.Context, q TopPartitionsQuery) (TopPartitionList, error) {
	params := url.Values{"kind": {q.Kind.String()}}
	if q.Day != nil {
		params.Set("day", q.Day.String())
	}
	if q.By != "" {
		params.Set("by", q.By)
	}
	if q.Limit != 0 {
		params.Set("limit", strconv.Itoa(q.Limit))
	}
	var body wire.TopPartitionsPage
	if err := c.get(ctx, "/v1/partitions/top", params, &body); err != nil {
		return TopPartitionList{}, err
	}
	out := TopPartitionList{By: body.By, Unsettled: body.Unsettled, Partitions: make([]RankedPartition, len(body.Partitions))}
	var err error
	if out.Kind, err = model.ParseKind(body.Kind); err != nil {
		return TopPartitionList{}, fmt.Errorf("decode /v1/partitions/top response: kind: %w", err)
	}
	if out.Day, err = model.ParseDay(body.Day); err != nil {
		return TopPartitionList{}, fmt.Errorf("decode /v1/partitions/top response: day: %w", err)
	}
	for i, j := range body.Partitions {
		p, err := j.Model()
		if err != nil {
			return TopPartitionList{}, fmt.Errorf("decode /v1/partitions/top response: partition %d: %w", i, err)
		}
		out.Partitions[i] = RankedPartition{PartitionInfo: p, RowsPerSecond: j.RowsPerSecond}
	}
	return out, nil
}
