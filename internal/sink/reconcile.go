package sink

import (
	"context"
	"fmt"

	"golang.org/x/sync/errgroup"

	"github.com/sluicehq/sluice/internal/buckets"
	"github.com/sluicehq/sluice/internal/model"
	"github.com/sluicehq/sluice/internal/partcount"
)

// Reconciling after a crash. A gateway that stops without settling (killed,
// or its host lost) leaves catalogue entries marked Ahead: claims that may
// count more rows than their partitions hold, or, on a store that is not
// atomic, fewer (rows stored, counts not). Before the planner relies on such
// an entry (to count on from it, or to close the partition at its bound),
// and before the partitions listing shows it, the sink counts the
// partition's rows (a scan of one partition, bounded by buckets.max_rows)
// and settles the exact entry. It does so only for the entries its planner
// Reconciles (its own writer slot; every entry on the embedded store): an
// entry of another live gateway is that gateway's to settle.

// reconcile counts the partitions of freshly loaded series-days whose
// entries are marked Ahead and that this gateway reconciles, and gives the
// counts to the planner, which settles them (Settle writes the exact
// entries). Call it right after Load, before any Place.
func (s *Sink) reconcile(ctx context.Context, series []*buckets.Series, loaded [][]model.PartitionInfo) error {
	// A Store that reads a partition's rows (partcount.Scanner) is needed
	// to reconcile entries left ahead; without it they stay claims (upper
	// bounds: safe, not exact).
	sc, ok := s.st.(partcount.Scanner)
	if !ok {
		return nil
	}
	type job struct {
		s  *buckets.Series
		pi model.PartitionInfo
	}
	var jobs []job
	for i, parts := range loaded {
		for _, pi := range parts {
			if pi.Ahead && s.planner.Reconciles(pi.Key.Sub) {
				jobs = append(jobs, job{series[i], pi})
			}
		}
	}
	if len(jobs) == 0 {
		return nil
	}
	exact := make([]model.PartitionInfo, len(jobs))
	overs := make([]bool, len(jobs))
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(catalogueLoads)
	limit := max(s.bcfg.MaxRows, 1)
	for i, j := range jobs {
		g.Go(func() error {
			pi, over, err := partcount.Recount(gctx, sc, j.pi.Key, max(limit, j.pi.Rows))
			exact[i], overs[i] = pi, over
			return err
		})
	}
	if err := g.Wait(); err != nil {
		return fmt.Errorf("reconcile partitions left ahead: %w", err)
	}
	for i, j := range jobs {
		if overs[i] {
			// More rows than any entry may claim: keep the claim, which at
			// least keeps the planner from adding to it, and say so.
			s.logger.Warn("partition holds more rows than its bound; left unreconciled", "partition", j.pi.Key, "rows_over", max(limit, j.pi.Rows))
			continue
		}
		s.planner.Reconcile(j.s, exact[i])
		s.hm.reconciled.Inc()
		s.logger.Info("partition reconciled after an unclean stop", "partition", j.pi.Key,
			"claimed_rows", j.pi.Rows, "rows", exact[i].Rows, "claimed_bytes", j.pi.Bytes, "bytes", exact[i].Bytes)
	}
	return nil
}
