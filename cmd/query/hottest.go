package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/sluicehq/sluice/internal/client"
	"github.com/sluicehq/sluice/internal/model"
	"github.com/sluicehq/sluice/internal/readapi"
	"github.com/sluicehq/sluice/internal/render"
	"github.com/sluicehq/sluice/internal/wire"
)

// The hottest partitions are measured by each gateway in its own memory,
// for the rows it wrote. With several gateways, --hottest asks every one
// and merges their rankings: every partition has exactly one writer, so
// the answers do not overlap and the cluster's N hottest are among the
// union of each gateway's N hottest.

const (
	// maxGateways is the most gateways --urls may name.
	maxGateways = 64
	// gatewayConcurrency is the most gateways asked at once.
	gatewayConcurrency = 8
)

// splitURLs parses a comma-separated list of gateway URLs (--urls,
// SLUICE_URLS). It refuses empty items, repeats, and more than
// maxGateways; each URL is checked when its client is made.
func splitURLs(s string) ([]string, error) {
	items := strings.Split(s, ",")
	if len(items) > maxGateways {
		return nil, fmt.Errorf("%d gateways: want at most %d", len(items), maxGateways)
	}
	out := make([]string, 0, len(items))
	for i, it := range items {
		it = strings.TrimSpace(it)
		if it == "" {
			return nil, fmt.Errorf("item %d is empty: want URL,URL,…", i+1)
		}
		if slices.Contains(out, it) {
			return nil, fmt.Errorf("%q is given twice", it)
		}
		out = append(out, it)
	}
	return out, nil
}

// gatewayAnswer is one gateway's ranking, or why it gave none.
type gatewayAnswer struct {
	url  string
	list client.TopPartitionList
	err  error
}

// askGateways asks every client for q, at most gatewayConcurrency at a
// time, and returns the answers in the order of urls. Each request is
// bounded by its client's timeout and by ctx.
func askGateways(ctx context.Context, clients []*client.Client, urls []string, q client.TopPartitionsQuery) []gatewayAnswer {
	answers := make([]gatewayAnswer, len(clients))
	sem := make(chan struct{}, gatewayConcurrency)
	var wg sync.WaitGroup
	for i, c := range clients {
		answers[i].url = urls[i]
		wg.Go(func() {
			select {
			case sem <- struct{}{}:
			case <-ctx.Done():
				answers[i].err = ctx.Err()
				return
			}
			defer func() { <-sem }()
			l, err := c.TopPartitions(ctx, q)
			if err == nil && q.Day != nil && l.Day != *q.Day {
				err = fmt.Errorf("it answered for %s, not %s", l.Day, *q.Day)
			}
			answers[i].list, answers[i].err = l, err
		})
	}
	wg.Wait()
	return answers
}

// duplicate is a partition that more than one gateway ranked: the higher
// rate was kept.
type duplicate struct {
	Series    string `json:"series"`
	SubBucket uint32 `json:"sub_bucket"`
	// Kept and Dropped are the gateways whose rates were kept and dropped.
	Kept    string `json:"kept"`
	Dropped string `json:"dropped"`
}

// ranked is a partition of a merged ranking and the gateway that ranked it.
type ranked struct {
	client.RankedPartition
	gateway string
}

// mergeRankings merges the rankings of the gateways that answered,
// fastest first (ties by series and sub-bucket, as a gateway orders
// them), and keeps the first limit. A partition ranked by more than one
// gateway is listed once, with the higher rate, and reported in dups.
func mergeRankings(answers []gatewayAnswer, limit int) (ps []client.RankedPartition, unsettled bool, dups []duplicate) {
	byKey := make(map[model.PartitionKey]int)
	var all []ranked
	for _, a := range answers {
		if a.err != nil {
			continue
		}
		unsettled = unsettled || a.list.Unsettled
		for _, p := range a.list.Partitions {
			i, ok := byKey[p.Key]
			if !ok {
				byKey[p.Key] = len(all)
				all = append(all, ranked{p, a.url})
				continue
			}
			d := duplicate{Series: p.Key.Series, SubBucket: p.Key.Sub, Kept: all[i].gateway, Dropped: a.url}
			if p.RowsPerSecond > all[i].RowsPerSecond {
				d.Kept, d.Dropped = a.url, all[i].gateway
				all[i] = ranked{p, a.url}
			}
			dups = append(dups, d)
		}
	}
	slices.SortFunc(all, func(a, b ranked) int {
		if c := cmp.Compare(b.RowsPerSecond, a.RowsPerSecond); c != 0 {
			return c
		}
		if c := cmp.Compare(a.Key.Series, b.Key.Series); c != 0 {
			return c
		}
		return cmp.Compare(a.Key.Sub, b.Key.Sub)
	})
	ps = make([]client.RankedPartition, 0, min(limit, len(all)))
	for _, r := range all[:min(limit, len(all))] {
		ps = append(ps, r.RankedPartition)
	}
	return ps, unsettled, dups
}

// failedGateway is a gateway that gave no ranking.
type failedGateway struct {
	URL   string `json:"url"`
	Error string `json:"error"`
}

