package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice/internal/audit/auditlog"
	"github.com/sluicehq/sluice/internal/chstore"
	"github.com/sluicehq/sluice/internal/config"
	"github.com/sluicehq/sluice/internal/model"
	"github.com/sluicehq/sluice/internal/retention"
	"github.com/sluicehq/sluice/internal/rollupstore"
	"github.com/sluicehq/sluice/internal/store"
)

// horizon is the ingest-side retention check: the oldest timestamp kept.
func horizon(cfg retention.Config) func(model.Kind, string, time.Time) time.Time {
	return func(k model.Kind, tenant string, now time.Time) time.Time {
		return cfg.Horizon(store.BucketKind(k), tenant, now)
	}
}

// retentionStores are the stores a sweep covers: the raw-data backend and,
// when rollups are on, the rollup store (ClickHouse's minute table or the
// embedded rollup store), which may be nil.
func retentionStores(st backend, rollupStore retention.Store) ([]retention.Store, error) {
	rs, ok := st.(retention.Store)
	if !ok {
		return nil, fmt.Errorf("store %T cannot drop buckets", st)
	}
	out := []retention.Store{rs}
	if rollupStore != nil {
		out = append(out, rollupStore)
	}
	return out, nil
}

// retentionStore is the rollup store the gateway writes, for the sweeper,
// or nil when rollups are off.
func (r *rollups) retentionStore() retention.Store {
	switch {
	case r == nil:
		return nil
	case r.ch != nil:
		return r.ch
	case r.emb != nil:
		return r.emb
	}
	return nil
}

// startRetention runs the sweeper in the background when retention.enabled
// is set. The returned function stops it and waits for the sweep in
// progress to end (each step of a sweep is idempotent, so stopping midway
// is safe); call it before closing the store.
func startRetention(ctx context.Context, cfg config.Config, st backend, rollupStore retention.Store, al *auditlog.Log, logger *slog.Logger, reg prometheus.Registerer) (func(), error) {
	if !cfg.Retention.Enabled {
		logger.Info("retention sweeper disabled (retention.enabled: false)")
		return func() {}, nil
	}
	stores, err := retentionStores(st, rollupStore)
	if err != nil {
		return nil, err
	}
	stores = auditRetention(al, stores)
	sw := retention.New(cfg.Retention, stores, time.Now, logger, reg)
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() { sw.Run(ctx) })
	logger.Info("retention sweeper started", "interval", cfg.Retention.Interval.String(),
		"readings", cfg.Retention.Readings.String(), "audit", cfg.Retention.Audit.String(),
		"rollups", cfg.Retention.Rollups.String(), "dead_letters", cfg.Retention.DeadLetters.String(), "tenant_overrides", len(cfg.Retention.Tenants))
	return func() {
		cancel()
		wg.Wait()
		logger.Info("retention sweeper stopped")
	}, nil
}

const retentionUsage = `Usage: ingest retention run [--dry-run] [--tenant T] [--config FILE]

Runs one retention sweep now: every bucket (kind, tenant, UTC day) whose
whole day is older than its policy (retention.*) is dropped, data first and
catalogue last, and a table of what was dropped is printed: days,
partitions, rows and bytes per kind. --dry-run prints what would be dropped
and changes nothing; --tenant limits the sweep to one tenant.

The embedded store can only be opened by one process: stop the gateway
first, or let its scheduled sweeper do the work (retention.interval).
`

// retentionCmd runs `ingest retention run`.
func retentionCmd(ctx context.Context, args, env []string, stdout, stderr io.Writer) error {
	if len(args) == 0 || args[0] != "run" {
		fmt.Fprint(stderr, retentionUsage)
		return usageError{errors.New("retention: want the subcommand run")}
	}
	fs, cfgFile := commandFlags("ingest retention run", retentionUsage, env, stderr)
	dry := fs.Bool("dry-run", false, "print what would be dropped; change nothing")
	tenant := fs.String("tenant", "", "only this tenant's buckets")
	cfg, _, help, err := parseConfig(fs, args[1:], env, cfgFile)
	if help || err != nil {
		return err
	}
	logger := newLogger(cfg.Log, stderr)
	st, err := openBackend(ctx, &cfg, logger, prometheus.NewRegistry())
	if err != nil {
		if cfg.Store.Backend == "pebble" {
			return fmt.Errorf("%w (is the gateway running on %s? stop it first)", err, cfg.DataDir)
		}
		return err
	}
	defer func() {
		if err := st.Close(); err != nil {
			logger.Error("close store", "err", err)
		}
	}()
	var rollupStore retention.Store
	switch {
	case cfg.Rollups.Enabled && cfg.Rollups.ClickHouse.Addr != "":
		ch, err := chstore.Open(cfg.Rollups.ClickHouse, logger)
		if err != nil {
			return err
		}
		defer ch.Close()
		rollupStore = ch
	case cfg.Rollups.Enabled:
		emb, err := rollupstore.OpenWith(filepath.Join(cfg.DataDir, "rollups"), rollupstore.Options{MemTableBytes: cfg.Plan().RollupMemTable}, logger)
		if err != nil {
			return fmt.Errorf("%w (is the gateway running on %s? stop it first)", err, cfg.DataDir)
		}
		defer emb.Close()
		rollupStore = emb
	}
	stores, err := retentionStores(st, rollupStore)
	if err != nil {
		return err
	}
	al, err := openAudit(cfg, st, slog.New(slog.DiscardHandler), nil)
	if err != nil {
		return err
	}
	stores = auditRetention(al, stores)
	sw := retention.New(cfg.Retention, stores, time.Now, slog.New(slog.DiscardHandler), nil)
	bar := &progressBar{w: stderr}
	rep, err := sw.Sweep(ctx, retention.Options{DryRun: *dry, Tenant: *tenant, Progress: bar.update})
	bar.done()
	printReport(stdout, rep)
	return err
}

func printReport(w io.Writer, rep retention.Report) {
	verb := "dropped"
	if rep.DryRun {
		verb = "would drop (dry run, nothing changed)"
	}
	fmt.Fprintf(w, "retention sweep at %s: %s %d buckets\n", rep.Now.UTC().Format(time.RFC3339), verb, len(rep.Buckets))
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "kind\tdays\tpartitions\trows\tbytes\tdeletes\t")
	for _, k := range store.BucketKinds {
		kr := rep.Kinds[k]
		if kr == nil {
			kr = &retention.KindReport{}
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%d\t\n", k, kr.Days, kr.Partitions, kr.Rows, kr.Bytes, kr.Deletes)
	}
	_ = tw.Flush()
	if len(rep.Buckets) > 0 {
		first, last := rep.Buckets[0].Day, rep.Buckets[len(rep.Buckets)-1].Day
		fmt.Fprintf(w, "days %s .. %s\n", first, last)
	}
}

// progressBar draws "[#####     ] 12/40 readings/acme/2026-01-02" on one
// line of stderr, redrawn in place, for sweeps of more than a few buckets.
type progressBar struct {
	w     io.Writer
	drawn bool
}

const barWidth = 30

func (p *progressBar) update(done, total int, b store.Bucket) {
	if total < 5 {
		return
	}
	n := done * barWidth / total
	fmt.Fprintf(p.w, "\r[%s%s] %d/%d %-50s", strings.Repeat("#", n), strings.Repeat(" ", barWidth-n), done, total, b.String())
	p.drawn = true
}

func (p *progressBar) done() {
	if p.drawn {
		fmt.Fprintln(p.w)
	}
}
