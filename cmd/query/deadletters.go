package main

import (
	"context"
	"io"

	"github.com/sluicehq/sluice/internal/client"
	"github.com/sluicehq/sluice/internal/model"
	"github.com/sluicehq/sluice/internal/render"
)

func deadLettersCommand() command {
	return command{
		name:     "deadletters",
		synopsis: "[--from T] [--to T] [--limit N] [--cursor C] [--all [--max-rows N]] [--format table|csv|json]",
		summary:  "list the messages kept as dead letters (bad JSON, bad fields, wrong device), oldest first",
		about: `A dead letter is a message the gateway could not store as rows: it keeps the
topic, the payload (cut at mqtt.dead_letter_payload_bytes), the reason and the
error. The token's tenant decides whose dead letters are listed; messages whose
tenant was not recognised are filed under mqtt.tenant.

` + timeHelp,
		examples: []string{
			"query deadletters --from -1h",
			"query deadletters --from 2026-11-22 --all --format json",
		},
		flags: func(fs *flagSet, e *env) func(context.Context) error {
			lf := addListFlags(fs)
			return func(ctx context.Context) error {
				rng, f, c, err := lf.resolve(fs)
				if err != nil {
					return err
				}
				q := client.DeadLettersQuery{Range: rng}
				dls, next, err := fetch(e, lf.rangeFlags, q.Cursor, func() (client.DeadLettersPage, error) { return c.DeadLetters(ctx, q) }, c.DeadLetterPages(ctx, q),
					func(p client.DeadLettersPage) ([]model.DeadLetter, string) { return p.DeadLetters, p.NextCursor })
				if err != nil {
					return err
				}
				return e.print(f, result{
					table: func() render.Table { return render.DeadLettersTable(dls) },
					json:  func(w io.Writer, next string) error { return render.DeadLettersJSON(w, dls, next) },
					next:  next,
				})
			}
		},
	}
}
