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

func rollupsRebuildCommand() command {
	return command{
		name:     "rollups rebuild",
		synopsis: "--from T --to T [--device D] [--format table|csv|json]",
		summary:  "recompute rollups from the raw store and replace them",
		about: `The gateway reads the raw readings of every device (or of --device) over the
whole minutes of [--from, --to), recomputes their rollups and replaces the
rows its rollup store holds there. Progress is drawn on stderr; the answer
streams as long as the rebuild runs, so --timeout does not cut it (Ctrl-C
does). A gateway recomputes the minutes it writes the same way, so a rebuild of
a range still being written is harmless: the later recompute of a minute wins.
CSV and JSON print the gateway's result: device_days, readings (raw metric
values read), rows_written (rollup rows written, retractions included) and
rows_retracted.

` + timeHelp,
		examples: []string{
			"query rollups rebuild --from 2026-11-22 --to 2026-11-23",
			"query rollups rebuild --from -6h --to -1h --device pump-17 --format json",
		},
		flags: func(fs *flagSet, e *env) func(context.Context) error {
			span := addSpanFlags(fs, true)
			device := fs.String("device", "", "only this device `ID`")
			formatFlag := addFormatFlag(fs)
			conn := addConnFlags(fs, gatewayOnly)
			return func(ctx context.Context) error {
				if span.from == "" || span.to == "" {
					return fs.usagef("--from and --to are required")
				}
				lo, hi, err := span.resolve(fs)
				if err != nil {
					return err
				}
				f, c, err := conn.formatAndClient(fs, *formatFlag)
				if err != nil {
					return err
				}
				res, err := c.RebuildRollups(ctx, lo, hi, *device, func(p client.RebuildProgress) {
					if p.Total > 0 {
						fmt.Fprintf(e.stderr, "\r%s", progressBar(p.Done, p.Total, 30, p.Device+" "+p.Day))
					}
				})
				fmt.Fprintln(e.stderr)
				if err != nil {
					return err
				}
				if err := printRebuild(e, f, res); err != nil {
					return fmt.Errorf("write output: %w", err)
				}
				return nil
			}
		},
	}
}

// printRebuild writes a rebuild's result in format f.
func printRebuild(e *env, f format, res client.RebuildResult) error {
	switch f {
	case formatJSON:
		enc := json.NewEncoder(e.out)
		enc.SetIndent("", "  ")
		return enc.Encode(res)
	case formatCSV:
		t := render.Table{
			Columns: []render.Column{{Name: "device_days"}, {Name: "readings"}, {Name: "rows_written"}, {Name: "rows_retracted"}},
			Rows: [][]string{{strconv.Itoa(res.DeviceDays), strconv.FormatInt(res.Readings, 10),
				strconv.Itoa(res.Written), strconv.Itoa(res.Retracted)}},
		}
		return t.WriteCSV(e.out)
	}
	_, err := fmt.Fprintf(e.out, "rebuilt %d device-days from %d raw readings: %d rollup rows written, %d replaced rows retracted\n",
		res.DeviceDays, res.Readings, res.Written-res.Retracted, res.Retracted)
	return err
}

// progressBar draws [█████·····] done/total label.
func progressBar(done, total, width int, label string) string {
	fill := 0
	if total > 0 {
		fill = done * width / total
	}
	return fmt.Sprintf("[%s%s] %d/%d %-40s", strings.Repeat("█", fill), strings.Repeat("·", width-fill), done, total, label)
}
