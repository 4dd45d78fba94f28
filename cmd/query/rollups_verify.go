package main

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/sluicehq/sluice/internal/model"
	"github.com/sluicehq/sluice/internal/render"
)

// errMismatch makes verify exit 1 after printing the mismatches.
var errMismatch = errors.New("rollups do not match the raw store")

func rollupsVerifyCommand() command {
	return command{
		name:     "rollups verify",
		synopsis: "--day YYYY-MM-DD",
		summary:  "compare raw reading counts with rollup counts per device and metric",
		about: `Every (device, metric) whose count of raw readings on the UTC day differs
from the count its rollups hold is printed; the exit status is then 1. Repair
with 'query rollups rebuild' over that day.
`,
		examples: []string{"query rollups verify --day 2026-11-22"},
		flags: func(fs *flagSet, e *env) func(context.Context) error {
			day := fs.String("day", "", "the UTC day, `YYYY-MM-DD` (required)")
			conn := addConnFlags(fs)
			return func(ctx context.Context) error {
				if _, err := model.ParseDay(*day); err != nil {
					return fs.usagef("--day %q: want YYYY-MM-DD", *day)
				}
				c, err := conn.client(fs)
				if err != nil {
					return err
				}
				v, err := c.VerifyRollups(ctx, *day)
				if err != nil {
					return err
				}
				fmt.Fprintf(e.out, "%s: %d devices, %d device-metrics, %d raw readings, %d counted by rollups\n",
					v.Day, v.Devices, v.Metrics, v.RawRows, v.RollupRows)
				if len(v.Mismatches) == 0 {
					fmt.Fprintln(e.out, "rollups match the raw store")
					return nil
				}
				t := render.Table{Columns: []render.Column{{Name: "device"}, {Name: "metric"}, {Name: "raw", Right: true},
					{Name: "rollup", Right: true}, {Name: "diff", Right: true}}}
				for _, m := range v.Mismatches {
					t.Rows = append(t.Rows, []string{m.Device, m.Metric, strconv.FormatInt(m.Raw, 10), strconv.FormatInt(m.Rollup, 10),
						fmt.Sprintf("%+d", m.Rollup-m.Raw)})
				}
				if err := t.WriteText(e.out); err != nil {
					return fmt.Errorf("write output: %w", err)
				}
				return fmt.Errorf("%w: %d mismatches on %s; run: query rollups rebuild --from %s --to %s", errMismatch,
					len(v.Mismatches), v.Day, v.Day, nextDay(v.Day))
			}
		},
	}
}

func nextDay(s string) string {
	d, err := model.ParseDay(s)
	if err != nil {
		return s
	}
	return (d + 1).String()
}
