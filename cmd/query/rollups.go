package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"

	"github.com/sluicehq/sluice/internal/client"
	"github.com/sluicehq/sluice/internal/render"
)

func rollupsCommand() command {
	return command{
		name:     "rollups",
		synopsis: "--device D --metric M [--from T] [--to T] [--step 1m|1h|1d] [--format table|csv|json|chart]",
		summary:  "per-minute, hourly or daily aggregates of one device's metric",
		about: `Each row is one step: COUNT readings, their SUM, MIN, MAX, MEAN, and the FIRST
and LAST value with their times. Hours and days are folded from the minute
rollups when asked. --format chart draws the mean of each step as bars.
Also: 'query rollups rebuild' and 'query rollups verify'.

` + timeHelp,
		examples: []string{
			"query rollups --device pump-17 --metric temp --from -2h",
			"query rollups --device pump-17 --metric temp --from -7d --step 1d --format chart",
		},
		flags: func(fs *flagSet, e *env) func(context.Context) error {
			device := fs.String("device", "", "device `ID` (required)")
			metric := fs.String("metric", "", "metric `NAME` (required)")
			step := fs.String("step", "1m", "resolution `STEP`: 1m, 1h or 1d")
			span := addSpanFlags(fs, false)
			formatFlag := fs.String("format", "table", "output `FORMAT`: table, csv, json or chart")
			width := fs.Int("width", 72, "chart width in `COLUMNS`")
			height := fs.Int("height", 12, "chart height in `LINES`")
			conn := addConnFlags(fs, gatewayOnly)
			return func(ctx context.Context) error {
				if *device == "" || *metric == "" {
					return fs.usagef("--device and --metric are required")
				}
				if *step != "1m" && *step != "1h" && *step != "1d" {
					return fs.usagef("--step %q: want 1m, 1h or 1d", *step)
				}
				f := *formatFlag
				if f != "table" && f != "csv" && f != "json" && f != "chart" {
					return fs.usagef("--format %q: want table, csv, json or chart", f)
				}
				lo, hi, err := span.resolve(fs)
				if err != nil {
					return err
				}
				c, err := conn.client(fs)
				if err != nil {
					return err
				}
				s, err := c.Rollups(ctx, client.RollupsQuery{Device: *device, Metric: *metric, From: lo, To: hi, Step: *step})
				if err != nil {
					return err
				}
				switch f {
				case "json":
					enc := json.NewEncoder(e.out)
					enc.SetIndent("", "  ")
					err = enc.Encode(s)
				case "chart":
					labels := make([]string, len(s.Buckets))
					values := make([]float64, len(s.Buckets))
					for i, b := range s.Buckets {
						labels[i], values[i] = b.Start, b.Mean
					}
					title := fmt.Sprintf("%s %s, mean per %s, %d steps", s.Device, s.Metric, s.Step, len(s.Buckets))
					err = render.Chart(e.out, title, labels, values, *width, *height)
				case "csv":
					err = bucketsTable(s.Buckets).WriteCSV(e.out)
				default:
					err = bucketsTable(s.Buckets).WriteText(e.out)
				}
				if err != nil {
					return fmt.Errorf("write output: %w", err)
				}
				return nil
			}
		},
	}
}

// num prints a value with up to 12 significant digits, hiding the last
// bits of float sums (1246.6499999999999 prints as 1246.65).
func num(f float64) string { return strconv.FormatFloat(f, 'g', 12, 64) }

func bucketsTable(bs []client.Bucket) render.Table {
	t := render.Table{Columns: []render.Column{
		{Name: "start"}, {Name: "count", Right: true}, {Name: "sum", Right: true}, {Name: "min", Right: true},
		{Name: "max", Right: true}, {Name: "mean", Right: true}, {Name: "first", Right: true}, {Name: "first_ts"},
		{Name: "last", Right: true}, {Name: "last_ts"},
	}}
	for _, b := range bs {
		t.Rows = append(t.Rows, []string{b.Start, strconv.FormatUint(b.Count, 10), num(b.Sum), num(b.Min), num(b.Max),
			strconv.FormatFloat(b.Mean, 'f', 3, 64), num(b.First), b.FirstTS, num(b.Last), b.LastTS})
	}
	return t
}
