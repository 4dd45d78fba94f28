package cqlstore_test

import (
	"fmt"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/sluicehq/sluice/internal/model"
	"github.com/sluicehq/sluice/internal/store"
)

// A stream-day's leaves are spread over partitions of a bounded number of
// chunks (audit_leaf_buckets), read back in order across them, still read
// from audit_leaves for days sealed before the buckets, and dropped with
// the day from both tables.
func TestAuditLeavesInBuckets(t *testing.T) {
	st := openStore(t, nil)
	st.SetLeafBucket(2)
	ctx := t.Context()
	tenant, stream := unique(t), "payments"
	day := model.DayOf(1_700_000_000_000)
	var want []store.AuditLeaf
	for c := range 5 {
		var chunk []store.AuditLeaf
		for i := range c + 1 {
			lf := store.AuditLeaf{TS: day.Start() + int64(c*100+i), EventID: fmt.Sprintf("e-%d-%d", c, i)}
			lf.Hash[0], lf.Hash[1] = byte(c), byte(i)
			chunk = append(chunk, lf)
		}
		if err := st.PutAuditLeaves(ctx, tenant, stream, day, uint32(c), chunk); err != nil {
			t.Fatal(err)
		}
		want = append(want, chunk...)
	}
	read := func(stream string) []store.AuditLeaf {
		t.Helper()
		var got []store.AuditLeaf
		if err := st.AuditLeaves(ctx, tenant, stream, day, func(lf store.AuditLeaf) error {
			got = append(got, lf)
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		return got
	}
	if diff := cmp.Diff(want, read(stream)); diff != "" {
		t.Errorf("leaves read back (-want +got):\n%s", diff)
	}
	chunksIn := func(table string, bucket int) int {
		t.Helper()
		q := `SELECT COUNT(*) FROM ` + table + ` WHERE tenant = ? AND stream = ? AND day = ?`
		args := []any{tenant, stream, day.Start()}
		if bucket >= 0 {
			q += ` AND bucket = ?`
			args = append(args, bucket)
		}
		var n int
		if err := st.Session().Query(q, args...).ScanContext(ctx, &n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	for b, n := range []int{2, 2, 1, 0} {
		if got := chunksIn("audit_leaf_buckets", b); got != n {
			t.Errorf("bucket %d holds %d chunks, want %d", b, got, n)
		}
	}

	// A day sealed by an earlier version: its leaves in audit_leaves.
	legacy := "legacy"
	if err := st.Session().Query(`INSERT INTO audit_leaves (tenant, stream, day, chunk, leaves) VALUES (?, ?, ?, 0, ?)`,
		tenant, legacy, day.Start(), store.AppendAuditLeaves(nil, want[:3])).ExecContext(ctx); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want[:3], read(legacy)); diff != "" {
		t.Errorf("leaves of a day sealed before the buckets (-want +got):\n%s", diff)
	}

	// Retention drops the leaves with the day's audit partitions.
	var b store.Batch
	for _, s := range []string{stream, legacy} {
		pk := model.SeriesDay{Kind: model.KindAudit, Tenant: tenant, Series: s, Day: day}.Partition(0)
		b.Partitions = append(b.Partitions, store.PartitionWrite{Key: pk, Events: []model.AuditEvent{{EventID: "e", Stream: s, TS: day.Start(), Actor: "a", Action: "x", Resource: "r", Outcome: "ok"}}})
		b.Catalogue = append(b.Catalogue, model.PartitionInfo{Key: pk, Rows: 1, MinTS: day.Start(), MaxTS: day.Start(), State: "single"})
	}
	if err := st.Commit(ctx, &b); err != nil {
		t.Fatal(err)
	}
	if _, err := st.DropPartitions(ctx, tenant, model.KindAudit, day); err != nil {
		t.Fatal(err)
	}
	if got := chunksIn("audit_leaf_buckets", 0) + chunksIn("audit_leaf_buckets", 1) + chunksIn("audit_leaf_buckets", 2); got != 0 {
		t.Errorf("%d chunks left in audit_leaf_buckets after the drop", got)
	}
	if n := len(read(legacy)); n != 0 {
		t.Errorf("%d leaves of the legacy day left after the drop", n)
	}
}
