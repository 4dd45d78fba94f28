// Package partcount counts the rows of one partition, to make a catalogue
// entry exact again when it cannot be trusted (see docs/data-model.md,
// "Reconciling after a crash"). The scan is bounded: it reads at most a
// given number of rows, in pages.
package partcount

import (
	"context"
	"fmt"

	"github.com/sluicehq/sluice/internal/model"
	"github.com/sluicehq/sluice/internal/store"
)

// Scanner reads a partition's rows (pebblestore, cqlstore).
type Scanner interface {
	ScanReadings(ctx context.Context, pk model.PartitionKey, r store.Range, limit int) ([]model.ReadingRow, error)
	ScanAudit(ctx context.Context, pk model.PartitionKey, r store.Range, limit int) ([]model.AuditEvent, error)
}

// recountPage is how many rows one read of a recount fetches.
const recountPage = 5000

// Recount counts the rows of partition pk, reading at most limit+1 rows, and
// returns its exact entry (rows, bytes, time range; the key set, state and
// closed flag left for the caller). over is true when the partition holds
// more than limit rows: the count is then incomplete.
func Recount(ctx context.Context, sc Scanner, pk model.PartitionKey, limit int64) (pi model.PartitionInfo, over bool, err error) {
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
