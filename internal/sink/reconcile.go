package sink

import (
	"context"
	"fmt"

	"golang.org/x/sync/errgroup"

	"github.com/sluicehq/sluice/internal/buckets"
	"github.com/sluicehq/sluice/internal/model"
	"github.com/sluicehq/sluice/internal/store"
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

// PartitionScanner is implemented by a Store that reads a partition's rows;
// the sink needs it to reconcile entries left ahead. Without it such entries
// stay claims (upper bounds: safe, not exact).
type PartitionScanner interface {
	ScanReadings(ctx context.Context, pk model.PartitionKey, r store.Range, limit int) ([]model.ReadingRow, error)
	ScanAudit(ctx context.Context, pk model.PartitionKey, r store.Range, limit int) ([]model.AuditEvent, error)
}

// recountPage is how many rows one read of a recount fetches.
const recountPage = 5000

// Recount counts the rows of partition pk, reading at most limit+1 rows, and
// returns its exact entry (rows, bytes, time range; the key set, state and
// closed flag left for the caller). over is true when the partition holds
// more than limit rows: the count is then incomplete.
func Recount(ctx context.Context, sc PartitionScanner, pk model.PartitionKey, limit int64) (pi model.PartitionInfo, over bool, err error) {
	pi.Key = pk
	r := store.Range{From: pk.Day.Start(), To: pk.Day.End()}
	note := func(ts, size int64) {
		if pi.Rows == 0 || ts < pi.MinTS {
			pi.MinTS = ts
		}
		if pi.Rows == 0 || ts > pi.MaxTS {
			pi.MaxTS = ts
		}
		pi.Rows++
		pi.Bytes += size
	}
	for {
		n := int(min(recountPage, limit+1-pi.Rows))
		var got int
		var last store.Pos
		if pk.Kind == model.KindAudit {
			es, err := sc.ScanAudit(ctx, pk, r, n)
			if err != nil {
				return pi, false, fmt.Errorf("count rows of %v: %w", pk, err)
			}
			for _, e := range es {
				note(e.TS, e.Size())
				last = store.Pos{TS: e.TS, Key: e.EventID}
			}
			got = len(es)
		} else {
			rs, err := sc.ScanReadings(ctx, pk, r, n)
			if err != nil {
				return pi, false, fmt.Errorf("count rows of %v: %w", pk, err)
			}
			for _, row := range rs {
				note(row.TS, row.Size())
				last = store.Pos{TS: row.TS, Key: row.Metric}
			}
			got = len(rs)
		}
		if pi.Rows > limit {
			return pi, true, nil
		}
		if got < n {
			return pi, false, nil
		}
		r.After = &last
	}
}

// reconcile counts the partitions of freshly loaded series-days whose
// entries are marked Ahead and that this gateway reconciles, and gives the
// counts to the planner, which settles them (Settle writes the exact
// entries). Call it right after Load, before any Place.
func (s *Sink) reconcile(ctx context.Context, series []*buckets.Series, loaded [][]model.PartitionInfo) error {
	sc, ok := s.st.(PartitionScanner)
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
			pi, over, err := Recount(gctx, sc, j.pi.Key, max(limit, j.pi.Rows))
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
			s.logger.Warn("partition holds more rows than its bound; left unreconciled", "partition", j.pi.Key, "rows_over", limit)
			continue
		}
		s.planner.Reconcile(j.s, exact[i])
		s.hm.reconciled.Inc()
		s.logger.Info("partition reconciled after an unclean stop", "partition", j.pi.Key,
			"claimed_rows", j.pi.Rows, "rows", exact[i].Rows, "claimed_bytes", j.pi.Bytes, "bytes", exact[i].Bytes)
	}
	return nil
}
