package main

import (
	"context"
	"io"

	"github.com/sluicehq/sluice/internal/client"
	"github.com/sluicehq/sluice/internal/model"
	"github.com/sluicehq/sluice/internal/render"
)

func readingsCommand() command {
	return command{
		name:     "readings",
		synopsis: "--device D [--from T] [--to T] [--limit N] [--cursor C] [--all [--max-rows N]] [--format table|csv|json]",
		summary:  "list a device's readings in a time range, oldest first",
		about: `The table has a column per metric seen in the page (sorted by name), between
TS and SEQ; a reading without a metric leaves its cell empty.

` + timeHelp,
		examples: []string{
			"query readings --device pump-17 --from -1h",
			"query readings --device pump-17 --from 2026-11-22 --to 2026-11-23 --all --format csv > pump-17.csv",
		},
		flags: func(fs *flagSet, e *env) func(context.Context) error {
			device := fs.String("device", "", "device `ID` (required)")
			lf := addListFlags(fs)
			return func(ctx context.Context) error {
				if *device == "" {
					return fs.usagef("--device is required")
				}
				rng, f, c, err := lf.resolve(fs)
				if err != nil {
					return err
				}
				q := client.ReadingsQuery{Device: *device, Range: rng}
				rs, next, err := fetch(e, lf.rangeFlags, q.Cursor, func() (client.ReadingsPage, error) { return c.Readings(ctx, q) }, c.ReadingPages(ctx, q),
					func(p client.ReadingsPage) ([]model.Reading, string) { return p.Readings, p.NextCursor })
				if err != nil {
					return err
				}
				return e.print(f, result{
					table: func() render.Table { return render.ReadingsTable(rs) },
					json:  func(w io.Writer, next string) error { return render.ReadingsJSON(w, rs, next) },
					next:  next,
				})
			}
		},
	}
}
