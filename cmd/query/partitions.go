package main

import (
	"context"
	"fmt"

	"github.com/sluicehq/sluice/internal/client"
	"github.com/sluicehq/sluice/internal/model"
	"github.com/sluicehq/sluice/internal/render"
)

func partitionsCommand() command {
	return command{
		name:     "partitions",
		synopsis: "(--device D | --stream S) --day YYYY-MM-DD [--format table|csv|json]",
		summary:  "list the partitions of a device or stream on one UTC day",
		about: `The table ends with a total line. ROWS and BYTES count every write, so
overwritten rows count again. When the gateway could not make the entries
exact first (it is stopping, or the store failed), JSON says "unsettled": true
and the other formats say so on stderr.
`,
		examples: []string{
			"query partitions --device pump-17 --day 2026-11-22",
			"query partitions --stream billing-api --day 2026-11-22 --format csv",
		},
		flags: func(fs *flagSet, e *env) func(context.Context) error {
			device := fs.String("device", "", "device `ID` (readings partitions)")
			stream := fs.String("stream", "", "audit stream `NAME` (audit partitions)")
			day := fs.String("day", "", "the UTC day to list, `YYYY-MM-DD` (required)")
			formatFlag := addFormatFlag(fs)
			conn := addConnFlags(fs, orDirect)
			return func(ctx context.Context) error {
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
				f, err := parseFormat(fs, *formatFlag)
				if err != nil {
					return err
				}
				c, err := conn.client(fs)
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
