package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/sluicehq/sluice/internal/chstore"
	"github.com/sluicehq/sluice/internal/render"
)

func sqlCommand() command {
	return command{
		name:     "sql",
		synopsis: `[--clickhouse HOST:PORT] [--database DB] [--user U] [--format table|csv|json] "SELECT …"`,
		summary:  "run a read-only SELECT on the ClickHouse that holds the rollups",
		about: `The query goes straight to ClickHouse over its native protocol with the
setting readonly=1, as the given user (not through the gateway, so a
tenant's token never reaches other tenants' rows: use a ClickHouse user
that may read what you ask for). Only SELECT and WITH … SELECT are sent.
The minute table is <database>.rollups_1m; read it with FINAL and skip rows
with count = 0 (see docs/data-model.md, "Rollups").
`,
		args: true,
		examples: []string{
			`query sql "SELECT device, sum(count) AS n FROM sluice.rollups_1m FINAL WHERE count > 0 GROUP BY device ORDER BY n DESC LIMIT 5"`,
		},
		flags: func(fs *flagSet, e *env) func(context.Context) error {
			addr := fs.String("clickhouse", "", "ClickHouse native `ADDR` (env SLUICE_ROLLUPS_CLICKHOUSE_ADDR)")
			db := fs.String("database", "sluice", "default `DATABASE`")
			user := fs.String("user", "default", "ClickHouse `USER` (password: env SLUICE_ROLLUPS_CLICKHOUSE_PASSWORD)")
			maxRows := fs.Int("max-rows", 100_000, "refuse results of more than `N` rows")
			formatFlag := addFormatFlag(fs)
			return func(ctx context.Context) error {
				if fs.NArg() != 1 {
					return fs.usagef("give the query as one argument, in quotes")
				}
				query := fs.Arg(0)
				if err := chstore.CheckReadOnly(query); err != nil {
					return fs.usagef("%v", err)
				}
				f, err := parseFormat(fs, *formatFlag)
				if err != nil {
					return err
				}
				cfg := chstore.DefaultConfig()
				cfg.Addr, cfg.Database, cfg.Username = *addr, *db, *user
				if cfg.Addr == "" {
					cfg.Addr = e.getenv("SLUICE_ROLLUPS_CLICKHOUSE_ADDR")
				}
				if cfg.Addr == "" {
					return fs.usagef("no ClickHouse: set --clickhouse or SLUICE_ROLLUPS_CLICKHOUSE_ADDR (the embedded rollup store has no SQL; use query rollups and query top)")
				}
				cfg.Password = e.getenv("SLUICE_ROLLUPS_CLICKHOUSE_PASSWORD")
				cfg.QueryTimeout = 5 * time.Minute
				if err := cfg.Validate("--"); err != nil {
					return fs.usagef("%v", err)
				}
				ch, err := chstore.Open(cfg, slog.New(slog.NewTextHandler(io.Discard, nil)))
				if err != nil {
					return err
				}
				defer ch.Close()
				res, err := ch.SQL(ctx, query, *maxRows)
				if err != nil {
					return err
				}
				t := render.Table{}
				for i, c := range res.Columns {
					t.Columns = append(t.Columns, render.Column{Name: c, Right: isNumeric(res.Types[i])})
				}
				t.Rows = res.Rows
				switch f {
				case formatJSON:
					rows := make([]map[string]string, len(res.Rows))
					for i, r := range res.Rows {
						rows[i] = make(map[string]string, len(r))
						for j, v := range r {
							rows[i][res.Columns[j]] = v
						}
					}
					enc := json.NewEncoder(e.out)
					enc.SetIndent("", "  ")
					err = enc.Encode(map[string]any{"columns": res.Columns, "types": res.Types, "rows": rows})
				case formatCSV:
					err = t.WriteCSV(e.out)
				default:
					err = t.WriteText(e.out)
				}
				if err != nil {
					return fmt.Errorf("write output: %w", err)
				}
				return nil
			}
		},
	}
}

func isNumeric(typ string) bool {
	for _, p := range []string{"UInt", "Int", "Float", "Decimal"} {
		if len(typ) >= len(p) && typ[:len(p)] == p {
			return true
		}
	}
	return false
}
