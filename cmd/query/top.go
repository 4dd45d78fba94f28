package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

	"github.com/sluicehq/sluice/internal/client"
	"github.com/sluicehq/sluice/internal/render"
)

func topCommand() command {
	return command{
		name:     "top",
		synopsis: "--metric M [--by max|mean|count] [--from T] [--to T] [--limit N] [--format table|csv|json]",
		summary:  "rank the fleet's devices by a metric's max, mean or reading count",
		about: `Ranked from the rollups, highest first. COUNT counts values of every type;
MEAN and MAX are those of the numeric values (floats and ints), so ranking
by them leaves out devices whose values in the range are all bools or
strings. INT_SUM (exact) and TRUE (the count of true bools) show when some
device has ints or bools; LAST is each device's latest value of any type.

` + timeHelp,
		examples: []string{
			"query top --metric temp --by max --from -1h",
			"query top --metric power --by mean --from 2026-11-22 --to 2026-11-23 --limit 20",
		},
		flags: func(fs *flagSet, e *env) func(context.Context) error {
			metric := fs.String("metric", "", "metric `NAME` (required)")
			by := fs.String("by", "max", "rank by `WHAT`: max, mean or count")
			span := addSpanFlags(fs, false)
			limit := fs.Int("limit", 10, "devices to list, `N` in 1..10000")
			formatFlag := addFormatFlag(fs)
			conn := addConnFlags(fs, gatewayOnly)
			return func(ctx context.Context) error {
				if *metric == "" {
					return fs.usagef("--metric is required")
				}
				if *by != "max" && *by != "mean" && *by != "count" {
					return fs.usagef("--by %q: want max, mean or count", *by)
				}
				if *limit < 1 || *limit > 10_000 {
					return fs.usagef("--limit %d: want 1..10000", *limit)
				}
				f, err := parseFormat(fs, *formatFlag)
				if err != nil {
					return err
				}
				lo, hi, err := span.resolve(fs)
				if err != nil {
					return err
				}
				c, err := conn.client(fs)
				if err != nil {
					return err
				}
				tl, err := c.Top(ctx, client.TopQuery{Metric: *metric, By: *by, From: lo, To: hi, Limit: *limit})
				if err != nil {
					return err
				}
				t := topTable(tl.Devices, *by, f != formatCSV)
				switch f {
				case formatJSON:
					enc := json.NewEncoder(e.out)
					enc.SetIndent("", "  ")
					err = enc.Encode(tl)
				case formatCSV:
					err = t.WriteCSV(e.out)
				default:
					err = t.WriteText(e.out)
				}
				if err != nil {
					return fmt.Errorf("write output: %w", err)
				}
				return nil
			}
		},
	}
}

// topTable lays out a top list; the ranked column is marked with a star
// in a text table. The int_sum and true columns show only when some device
// has ints or bools.
func topTable(ds []client.Rank, by string, quote bool) render.Table {
	var ints, bools bool
	for _, d := range ds {
		ints = ints || d.IntSum != ""
		bools = bools || d.TrueCount != nil
	}
	cols := []render.Column{{Name: "rank", Right: true}, {Name: "device"}, {Name: "count", Right: true},
		{Name: "mean", Right: true}, {Name: "max", Right: true}}
	if ints {
		cols = append(cols, render.Column{Name: "int_sum", Right: true})
	}
	if bools {
		cols = append(cols, render.Column{Name: "true", Right: true})
	}
	cols = append(cols, render.Column{Name: "last", Right: true})
	for i := range cols {
		if cols[i].Name == by {
			cols[i].Title = strings.ToUpper(by) + "*"
		}
	}
	t := render.Table{Columns: cols}
	for i, d := range ds {
		mean := ""
		if d.Mean != nil {
			mean = strconv.FormatFloat(*d.Mean, 'f', 3, 64)
		}
		row := []string{strconv.Itoa(i + 1), d.Device, strconv.FormatUint(d.Count, 10), mean, optNum(d.Max)}
		if ints {
			row = append(row, string(d.IntSum))
		}
		if bools {
			tc := ""
			if d.TrueCount != nil {
				tc = strconv.FormatUint(*d.TrueCount, 10)
			}
			row = append(row, tc)
		}
		t.Rows = append(t.Rows, append(row, value(d.Last, quote)))
	}
	return t
}
