package client

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/sluicehq/sluice/internal/wire"
)

// RollupsQuery selects the rollups of one device's metric.
type RollupsQuery struct {
	Device, Metric string
	From, To       time.Time
	Step           string // 1m, 1h or 1d
}

// Bucket is one step of a rollup series, as GET /v1/rollups returns it.
type Bucket = wire.Bucket

// Series is the answer of GET /v1/rollups.
type Series = wire.RollupSeries

func span(from, to time.Time) url.Values {
	v := url.Values{}
	v.Set("from", from.UTC().Format(TimeFormat))
	v.Set("to", to.UTC().Format(TimeFormat))
	return v
}

// Rollups returns a rollup series.
func (c *Client) Rollups(ctx context.Context, q RollupsQuery) (Series, error) {
	v := span(q.From, q.To)
	v.Set("device", q.Device)
	v.Set("metric", q.Metric)
	v.Set("step", q.Step)
	var s Series
	err := c.get(ctx, "/v1/rollups", v, &s)
	return s, err
}

// TopQuery ranks devices by a metric.
type TopQuery struct {
	Metric   string
	By       string // max, mean or count
	From, To time.Time
	Limit    int
}

// Rank is one device of a top list.
type Rank = wire.Rank

// TopList is the answer of GET /v1/top.
type TopList = wire.TopList

// Top ranks devices.
func (c *Client) Top(ctx context.Context, q TopQuery) (TopList, error) {
	v := span(q.From, q.To)
	v.Set("metric", q.Metric)
	v.Set("by", q.By)
	v.Set("limit", strconv.Itoa(q.Limit))
	var t TopList
	err := c.get(ctx, "/v1/top", v, &t)
	return t, err
}

// Mismatch is one (device, metric) whose counts differ.
type Mismatch = wire.Mismatch

// Verification is the answer of GET /v1/rollups/verify.
type Verification = wire.Verification

// VerifyRollups compares raw and rollup counts of one UTC day.
func (c *Client) VerifyRollups(ctx context.Context, day string) (Verification, error) {
	var out Verification
	err := c.get(ctx, "/v1/rollups/verify", url.Values{"day": {day}}, &out)
	return out, err
}

// RebuildProgress is one line of a rebuild's answer.
type RebuildProgress = wire.RebuildProgress

// RebuildResult sums up a rebuild.
type RebuildResult = wire.RebuildResult

// RebuildRollups asks the gateway to recompute rollups over [from, to)
// (of one device if device is set) and calls progress for each line. The
// request has no timeout but ctx's: a rebuild streams as long as it runs.
func (c *Client) RebuildRollups(ctx context.Context, from, to time.Time, device string, progress func(RebuildProgress)) (RebuildResult, error) {
	v := span(from, to)
	if device != "" {
		v.Set("device", device)
	}
	u := c.base.JoinPath("/v1/rollups/rebuild")
	u.RawQuery = v.Encode()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u.String(), nil)
	if err != nil {
		return RebuildResult{}, fmt.Errorf("rebuild rollups: %w", err)
	}
	req.Header.Set("Authorization", "Bearer "+c.token)
	req.Header.Set("User-Agent", "sluice-query")
	hc := *c.hc
	hc.Timeout = 0
	resp, err := hc.Do(req)
	if err != nil {
		return RebuildResult{}, fmt.Errorf("rebuild rollups: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return RebuildResult{}, decodeError(resp)
	}
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		var p RebuildProgress
		if err := json.Unmarshal(sc.Bytes(), &p); err != nil {
			return RebuildResult{}, fmt.Errorf("rebuild rollups: decode progress: %w", err)
		}
		switch {
		case p.Error != "":
			return RebuildResult{}, fmt.Errorf("rebuild rollups: %s", p.Error)
		case p.Result != nil:
			return *p.Result, nil
		case progress != nil:
			progress(p)
		}
	}
	if err := sc.Err(); err != nil {
		return RebuildResult{}, fmt.Errorf("rebuild rollups: %w", err)
	}
	return RebuildResult{}, fmt.Errorf("rebuild rollups: the gateway ended the answer without a result")
}
