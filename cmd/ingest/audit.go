package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice/internal/audit/auditlog"
	"github.com/sluicehq/sluice/internal/config"
	"github.com/sluicehq/sluice/internal/readapi"
	"github.com/sluicehq/sluice/internal/retention"
)

// openAudit returns the audit log of st, or nil when audit.enabled is off.
func openAudit(cfg config.Config, st backend, logger *slog.Logger, reg prometheus.Registerer) (*auditlog.Log, error) {
	if !cfg.Audit.Enabled {
		return nil, nil
	}
	ast, ok := st.(auditlog.Store)
	if !ok {
		return nil, fmt.Errorf("audit.enabled: store backend %q keeps no audit logs", cfg.Store.Backend)
	}
	keys, err := auditlog.LoadKeys(cfg.Audit)
	if err != nil {
		return nil, err
	}
	return auditlog.New(cfg.Audit, ast, keys, time.Now, logger, reg), nil
}

// startAudit starts the sealer of al (nil: nothing). The returned function
// stops it and waits for the seal in progress; a seal cut short is done
// again by the next one.
func startAudit(ctx context.Context, cfg config.Config, al *auditlog.Log, logger *slog.Logger) func() {
	if al == nil {
		logger.Info("audit logs disabled (audit.enabled: false)")
		return func() {}
	}
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() { al.Run(ctx) })
	logger.Info("audit log sealer started", "seal_delay", cfg.Audit.SealDelay.String(),
		"checkpoint_interval", cfg.Audit.CheckpointInterval.String(), "accept_late", cfg.Audit.AcceptLate.String())
	return func() {
		cancel()
		wg.Wait()
	}
}

// auditRetention wraps the raw store's retention so that dropping an audit
// day keeps its streams' logs verifiable.
func auditRetention(al *auditlog.Log, stores []retention.Store) []retention.Store {
	if al != nil && len(stores) > 0 {
		stores[0] = al.Retention(stores[0])
	}
	return stores
}

// auditCmd runs "ingest audit keygen".
func auditCmd(args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 || args[0] != "keygen" {
		return usageError{fmt.Errorf("usage: ingest audit keygen --name NAME --out FILE")}
	}
	fs := flag.NewFlagSet("ingest audit keygen", flag.ContinueOnError)
	fs.SetOutput(stderr)
	name := fs.String("name", "", "key name: the log's identity, e.g. audit.example.com (required)")
	out := fs.String("out", "", "file to write the private signing key to (created, mode 0600; required)")
	if err := fs.Parse(args[1:]); err != nil {
		if err == flag.ErrHelp {
			return nil
		}
		return usageError{err}
	}
	if *name == "" || *out == "" {
		return usageError{fmt.Errorf("ingest audit keygen: --name and --out are required")}
	}
	skey, vkey, err := auditlog.GenerateKey(*name)
	if err != nil {
		return err
	}
	f, err := os.OpenFile(*out, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return fmt.Errorf("write signing key: %w", err)
	}
	if _, err := fmt.Fprintln(f, skey); err != nil {
		_ = f.Close()
		return fmt.Errorf("write signing key: %w", err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("write signing key: %w", err)
	}
	fmt.Fprintf(stdout, "signing key written to %s (set audit.key_file to it; keep it secret)\npublic key (publish it; auditors verify checkpoints with it):\n%s\n", *out, vkey)
	return nil
}

// auditRoutes are the audit log's read endpoints (none when it is off).
func auditRoutes(al *auditlog.Log, read readapi.Config, logger *slog.Logger) map[string]http.HandlerFunc {
	if al == nil {
		return nil
	}
	return al.Routes(logger.With("component", "audit"), auditlog.Limits{Timeout: read.Timeout, MaxDays: read.MaxDays})
}
