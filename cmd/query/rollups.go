package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"

	"github.com/sluicehq/sluice/internal/client"
	"github.com/sluicehq/sluice/internal/model"
	"github.com/sluicehq/sluice/internal/render"
	"github.com/sluicehq/sluice/internal/wire"
)

func rollupsCommand() command {
	return command{
		name:     "rollups",
		synopsis: "--device D --metric M [--from T] [--to T] [--step 1m|1h|1d] [--format table|csv|json|chart]",
		summary:  "per-minute, hourly or daily aggregates of one device's metric",
		about: `Each row is one step: COUNT values of every type; the SUM, MIN and MAX of its
floats; INT_SUM (exact), INT_MIN and INT_MAX of its ints; the MEAN of its
numeric values (floats and ints); TRUE, the count of its true bools; and the
FIRST and LAST value of any type with their times (strings quoted in a
table). A column shows only when some step has values of its type; JSON
has every type's aggregates, first and last included, in their JSON types.
Hours and days are folded from the minute rollups when asked. --format
chart draws the mean of each step as bars (numeric metrics only).
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
					numeric := false
					for i, b := range s.Buckets {
						labels[i] = b.Start
						if b.Mean != nil {
							values[i], numeric = *b.Mean, true
						}
					}
					if !numeric && len(s.Buckets) > 0 {
						return fmt.Errorf("%s %s has no numeric values to chart: use --format table", s.Device, s.Metric)
					}
					title := fmt.Sprintf("%s %s, mean per %s, %d steps", s.Device, s.Metric, s.Step, len(s.Buckets))
					err = render.Chart(e.out, title, labels, values, *width, *height)
				case "csv":
					err = bucketsTable(s.Buckets, false).WriteCSV(e.out)
				default:
					err = bucketsTable(s.Buckets, true).WriteText(e.out)
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

// bucketsTable lays out buckets: the columns of a type only when some
// bucket has values of it, a cell empty where its bucket has none. quote
// quotes string values (in a text table, where "true" could be a bool).
func bucketsTable(bs []client.Bucket, quote bool) render.Table {
	var floats, ints, numeric, bools bool
	for _, b := range bs {
		floats = floats || b.FloatCount > 0
		ints = ints || b.IntCount > 0
		numeric = numeric || b.Mean != nil
		bools = bools || b.BoolCount > 0
	}
	cols := []render.Column{{Name: "start"}, {Name: "count", Right: true}}
	if floats {
		cols = append(cols, render.Column{Name: "sum", Right: true}, render.Column{Name: "min", Right: true}, render.Column{Name: "max", Right: true})
	}
	if ints {
		cols = append(cols, render.Column{Name: "int_sum", Right: true}, render.Column{Name: "int_min", Right: true}, render.Column{Name: "int_max", Right: true})
	}
	if numeric {
		cols = append(cols, render.Column{Name: "mean", Right: true})
	}
	if bools {
		cols = append(cols, render.Column{Name: "true", Right: true})
	}
	cols = append(cols, render.Column{Name: "first", Right: true}, render.Column{Name: "first_ts"},
		render.Column{Name: "last", Right: true}, render.Column{Name: "last_ts"})
	t := render.Table{Columns: cols}
	for _, b := range bs {
		row := []string{b.Start, strconv.FormatUint(b.Count, 10)}
		if floats {
			row = append(row, optNum(b.Sum), optNum(b.Min), optNum(b.Max))
		}
		if ints {
			row = append(row, string(b.IntSum), optInt(b.IntMin), optInt(b.IntMax))
		}
		if numeric {
			mean := ""
			if b.Mean != nil {
				mean = strconv.FormatFloat(*b.Mean, 'f', 3, 64)
			}
			row = append(row, mean)
		}
		if bools {
			tc := ""
			if b.TrueCount != nil {
				tc = strconv.FormatUint(*b.TrueCount, 10)
			}
			row = append(row, tc)
		}
		row = append(row, value(b.First, quote), b.FirstTS, value(b.Last, quote), b.LastTS)
		t.Rows = append(t.Rows, row)
	}
	return t
}

func optNum(f *float64) string {
	if f == nil {
		return ""
	}
	return num(*f)
}

func optInt(i *int64) string {
	if i == nil {
		return ""
	}
	return strconv.FormatInt(*i, 10)
}

// value prints a typed value: a float as num does, an int in full, a bool
// as true or false, a string as it is or, with quote, quoted.
func value(v *wire.Value, quote bool) string {
	if v == nil {
		return ""
	}
	switch v.Type {
	case model.TypeInt:
		return strconv.FormatInt(v.Int, 10)
	case model.TypeBool:
		return strconv.FormatBool(v.Int != 0)
	case model.TypeString:
		if quote {
			return strconv.Quote(v.Str)
		}
		return v.Str
	}
	return num(v.Value)
}
