package main

import (
	"context"
	"fmt"

	"github.com/sluicehq/sluice/internal/client"
	"github.com/sluicehq/sluice/internal/model"
	"github.com/sluicehq/sluice/internal/readapi"
	"github.com/sluicehq/sluice/internal/render"
)

func partitionsCommand() command {
	return command{
		name:     "partitions",
		synopsis: "(--device D | --stream S) --day YYYY-MM-DD | (--largest [--by rows|bytes] | --hottest [--urls URL,URL,…]) [--audit] [--day YYYY-MM-DD] [--limit N] [--format table|csv|json]",
		summary:  "list the partitions of a device or stream on one UTC day, or rank a day's largest or hottest",
		about: `With --device or --stream: that series' partitions on --day. The table ends
with a total line. ROWS and BYTES count every write, so overwritten rows
count again. When the gateway could not make the entries exact first (it is
stopping, or the store failed), JSON says "unsettled": true and the other
formats say so on stderr.

With --largest: the tenant's largest partitions of the day (default today,
UTC) across all its devices (or audit streams with --audit), by rows or, with
--by bytes, by bytes, read from the partition catalogue without reading rows;
on Cassandra for the whole cluster. With --hottest: the partitions written
fastest over about the last minute, from each gateway's own counters (not
with --direct). A gateway answers only for the rows it wrote: for the whole
cluster give every gateway in --urls (or SLUICE_URLS). They are asked at
once (8 at a time, each within --timeout) and their rankings merged by
rows_per_second; the day defaults to today on this machine's clock. A
gateway that does not answer is named on stderr and the exit status is 1,
but the merged ranking of the others is still printed; JSON lists the
gateways asked ("gateways") and those that failed ("failed"). --limit is
1..100 (default 10).
`,
		examples: []string{
			"query partitions --device pump-17 --day 2026-11-22",
			"query partitions --stream billing-api --day 2026-11-22 --format csv",
			"query partitions --largest --day 2026-11-22 --limit 20",
			"query partitions --hottest --format json",
			"query partitions --hottest --urls http://gw-1:8080,http://gw-2:8080 --limit 20",
		},
		flags: func(fs *flagSet, e *env) func(context.Context) error {
			device := fs.String("device", "", "device `ID` (readings partitions)")
			stream := fs.String("stream", "", "audit stream `NAME` (audit partitions)")
			day := fs.String("day", "", "the UTC day to list, `YYYY-MM-DD` (required with --device or --stream; default today with --largest or --hottest)")
			largest := fs.Bool("largest", false, "rank the day's largest partitions of the tenant, from the catalogue")
			hottest := fs.Bool("hottest", false, "rank the partitions the gateway wrote fastest recently")
			by := fs.String("by", "rows", "with --largest, rank by `rows` or bytes")
			audit := fs.Bool("audit", false, "with --largest or --hottest, rank audit stream partitions instead of device partitions")
			limit := fs.Int("limit", 0, "with --largest or --hottest, how many partitions, `N` in 1..100 (default 10)")
			urls := fs.String("urls", "", "with --hottest, every gateway of the cluster, `URL,URL,…`, asked at once and merged (env SLUICE_URLS; instead of --url)")
			formatFlag := addFormatFlag(fs)
			conn := addConnFlags(fs, orDirect)
			return func(ctx context.Context) error {
				if *largest || *hottest {
					if *device != "" || *stream != "" {
						return fs.usagef("--largest and --hottest rank every series: give neither --device nor --stream")
					}
					return rankPartitions(ctx, e, fs, conn, rankFlags{largest: *largest, hottest: *hottest, by: *by, audit: *audit, day: *day, limit: *limit, format: *formatFlag, urls: *urls})
				}
				if *urls != "" {
					return fs.usagef("--urls applies only with --hottest")
				}
				var q client.PartitionsQuery
				switch {
				case *device != "" && *stream != "":
					return fs.usagef("give --device or --stream, not both")
				case *device != "":
					q.Kind, q.Series = model.KindReadings, *device
				case *stream != "":
					q.Kind, q.Series = model.KindAudit, *stream
				default:
					return fs.usagef("--device or --stream is required")
				}
				if *day == "" {
					return fs.usagef("--day is required")
				}
				d, err := model.ParseDay(*day)
				if err != nil {
					return fs.usagef("--day %q: want YYYY-MM-DD", *day)
				}
				q.Day = d
				f, c, err := conn.formatAndClient(fs, *formatFlag)
				if err != nil {
					return err
				}
				l, err := c.PartitionList(ctx, q)
				if err != nil {
					return err
				}
				ps := l.Partitions
				if l.Unsettled && f != formatJSON {
					fmt.Fprintln(e.stderr, "query: the gateway could not settle these entries first: their rows, bytes and times may run ahead of the partitions")
				}
				switch f {
				case formatTable:
					err = render.PartitionsTable(ps).WriteText(e.out)
					if err == nil {
						err = render.PartitionsTotal(e.out, ps)
					}
				case formatCSV:
					err = render.PartitionsTable(ps).WriteCSV(e.out)
				case formatJSON:
					err = render.PartitionsJSON(e.out, ps, l.Unsettled)
				}
				if err != nil {
					return fmt.Errorf("write output: %w", err)
				}
				return nil
			}
		},
	}
}

