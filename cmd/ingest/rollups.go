package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"path/filepath"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice/internal/chstore"
	"github.com/sluicehq/sluice/internal/config"
	"github.com/sluicehq/sluice/internal/outbox"
	"github.com/sluicehq/sluice/internal/rollmarks"
	"github.com/sluicehq/sluice/internal/rollupapi"
	"github.com/sluicehq/sluice/internal/rollupfeed"
	"github.com/sluicehq/sluice/internal/rollupstore"
	"github.com/sluicehq/sluice/internal/sink"
	"github.com/sluicehq/sluice/internal/store/pebblestore"
)

// rollups is the running rollup pipeline of a gateway: the feed on the
// sink's commit hook, its outbox (every row on its way to ClickHouse; with
// the embedded store only rows whose write failed), and the backend it
// ships to and the rollup endpoints read from. A nil *rollups (rollups.enabled: false) does
// nothing.
type rollups struct {
	feed    *rollupfeed.Feed
	ob      *outbox.Outbox
	ch      *chstore.Store
	emb     *rollupstore.Store
	marks   *rollmarks.Store
	api     *rollupapi.Handler
	logger  *slog.Logger
	timeout time.Duration
	// newMinutes: the feed sums the minutes one commit wrote whole from
	// its rows (rollupfeed.WithCarriedMinutes), which needs the sink's
	// sink.WithNewMinutes.
	newMinutes bool
}

func startRollups(cfg config.Config, raw rollupfeed.Raw, logger *slog.Logger, reg prometheus.Registerer) (*rollups, error) {
	if !cfg.Rollups.Enabled {
		logger.Info("rollups disabled (rollups.enabled: false)")
		return nil, nil
	}
	r := &rollups{logger: logger, timeout: cfg.HTTP.ShutdownTimeout}
	var dst rollupapi.Backend
	backend := "embedded"
	if cfg.Rollups.ClickHouse.Addr != "" {
		ch, err := chstore.Open(cfg.Rollups.ClickHouse, logger)
		if err != nil {
			return nil, err
		}
		r.ch, dst, backend = ch, ch, "clickhouse"
	} else {
		emb, err := rollupstore.OpenWith(filepath.Join(cfg.DataDir, "rollups"), rollupstore.Options{MemTableBytes: cfg.Plan().RollupMemTable}, logger)
		if err != nil {
			return nil, err
		}
		if reg != nil {
			if err := emb.Register(reg); err != nil {
				_ = emb.Close()
				return nil, err
			}
		}
		r.emb, dst = emb, emb
	}
	ob, err := outbox.Open(filepath.Join(cfg.DataDir, "outbox"), cfg.Rollups.OutboxMaxBytes, logger)
	if err != nil {
		r.closeBackend()
		return nil, err
	}
	r.ob = ob
	if marks, err := ob.Dirty(); err == nil && len(marks) > 0 {
		logger.Warn("rollups of these days are incomplete; run `query rollups rebuild` for them (with the tenant's token)", "days", rollupfeed.DirtyList(marks))
	}
	marks, inCommits, err := openMarks(cfg, raw, logger)
	if err != nil {
		_ = ob.Close()
		r.closeBackend()
		return nil, err
	}
	r.marks = marks
	var opts []rollupfeed.Option
	if inCommits {
		opts = append(opts, rollupfeed.WithMarksInCommits())
	}
	if pb, ok := raw.(*pebblestore.Store); ok {
		// A recompute, and verify, make one small read per device: through
		// a session, each costs a seek instead of a new iterator.
		raw = pebbleSessions{pb}
		if inCommits {
			// This gateway alone writes the embedded store, atomically:
			// a minute one commit wrote whole is summed from its rows.
			opts = append(opts, rollupfeed.WithCarriedMinutes())
			r.newMinutes = true
		}
	}
	if r.emb != nil {
		// Local and durable: no outbox write per row; the outbox keeps only
		// rows whose insert failed, and the dirty days.
		opts = append(opts, rollupfeed.WithLocalBackend())
	}
	r.feed, err = rollupfeed.New(cfg.Rollups, raw, marks, ob, dst, time.Now, logger, reg, opts...)
	if err != nil {
		_ = marks.Close()
		_ = ob.Close()
		r.closeBackend()
		return nil, err
	}
	r.api = rollupapi.New(raw, dst, rollupapi.OutboxStatus(backend, ob, logger), time.Now, logger,
		rollupapi.WithReadConfig(cfg.Read), rollupapi.WithRebuilds(cfg.Rollups.MaxRebuilds, cfg.Rollups.RebuildTimeout))
	r.api.ClearOnRebuild(ob)
	logger.Info("rollups on", "backend", backend, "clickhouse_addr", cfg.Rollups.ClickHouse.Addr, "roll_delay", cfg.Rollups.RollDelay)
	return r, nil
}

