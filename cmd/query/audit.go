package main

import (
	"context"
	"io"

	"github.com/sluicehq/sluice/internal/client"
	"github.com/sluicehq/sluice/internal/model"
	"github.com/sluicehq/sluice/internal/render"
)

func auditCommand() command {
	return command{
		name:     "audit",
		synopsis: "--stream S [--from T] [--to T] [--limit N] [--cursor C] [--all [--max-rows N]] [--format table|csv|json]",
		summary:  "list a stream's audit events in a time range, oldest first",
		about:    "Attributes are shown as compact JSON.\n\n" + timeHelp,
		examples: []string{
			"query audit --stream billing-api --from -7d --format json",
		},
		flags: func(fs *flagSet, e *env) func(context.Context) error {
			stream := fs.String("stream", "", "audit stream `NAME` (required)")
			lf := addListFlags(fs)
			return func(ctx context.Context) error {
				if *stream == "" {
					return fs.usagef("--stream is required")
				}
				rng, f, c, err := lf.resolve(fs)
				if err != nil {
					return err
				}
				q := client.AuditQuery{Stream: *stream, Range: rng}
				es, next, err := fetch(e, lf.rangeFlags, q.Cursor, func() (client.AuditPage, error) { return c.Audit(ctx, q) }, c.AuditPages(ctx, q),
					func(p client.AuditPage) ([]model.AuditEvent, string) { return p.Events, p.NextCursor })
				if err != nil {
					return err
				}
				return e.print(f, result{
					table: func() render.Table { return render.AuditTable(es) },
					json:  func(w io.Writer, next string) error { return render.AuditJSON(w, es, next) },
					next:  next,
				})
			}
		},
	}
}
