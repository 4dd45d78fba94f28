package main

import (
	"context"
	"fmt"
	"strings"

	"github.com/sluicehq/sluice/internal/client"
)

func rollupsRebuildCommand() command {
	return command{
		name:     "rollups rebuild",
		synopsis: "--from T --to T [--device D]",
		summary:  "recompute rollups from the raw store and replace them",
		about: `The gateway reads the raw readings of every device (or of --device) over the
whole minutes of [--from, --to), recomputes their rollups and replaces the
rows its rollup store holds there. Progress is drawn on stderr. Rebuild
ranges older than rollups.allowed_lateness + rollups.keep_closed, or run it
again later: a window still open in a gateway is re-emitted on top.

` + timeHelp,
		examples: []string{
			"query rollups rebuild --from 2026-11-22 --to 2026-11-23",
			"query rollups rebuild --from -6h --to -1h --device pump-17",
		},
		flags: func(fs *flagSet, e *env) func(context.Context) error {
			span := addSpanFlags(fs, true)
			device := fs.String("device", "", "only this device `ID`")
			conn := addConnFlags(fs)
			return func(ctx context.Context) error {
				if span.from == "" || span.to == "" {
					return fs.usagef("--from and --to are required")
				}
				lo, hi, err := span.resolve(fs)
				if err != nil {
					return err
				}
				c, err := conn.client(fs)
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
				fmt.Fprintf(e.out, "rebuilt %d device-days from %d raw readings: %d rollup rows written, %d replaced rows retracted\n",
					res.DeviceDays, res.Readings, res.Written-res.Retracted, res.Retracted)
				return nil
			}
		},
	}
}

// progressBar draws [█████·····] done/total label.
func progressBar(done, total, width int, label string) string {
	fill := 0
	if total > 0 {
		fill = done * width / total
	}
	return fmt.Sprintf("[%s%s] %d/%d %-40s", strings.Repeat("█", fill), strings.Repeat("·", width-fill), done, total, label)
}
