package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/sluicehq/sluice/internal/client"
	"github.com/sluicehq/sluice/internal/model"
	"github.com/sluicehq/sluice/internal/render"
)

// errMismatch makes verify exit 1 after printing the mismatches.
var errMismatch = errors.New("rollups do not match the raw store")

func rollupsVerifyCommand() command {
	return command{
		name:     "rollups verify",
		synopsis: "--day YYYY-MM-DD [--format table|csv|json]",
		summary:  "compare raw readings with rollups per device and metric",
		about: `Every (device, metric) whose rollups on the UTC day differ from its raw
readings is printed; the exit status is then 1. Compared: the count of values,
the count of each type (float, int, bool, string), the exact int sum and the
count of true bools; DIFFERS names each that differs. RAW and ROLLUP are the
counts of values of every type. Repair with 'query rollups rebuild' over that
day. CSV lists the mismatches only (the totals go to stderr); JSON is the
gateway's answer: day, devices, metrics, raw_rows, rollup_rows and mismatches
(device, metric, raw, rollup, diffs).
`,
		examples: []string{
			"query rollups verify --day 2026-11-22",
			"query rollups verify --day 2026-11-22 --format json",
		},
		flags: func(fs *flagSet, e *env) func(context.Context) error {
			day := fs.String("day", "", "the UTC day, `YYYY-MM-DD` (required)")
			formatFlag := addFormatFlag(fs)
			conn := addConnFlags(fs, gatewayOnly)
			return func(ctx context.Context) error {
				if _, err := model.ParseDay(*day); err != nil {
					return fs.usagef("--day %q: want YYYY-MM-DD", *day)
				}
				f, c, err := conn.formatAndClient(fs, *formatFlag)
				if err != nil {
					return err
				}
				v, err := c.VerifyRollups(ctx, *day)
				if err != nil {
					return err
				}
				if v.Mismatches == nil {
					v.Mismatches = []client.Mismatch{} // [] in JSON, not null
				}
				if err := printVerification(e, f, v); err != nil {
					return fmt.Errorf("write output: %w", err)
				}
				if len(v.Mismatches) == 0 {
					return nil
				}
				return fmt.Errorf("%w: %d mismatches on %s; run: query rollups rebuild --from %s --to %s", errMismatch,
					len(v.Mismatches), v.Day, v.Day, nextDay(v.Day))
			}
		},
	}
}

// printVerification writes v in format f. The totals line goes to stdout
// in a text table, to stderr with CSV (stdout stays valid CSV).
func printVerification(e *env, f format, v client.Verification) error {
	if f == formatJSON {
		enc := json.NewEncoder(e.out)
		enc.SetIndent("", "  ")
		return enc.Encode(v)
	}
	totals := fmt.Sprintf("%s: %d devices, %d device-metrics, %d raw readings, %d counted by rollups\n",
		v.Day, v.Devices, v.Metrics, v.RawRows, v.RollupRows)
	differs := false
	for _, m := range v.Mismatches {
		differs = differs || len(m.Diffs) > 0
	}
	t := render.Table{Columns: []render.Column{{Name: "device"}, {Name: "metric"}, {Name: "raw", Right: true},
		{Name: "rollup", Right: true}, {Name: "diff", Right: true}}}
	if differs {
		t.Columns = append(t.Columns, render.Column{Name: "differs"})
	}
	for _, m := range v.Mismatches {
		row := []string{m.Device, m.Metric, strconv.FormatInt(m.Raw, 10), strconv.FormatInt(m.Rollup, 10),
			fmt.Sprintf("%+d", m.Rollup-m.Raw)}
		if differs {
			row = append(row, strings.Join(m.Diffs, "; "))
		}
		t.Rows = append(t.Rows, row)
	}
	if f == formatCSV {
		if err := t.WriteCSV(e.out); err != nil {
			return err
		}
		// Flush first so that on a terminal the totals follow the rows.
		if err := e.out.Flush(); err != nil {
			return err
		}
		_, err := fmt.Fprint(e.stderr, totals)
		return err
	}
	if _, err := fmt.Fprint(e.out, totals); err != nil {
		return err
	}
	if len(v.Mismatches) == 0 {
		_, err := fmt.Fprintln(e.out, "rollups match the raw store")
		return err
	}
	return t.WriteText(e.out)
}

func nextDay(s string) string {
	d, err := model.ParseDay(s)
	if err != nil {
		return s
	}
	return (d + 1).String()
}
