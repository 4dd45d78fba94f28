package retention

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice/internal/model"
	"github.com/sluicehq/sluice/internal/store"
)

// Store is what the sweeper needs of a backend. Every method is idempotent:
// a bucket whose data is already gone lists, measures and drops without
// error, which is what makes an interrupted sweep safe to run again.
type Store interface {
	// Buckets lists the buckets that hold data or catalogue entries, of
	// every day before the given one.
	Buckets(ctx context.Context, before model.Day) ([]store.Bucket, error)
	// Measure returns what the bucket holds according to its catalogue.
	Measure(ctx context.Context, b store.Bucket) (store.BucketSize, error)
	// DropData deletes the bucket's rows (and indexes) with whole-range or
	// whole-partition deletes, never row by row, but leaves its catalogue
	// entries, so that a drop interrupted midway is still listed. It
	// returns the number of delete operations it issued.
	DropData(ctx context.Context, b store.Bucket) (int, error)
	// DropCatalogue deletes the bucket's catalogue entries. The sweeper
	// calls it only after DropData succeeded.
	DropCatalogue(ctx context.Context, b store.Bucket) (int, error)
}

// KindReport sums what a sweep dropped (or, in a dry run, would drop) of
// one kind.
type KindReport struct {
	Days       int   // buckets: distinct (tenant, day) pairs, or days for rollups
	Partitions int64 // as catalogued
	Rows       int64 // as catalogued (an upper bound)
	Bytes      int64
	Deletes    int // delete operations issued (0 in a dry run)
}

// Report is the result of one sweep.
type Report struct {
	Now     time.Time
	DryRun  bool
	Buckets []store.Bucket // planned, oldest first
	Kinds   map[store.BucketKind]*KindReport
	Deletes int // every delete operation issued, data and catalogue
}

func (r *Report) kind(k store.BucketKind) *KindReport {
	kr := r.Kinds[k]
	if kr == nil {
		kr = &KindReport{}
		r.Kinds[k] = kr
	}
	return kr
}

// Options select what one sweep does.
type Options struct {
	DryRun bool   // plan and measure only: nothing is deleted
	Tenant string // only this tenant's buckets (and not the all-tenant rollup days); "" for all
	// Progress, if set, is called after each planned bucket is handled.
	Progress func(done, total int, b store.Bucket)
}

// Sweeper drops expired buckets from its stores: on demand (Sweep) or on a
// schedule (Run). Several sweepers, in one process or in several gateways,
// may run at once: every step is idempotent, so two sweepers of one bucket
// both finish without error and leave the same result.
type Sweeper struct {
	cfg    Config
	stores []Store
	now    func() time.Time
	logger *slog.Logger
	m      *metrics
}

// New returns a sweeper over stores (the raw-data store, and the rollup
// store when there is one).
func New(cfg Config, stores []Store, now func() time.Time, logger *slog.Logger, reg prometheus.Registerer) *Sweeper {
	return &Sweeper{cfg: cfg, stores: stores, now: now, logger: logger, m: newMetrics(reg)}
}

type planned struct {
	st Store
	b  store.Bucket
}

// Sweep runs one sweep: list the buckets older than the shortest policy,
// plan, then for each planned bucket (oldest first) measure it, drop its
// data, and drop its catalogue entries last. A bucket that fails is
// reported and the sweep goes on with the others; the errors are joined.
func (s *Sweeper) Sweep(ctx context.Context, opt Options) (Report, error) {
	now := s.now()
	rep := Report{Now: now, DryRun: opt.DryRun, Kinds: make(map[store.BucketKind]*KindReport)}
	before := s.cfg.Before(now)
	var work []planned
	for _, st := range s.stores {
		all, err := st.Buckets(ctx, before)
		if err != nil {
			s.m.sweeps.WithLabelValues("error").Inc()
			return rep, fmt.Errorf("list buckets before %s: %w", before, err)
		}
		if opt.Tenant != "" {
			kept := all[:0]
			for _, b := range all {
				if b.Tenant == opt.Tenant {
					kept = append(kept, b)
				}
			}
			all = kept
		}
		for _, b := range Plan(s.cfg, now, all) {
			work = append(work, planned{st, b})
			rep.Buckets = append(rep.Buckets, b)
		}
	}
	var errs []error
	for i, w := range work {
		if err := ctx.Err(); err != nil {
			errs = append(errs, err)
			break
		}
		if err := s.one(ctx, w, &rep, opt.DryRun); err != nil {
			errs = append(errs, err)
		}
		if opt.Progress != nil {
			opt.Progress(i+1, len(work), w.b)
		}
	}
	err := errors.Join(errs...)
	switch {
	case err != nil:
		s.m.sweeps.WithLabelValues("error").Inc()
	case opt.DryRun:
		s.m.sweeps.WithLabelValues("dry_run").Inc()
	default:
		s.m.sweeps.WithLabelValues("ok").Inc()
		s.m.lastSuccess.Set(float64(now.Unix()))
	}
	return rep, err
}

func (s *Sweeper) one(ctx context.Context, w planned, rep *Report, dry bool) error {
	size, err := w.st.Measure(ctx, w.b)
	if err != nil {
		return fmt.Errorf("measure %s: %w", w.b, err)
	}
	kr := rep.kind(w.b.Kind)
	if dry {
		kr.Days++
		kr.Partitions += size.Partitions
		kr.Rows += size.Rows
		kr.Bytes += size.Bytes
		return nil
	}
	n, err := w.st.DropData(ctx, w.b)
	kr.Deletes += n
	rep.Deletes += n
	s.m.deletes.WithLabelValues(w.b.Kind.String()).Add(float64(n))
	if err != nil {
		return fmt.Errorf("drop %s: %w", w.b, err)
	}
	n, err = w.st.DropCatalogue(ctx, w.b)
	kr.Deletes += n
	rep.Deletes += n
	s.m.deletes.WithLabelValues(w.b.Kind.String()).Add(float64(n))
	if err != nil {
		return fmt.Errorf("drop catalogue of %s: %w", w.b, err)
	}
	kr.Days++
	kr.Partitions += size.Partitions
	kr.Rows += size.Rows
	kr.Bytes += size.Bytes
	s.m.buckets.WithLabelValues(w.b.Kind.String()).Inc()
	s.m.rows.WithLabelValues(w.b.Kind.String()).Add(float64(size.Rows))
	s.logger.Info("bucket dropped", "kind", w.b.Kind.String(), "tenant", w.b.Tenant, "day", w.b.Day.String(),
		"partitions", size.Partitions, "rows", size.Rows, "bytes", size.Bytes)
	return nil
}

// Run sweeps at once and then every Config.Interval until ctx ends. Errors
// are logged and counted; the next sweep retries what is left.
func (s *Sweeper) Run(ctx context.Context) {
	t := time.NewTicker(s.cfg.Interval.D())
	defer t.Stop()
	for {
		start := time.Now()
		rep, err := s.Sweep(ctx, Options{})
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			s.logger.Error("retention sweep", "err", err, "buckets", len(rep.Buckets))
		} else if len(rep.Buckets) > 0 {
			s.logger.Info("retention sweep done", "buckets", len(rep.Buckets), "deletes", rep.Deletes,
				"took", time.Since(start).Round(time.Millisecond))
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