type rankFlags struct {
	largest, hottest, audit bool
	by, day, format, urls   string
	limit                   int
}

// rankPartitions serves --largest and --hottest.
func rankPartitions(ctx context.Context, e *env, fs *flagSet, conn *connFlags, rf rankFlags) error {
	q := client.TopPartitionsQuery{Kind: model.KindReadings, Limit: rf.limit}
	switch {
	case rf.largest && rf.hottest:
		return fs.usagef("give --largest or --hottest, not both")
	case rf.hottest:
		q.By = "rate"
	case rf.by == "rows" || rf.by == "bytes":
		q.By = rf.by
	default:
		return fs.usagef("--by %q: want rows or bytes", rf.by)
	}
	if rf.audit {
		q.Kind = model.KindAudit
	}
	if rf.limit < 0 || rf.limit > readapi.MaxTopLimit {
		return fs.usagef("--limit %d: want 1..%d", rf.limit, readapi.MaxTopLimit)
	}
	if rf.day != "" {
		d, err := model.ParseDay(rf.day)
		if err != nil {
			return fs.usagef("--day %q: want YYYY-MM-DD", rf.day)
		}
		q.Day = &d
	}
	f, err := parseFormat(fs, rf.format)
	if err != nil {
		return err
	}
	if rf.urls != "" && (!rf.hottest || conn.direct) {
		return fs.usagef("--urls applies only with --hottest, without --direct")
	}
	if rf.hottest && !conn.direct {
		urls, flag, err := hottestURLs(fs, conn, rf.urls)
		if err != nil {
			return err
		}
		return rankHottest(ctx, e, fs, conn, urls, flag, q, f)
	}
	c, err := conn.client(fs)
	if err != nil {
		return err
	}
	l, err := c.TopPartitions(ctx, q)
	if err != nil {
		return err
	}
	ps := make([]model.PartitionInfo, len(l.Partitions))
	var rates []float64
	if q.By == "rate" {
		rates = make([]float64, len(l.Partitions))
	}
	for i, p := range l.Partitions {
		ps[i] = p.PartitionInfo
		if rates != nil {
			rates[i] = p.RowsPerSecond
		}
	}
	if l.Unsettled && f != formatJSON {
		fmt.Fprintln(e.stderr, "query: some entries are not settled: their rows, bytes and times may run ahead of the partitions")
	}
	switch f {
	case formatTable:
		err = render.TopPartitionsTable(ps, rates).WriteText(e.out)
	case formatCSV:
		err = render.TopPartitionsTable(ps, rates).WriteCSV(e.out)
	case formatJSON:
		err = render.TopPartitionsJSON(e.out, l.Kind, l.Day, l.By, ps, rates, l.Unsettled)
	}
	if err != nil {
		return fmt.Errorf("write output: %w", err)
	}
	return nil
}
