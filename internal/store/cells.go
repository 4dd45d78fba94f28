package store

import (
	"cmp"
	"slices"
	"strings"

	"github.com/sluicehq/sluice/internal/model"
)

// LastOfEachCell returns the rows of a partition write in clustering order
// (ts, metric) with, of rows of one (ts, metric), only the last: within a
// batch the later write of a cell wins, as it does across commits. Every
// backend writes PartitionWrite.Readings through it, since a batch may
// hold two readings of one device and instant (the sink flushes them
// together) and no store settles that by itself: Cassandra gives the rows
// of a batch one write timestamp and keeps the larger value, and the
// embedded store writes a reading's cells as one key, in name order. Rows
// already strictly in that order, the usual batch, are returned as they
// are, without a copy.
func LastOfEachCell(rows []model.ReadingRow) []model.ReadingRow {
	order := func(a, b model.ReadingRow) int {
		return cmp.Or(cmp.Compare(a.TS, b.TS), strings.Compare(a.Metric, b.Metric))
	}
	strict := true
	for i := 1; i < len(rows) && strict; i++ {
		strict = order(rows[i-1], rows[i]) < 0
	}
	if strict {
		return rows
	}
	out := slices.Clone(rows)
	slices.SortStableFunc(out, order)
	w := 0
	for i := range out {
		if i+1 < len(out) && order(out[i], out[i+1]) == 0 {
			continue // a later row of the cell follows
		}
		out[w] = out[i]
		w++
	}
	return out[:w]
}
