package cqlstore_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/sluicehq/sluice/internal/buckets"
	"github.com/sluicehq/sluice/internal/model"
	"github.com/sluicehq/sluice/internal/store"
	"github.com/sluicehq/sluice/internal/store/cqlstore"
)

// TestEachSeries lists a tenant-day of 300 devices spread over every
// catalogue shard, each with one to five partitions of three writers, read
// three catalogue rows a request so that a device's entries straddle pages:
// every device comes once, in byte order, the same set EachPartition walks,
// with a device whose partition was only registered, and without a device
// that has readings but no catalogue entry or any device of another tenant,
// kind or day. With one request allowed at a time, fn can itself read the
// store while the listing runs.
func TestEachSeries(t *testing.T) {
	st := openStore(t, func(c *cqlstore.Config) { c.MaxConcurrentRequests = 1 })
	st.SetSeriesPage(3)
	ctx := t.Context()
	tenant := unique(t)
	d := model.Day(20_100)

	var (
		want   []string
		batch  store.Batch
		shards = map[int]bool{}
	)
	for i := range 300 {
		dev := fmt.Sprintf("dev-%03d", i)
		want = append(want, dev)
		shards[cqlstore.CatalogueShard(dev)] = true
		sd := model.SeriesDay{Kind: model.KindReadings, Tenant: tenant, Series: dev, Day: d}
		subs := []uint32{buckets.SingleID(0), buckets.SubID(0, 1), buckets.SingleID(3), buckets.SubID(3, 1), buckets.SubID(7, 2)}
		for _, sub := range subs[:1+i%len(subs)] {
			batch.Catalogue = append(batch.Catalogue, model.PartitionInfo{Key: sd.Partition(sub), Rows: 10, Bytes: 300, State: buckets.StateSplit})
		}
	}
	if len(shards) != 64 {
		t.Fatalf("the devices cover %d catalogue shards, want all 64", len(shards))
	}
	for _, sd := range []model.SeriesDay{
		{Kind: model.KindAudit, Tenant: tenant, Series: "stream-1", Day: d},
		{Kind: model.KindReadings, Tenant: tenant + "-other", Series: "dev-other-tenant", Day: d},
		{Kind: model.KindReadings, Tenant: tenant, Series: "dev-day-before", Day: d - 1},
		{Kind: model.KindReadings, Tenant: tenant, Series: "dev-day-after", Day: d + 1},
	} {
		batch.Catalogue = append(batch.Catalogue, model.PartitionInfo{Key: sd.Partition(0), Rows: 1, State: buckets.StateSingle})
	}
	if err := st.Commit(ctx, &batch); err != nil {
		t.Fatalf("Commit: %v", err)
	}
	// A partition registered by a commit that stopped before its counts
	// (the key alone), and readings that no catalogue entry names.
	sess := st.Session()
	if err := sess.Query(`INSERT INTO catalogue (tenant, kind, day, shard, series, sub) VALUES (?, 'readings', ?, ?, ?, 0)`,
		tenant, d.Start(), cqlstore.CatalogueShard("dev-registered"), "dev-registered").ExecContext(ctx); err != nil {
		t.Fatal(err)
	}
	want = append(want, "dev-registered")
	slices.Sort(want)
	if err := sess.Query(`INSERT INTO readings (tenant, device, day, sub, ts, metric, value, seq, has_seq) VALUES (?, ?, ?, 0, ?, 'temp', 1, 0, false)`,
		tenant, "dev-orphan", d.Start(), d.Start()+1000).ExecContext(ctx); err != nil {
		t.Fatal(err)
	}

	var got []string
	if err := st.EachSeries(ctx, tenant, model.KindReadings, d, func(s string) error {
		got = append(got, s)
		if _, err := st.Catalogue(ctx, model.SeriesDay{Kind: model.KindReadings, Tenant: tenant, Series: s, Day: d}); err != nil {
			return fmt.Errorf("catalogue of %s during the listing: %w", s, err)
		}
		return nil
	}); err != nil {
		t.Fatalf("EachSeries: %v", err)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("EachSeries (-want +got):\n%s", diff)
	}
	var fromPartitions []string
	if err := st.EachPartition(ctx, tenant, model.KindReadings, d, func(pi model.PartitionInfo) error {
		fromPartitions = append(fromPartitions, pi.Key.Series)
		return nil
	}); err != nil {
		t.Fatalf("EachPartition: %v", err)
	}
	slices.Sort(fromPartitions)
	if diff := cmp.Diff(slices.Compact(fromPartitions), got); diff != "" {
		t.Errorf("EachSeries differs from the series EachPartition walks (-partitions +series):\n%s", diff)
	}

	// The end of ctx stops the listing, between two series and before the first.
	cctx, cancel := context.WithCancel(ctx)
	n := 0
	err := st.EachSeries(cctx, tenant, model.KindReadings, d, func(string) error {
		if n++; n == 100 {
			cancel()
		}
		return nil
	})
	if !errors.Is(err, context.Canceled) || n != 100 {
		t.Errorf("EachSeries cancelled after 100 series: %v after %d, want %v after 100", err, n, context.Canceled)
	}
	n = 0
	err = st.EachSeries(cctx, tenant, model.KindReadings, d, func(string) error { n++; return nil })
	if !errors.Is(err, context.Canceled) || n != 0 {
		t.Errorf("EachSeries with ctx ended: %v after %d series, want %v before any", err, n, context.Canceled)
	}
}
