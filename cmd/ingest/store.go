package main

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice/internal/config"
	"github.com/sluicehq/sluice/internal/readapi"
	"github.com/sluicehq/sluice/internal/rollupfeed"
	"github.com/sluicehq/sluice/internal/sink"
	"github.com/sluicehq/sluice/internal/store/cqlstore"
	"github.com/sluicehq/sluice/internal/store/pebblestore"
)

// backend is what the gateway uses of a storage backend. Each reads range
// by range and lists a day's devices from its catalogue (rollupfeed.Raw),
// so rollup verify and whole-day rebuild work on every backend.
type backend interface {
	sink.Store
	rollupfeed.Raw
	readapi.DeadLetterStore
	Close() error
}

// startupTimeout bounds how long start-up waits for Cassandra to answer.
const startupTimeout = 2 * time.Minute

// openBackend opens the configured store. For Cassandra it also tells the
// bucket planner that several gateways may share the store (see
// buckets.Config.PerWriterSingle).
func openBackend(ctx context.Context, cfg *config.Config, logger *slog.Logger, reg prometheus.Registerer) (backend, error) {
	switch cfg.Store.Backend {
	case "cassandra":
		cfg.Buckets.PerWriterSingle = true
		ctx, cancel := context.WithTimeout(ctx, startupTimeout)
		defer cancel()
		st, err := cqlstore.Open(ctx, cfg.Store.Cassandra, logger.With("component", "cassandra"), reg)
		if err != nil {
			return nil, fmt.Errorf("open cassandra store (did you run `ingest migrate`?): %w", err)
		}
		logger.Info("cassandra store open", "hosts", cfg.Store.Cassandra.Hosts, "keyspace", cfg.Store.Cassandra.Keyspace,
			"local_dc", cfg.Store.Cassandra.LocalDC, "write_consistency", cfg.Store.Cassandra.WriteConsistency)
		return st, nil
	default:
		opts := pebblestore.OptionsFor(cfg.Plan())
		opts.CacheBytes = cfg.Store.Pebble.CacheBytes
		st, err := pebblestore.Open(cfg.DataDir, opts, logger)
		if err != nil {
			return nil, err
		}
		if reg != nil {
			if err := st.Register(reg); err != nil {
				_ = st.Close()
				return nil, err
			}
		}
		return st, nil
	}
}

// migrate creates the Cassandra keyspace and tables if they do not exist.
// The embedded store needs no migration.
func migrate(ctx context.Context, cfg config.Config, logger *slog.Logger) error {
	if cfg.Store.Backend != "cassandra" {
		logger.Info("nothing to migrate: the embedded store creates itself", "backend", cfg.Store.Backend)
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, startupTimeout)
	defer cancel()
	return cqlstore.Migrate(ctx, cfg.Store.Cassandra, logger.With("component", "cassandra"))
}