// clusterPage is the JSON of --hottest: the ranking object of the read
// API, merged, with the gateways asked and those that did not answer.
type clusterPage struct {
	wire.TopPartitionsPage
	Gateways   []string        `json:"gateways"`
	Failed     []failedGateway `json:"failed,omitempty"`
	Duplicates []duplicate     `json:"duplicates,omitempty"`
}

// hottestURLs returns the gateways --hottest asks: --urls, else --url,
// else SLUICE_URLS, else SLUICE_URL or the default (flags before the
// environment). flag names where the list came from.
func hottestURLs(fs *flagSet, conn *connFlags, urls string) (list []string, flag string, err error) {
	if conn.tenant != "" || conn.config != "" {
		return nil, "", fs.usagef("--tenant and --config only apply with --direct")
	}
	switch {
	case urls != "" && conn.url != "":
		return nil, "", fs.usagef("give --url or --urls, not both")
	case urls != "":
		flag = "--urls"
	case conn.url != "":
		return []string{conn.url}, "--url", nil
	default:
		if urls = fs.e.getenv("SLUICE_URLS"); urls == "" {
			return []string{conn.gatewayURL(fs.e)}, "--url", nil
		}
		flag = "SLUICE_URLS"
	}
	list, err = splitURLs(urls)
	if err != nil {
		return nil, "", fs.usagef("%s: %v", flag, err)
	}
	return list, flag, nil
}

// rankHottest serves --hottest: it asks every gateway of urls for its
// hottest partitions and prints the merged ranking. A gateway that did
// not answer is named on stderr and makes the exit status 1; the ranking
// of the others is printed all the same, unless none answered.
func rankHottest(ctx context.Context, e *env, fs *flagSet, conn *connFlags, urls []string, flag string, q client.TopPartitionsQuery, f format) error {
	clients := make([]*client.Client, len(urls))
	for i, u := range urls {
		label := ""
		if len(urls) > 1 {
			label = "gateway " + u + ": "
		}
		c, err := conn.gatewayClient(fs, u, flag, label)
		if err != nil {
			return err
		}
		clients[i] = c
	}
	// Gateways whose clocks straddle midnight would otherwise answer for
	// different days.
	if q.Day == nil && len(urls) > 1 {
		d := model.DayOf(e.now().UnixMilli())
		q.Day = &d
	}
	limit := q.Limit
	if limit == 0 {
		limit = readapi.DefaultTopLimit
	}
	answers := askGateways(ctx, clients, urls, q)
	var failed []failedGateway
	var errs []error
	var first *client.TopPartitionList
	for i, a := range answers {
		if a.err != nil {
			failed = append(failed, failedGateway{URL: a.url, Error: a.err.Error()})
			errs = append(errs, fmt.Errorf("gateway %s: %w", a.url, a.err))
		} else if first == nil {
			first = &answers[i].list
		}
	}
	if first == nil {
		if len(errs) == 1 {
			return errs[0]
		}
		return fmt.Errorf("no gateway answered: %w", errors.Join(errs...))
	}
	ps, unsettled, dups := mergeRankings(answers, limit)
	infos := make([]model.PartitionInfo, len(ps))
	rates := make([]float64, len(ps))
	for i, p := range ps {
		infos[i], rates[i] = p.PartitionInfo, p.RowsPerSecond
	}
	var err error
	switch f {
	case formatTable, formatCSV:
		if unsettled {
			fmt.Fprintln(e.stderr, "query: some entries are not settled: their rows, bytes and times may run ahead of the partitions")
		}
		for _, d := range dups {
			fmt.Fprintf(e.stderr, "query: partition %s/%d was ranked by both %s and %s (two gateways with one writer_id?); kept the higher rate, from %s\n",
				d.Series, d.SubBucket, d.Kept, d.Dropped, d.Kept)
		}
		t := render.TopPartitionsTable(infos, rates)
		if f == formatTable {
			err = t.WriteText(e.out)
		} else {
			err = t.WriteCSV(e.out)
		}
	case formatJSON:
		page := clusterPage{
			TopPartitionsPage: wire.TopPartitionsPage{Kind: first.Kind.String(), Day: first.Day.String(), By: first.By,
				Partitions: make([]wire.RankedPartition, len(ps)), Unsettled: unsettled},
			Gateways: urls, Failed: failed, Duplicates: dups,
		}
		for i, p := range ps {
			page.Partitions[i] = wire.RankedPartition{Partition: wire.PartitionOf(p.PartitionInfo), RowsPerSecond: p.RowsPerSecond}
		}
		enc := json.NewEncoder(e.out)
		enc.SetIndent("", "  ")
		err = enc.Encode(page)
	}
	if err != nil {
		return fmt.Errorf("write output: %w", err)
	}
	if len(errs) > 0 {
		for _, err := range errs {
			fmt.Fprintf(e.stderr, "query: %v\n", err)
		}
		return fmt.Errorf("%d of %d gateways did not answer: the ranking is of the others only", len(errs), len(urls))
	}
	return nil
}