func (r *rollups) sinkOptions() []sink.Option {
	if r == nil {
		return nil
	}
	opts := []sink.Option{sink.WithCommitHook(r.feed)}
	if r.newMinutes {
		opts = append(opts, sink.WithNewMinutes())
	}
	return opts
}

func (r *rollups) routes() map[string]http.HandlerFunc {
	if r == nil {
		return nil
	}
	return r.api.Routes()
}

// openMarks opens the rollups' marks. On the embedded store they are kept
// in the store's database (rollmarks.In), so that each commit carries its
// marks in its own write (inCommits), and the marks database an earlier
// Sluice left in data_dir/rollmarks is taken over. On Cassandra they are
// kept in a database of their own in data_dir/rollmarks, synced before
// each commit.
func openMarks(cfg config.Config, raw rollupfeed.Raw, logger *slog.Logger) (marks *rollmarks.Store, inCommits bool, err error) {
	dir := filepath.Join(cfg.DataDir, "rollmarks")
	pb, ok := raw.(*pebblestore.Store)
	if !ok {
		marks, err = rollmarks.OpenWith(dir, rollmarks.Options{MemTableBytes: cfg.Plan().MarksMemTable}, logger)
		return marks, false, err
	}
	marks = rollmarks.In(pb.MarksIn())
	n, err := marks.TakeOver(dir, logger)
	if err != nil {
		return nil, false, err
	}
	if n > 0 {
		logger.Info("rollup marks of an earlier Sluice moved into the embedded store", "marks", n, "from", dir)
	}
	return marks, true, nil
}

// close runs after the sink drained: it recomputes every pending minute and
// ships what it can before the timeout; the rest stays in the marks and the
// outbox for the next start.
func (r *rollups) close() {
	if r == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), r.timeout)
	defer cancel()
	if err := r.feed.Close(ctx); err != nil {
		// A mark write is stuck on the disk: leave the database to the
		// process's exit.
		r.logger.Error("rollup marks left open", "err", err)
	} else if err := r.marks.Close(); err != nil {
		r.logger.Error("close rollup marks", "err", err)
	}
	if err := r.ob.Close(); err != nil {
		r.logger.Error("close rollup outbox", "err", err)
	}
	r.closeBackend()
	r.logger.Info("rollups stopped")
}

func (r *rollups) closeBackend() {
	if r.ch != nil {
		_ = r.ch.Close()
	}
	if r.emb != nil {
		_ = r.emb.Close()
	}
}

// migrateRollups creates the ClickHouse database and table (ingest migrate).
func migrateRollups(ctx context.Context, cfg config.Config, stdout io.Writer, logger *slog.Logger) error {
	if !cfg.Rollups.Enabled || cfg.Rollups.ClickHouse.Addr == "" {
		fmt.Fprintln(stdout, "rollups: no ClickHouse configured (rollups.clickhouse.addr); the embedded rollup store needs no migration")
		return nil
	}
	ch, err := chstore.Open(cfg.Rollups.ClickHouse, logger)
	if err != nil {
		return err
	}
	defer ch.Close()
	stmts, err := ch.Migrate(ctx)
	if err != nil {
		return err
	}
	major, minor, _ := ch.ServerVersion(ctx)
	fmt.Fprintf(stdout, "rollups: ClickHouse %s (server %d.%d): %d statements applied, table %s ready\n",
		cfg.Rollups.ClickHouse.Addr, major, minor, len(stmts), ch.Table())
	return nil
}

// pebbleSessions offers the embedded store's read sessions to the rollups
// (rollupfeed.SessionStore).
type pebbleSessions struct{ *pebblestore.Store }

func (p pebbleSessions) NewSession(ctx context.Context) (rollupfeed.ReadSession, error) {
	return p.NewReads(ctx)
}
