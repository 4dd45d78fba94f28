// Command ingest runs the Sluice gateway: `ingest` (or `ingest serve`)
// starts it; `ingest migrate` creates the Cassandra schema; `ingest
// retention run` drops expired day buckets now; `ingest check-config`
// validates the configuration and exits; `ingest healthcheck` asks a
// running gateway whether it is ready.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/pflag"

	"github.com/sluicehq/sluice/internal/config"
	"github.com/sluicehq/sluice/internal/reqid"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	go func() {
		<-ctx.Done()
		stop() // a second signal now kills the process at once
	}()
	if err := run(ctx, os.Args[1:], os.Environ(), os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "ingest:", err)
		var ue usageError
		if errors.As(err, &ue) {
			os.Exit(2)
		}
		os.Exit(1)
	}
}

type usageError struct{ error }

// commandFlags returns the flag set of a command, which prints usage and
// its flags on -h, with --config (default SLUICE_CONFIG) added.
func commandFlags(name, usage string, env []string, stderr io.Writer) (*pflag.FlagSet, *string) {
	fs := pflag.NewFlagSet(name, pflag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.SortFlags = false
	fs.Usage = func() {
		fmt.Fprint(stderr, usage, "\nFlags:\n")
		fs.PrintDefaults()
	}
	return fs, fs.String("config", lookup(env, "SLUICE_CONFIG"), "configuration file (YAML)")
}

// parseConfig adds the setting flags to fs (which has --config, read into
// cfgFile), parses args and loads the configuration; help reports that
// -h was asked for and answered.
func parseConfig(fs *pflag.FlagSet, args, env []string, cfgFile *string) (config.Config, config.Loaded, bool, error) {
	keyFlags := config.AddFlags(fs)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, pflag.ErrHelp) {
			return config.Config{}, config.Loaded{}, true, nil
		}
		return config.Config{}, config.Loaded{}, false, usageError{err}
	}
	if fs.NArg() > 0 {
		return config.Config{}, config.Loaded{}, false, usageError{fmt.Errorf("unexpected argument %q", fs.Arg(0))}
	}
	cfg, loaded, err := config.LoadSources(config.Sources{File: *cfgFile, Env: env, Flags: keyFlags})
	return cfg, loaded, false, err
}

const usage = `Usage: ingest [command] [--config FILE] [--migrate] [--KEY VALUE ...]

Commands:
  serve          run the gateway (the default); --migrate creates the
                 Cassandra schema first
  migrate        create the Cassandra keyspace and tables, and the ClickHouse
                 rollup tables (rollups.clickhouse.addr), if missing (idempotent)
  check-config   load and validate the configuration, print the effective
                 configuration (secrets redacted, the source of each value)
                 and exit
  retention run  drop expired day buckets now [--dry-run] [--tenant T]
  healthcheck    ask the gateway of this configuration for /readyz (--live:
                 /healthz) and exit 0 if it answers 200 (container healthcheck)
  audit keygen   create an audit checkpoint signing key --name NAME --out FILE

Configuration comes from --config FILE (or SLUICE_CONFIG), else ./configs/ingest.yaml
when present, else built-in defaults; SLUICE_* environment variables override
any key (SLUICE_HTTP_ADDR, SLUICE_DATA_DIR, SLUICE_AUTH_TOKENS="tok=tenant,...");
a flag named after the key overrides both (--http.addr 0.0.0.0:8080,
--store.backend cassandra). Precedence: flag > environment > file > default.
ingest --help lists every flag.
`

func run(ctx context.Context, args, env []string, stdout, stderr io.Writer) error {
	cmd := "serve"
	if len(args) > 0 && args[0] != "" && args[0][0] != '-' {
		cmd, args = args[0], args[1:]
	}
	if cmd == "audit" {
		return auditCmd(args, stdout, stderr)
	}
	if cmd == "retention" {
		return retentionCmd(ctx, args, env, stdout, stderr)
	}
	if cmd == "healthcheck" {
		return healthcheckCmd(ctx, args, env, stdout, stderr)
	}
	fs, cfgFile := commandFlags("ingest "+cmd, usage, env, stderr)
	doMigrate := fs.Bool("migrate", false, "serve: create the Cassandra schema first (as ingest migrate)")
	cfg, loaded, help, err := parseConfig(fs, args, env, cfgFile)
	if help || err != nil {
		return err
	}
	file := loaded.File
	switch cmd {
	case "serve":
		logger := newLogger(cfg.Log, stderr)
		for _, r := range loaded.Retired {
			logger.Warn("retired setting: " + r)
		}
		if *doMigrate {
			if err := migrate(ctx, cfg, logger); err != nil {
				return err
			}
			if err := migrateRollups(ctx, cfg, stdout, logger); err != nil {
				return err
			}
		}
		return serve(ctx, cfg, file, logger, nil)
	case "migrate":
		logger := newLogger(cfg.Log, stderr)
		if err := migrate(ctx, cfg, logger); err != nil {
			return err
		}
		return migrateRollups(ctx, cfg, stdout, logger)
	case "check-config":
		if file == "" {
			file = "(built-in defaults)"
		}
		fmt.Fprintf(stdout, "# configuration from %s is valid\n", file)
		fmt.Fprint(stdout, config.Effective(cfg, loaded))
		return nil
	case "help":
		fmt.Fprint(stdout, usage)
		return nil
	default:
		return usageError{fmt.Errorf("unknown command %q (see ingest help)", cmd)}
	}
}

func lookup(env []string, name string) string {
	for _, kv := range env {
		if len(kv) > len(name) && kv[:len(name)] == name && kv[len(name)] == '=' {
			return kv[len(name)+1:]
		}
	}
	return ""
}

func newLogger(c config.Log, w io.Writer) *slog.Logger {
	var level slog.Level
	_ = level.UnmarshalText([]byte(c.Level)) // validated by config
	opts := &slog.HandlerOptions{Level: level}
	var h slog.Handler = slog.NewTextHandler(w, opts)
	if c.Format == "json" {
		h = slog.NewJSONHandler(w, opts)
	}
	// Lines logged with a request's context carry its request_id.
	return slog.New(reqid.LogHandler{Handler: h})
}
