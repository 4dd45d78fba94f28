package cqlstore_test

import (
	"fmt"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/sluicehq/sluice/internal/model"
	"github.com/sluicehq/sluice/internal/store"
	"github.com/sluicehq/sluice/internal/store/cqlstore"
	"github.com/sluicehq/sluice/internal/store/storetest"
)

// TestCataloguesMatchesCatalogue checks the batched catalogue read against
// one read per series-day: series that share a catalogue partition (more
// than one IN list's worth), several sub-buckets, other kinds and days, and
// series-days with no entry at all, asked for twice.
func TestCataloguesMatchesCatalogue(t *testing.T) {
	st := openStore(t, nil)
	tenant := unique(t)
	day := model.Day(20_500)
	// 130 series of one catalogue shard (IN lists hold 100) and 20 of others.
	var same, other []string
	for i := 0; len(same) < 130 || len(other) < 20; i++ {
		s := fmt.Sprintf("dev-%d", i)
		switch {
		case cqlstore.CatalogueShard(s) == 7 && len(same) < 130:
			same = append(same, s)
		case cqlstore.CatalogueShard(s) != 7 && len(other) < 20:
			other = append(other, s)
		}
	}
	b, sds := storetest.CatalogueFixture(tenant, day, append(same, other...))
	// The same series as audit streams and on the next day: never returned.
	b.Catalogue = append(b.Catalogue,
		model.PartitionInfo{Key: model.PartitionKey{Kind: model.KindAudit, Tenant: tenant, Series: same[0], Day: day}, Rows: 1, State: "single"},
		model.PartitionInfo{Key: model.PartitionKey{Kind: model.KindReadings, Tenant: tenant, Series: same[0], Day: day + 1}, Rows: 1, State: "single"})
	if err := st.Commit(t.Context(), &b); err != nil {
		t.Fatal(err)
	}
	sds = append(sds, sds[0], sds[4]) // asked twice
	entries := storetest.CataloguesMatch(t, st, sds)
	if entries == 0 {
		t.Fatal("no catalogue entries read back")
	}
}

// TestVersionOrdersCommits commits two batches of the same keys in the
// reverse of their versions, as two committers of the sink may: the later
// version wins in the rows and in the catalogue. A third commit, whose
// entry keeps its state and closed flag, leaves those out of the write: the
// entry must still read back whole.
func TestVersionOrdersCommits(t *testing.T) {
	st := openStore(t, nil)
	tenant := unique(t)
	day := model.Day(20_501)
	pk := model.PartitionKey{Kind: model.KindReadings, Tenant: tenant, Series: "pump", Day: day, Sub: 0}
	ts := day.Start() + 5000
	batch := func(value float64, rows int64, maxTS int64) *store.Batch {
		return &store.Batch{
			Partitions: []store.PartitionWrite{{Key: pk, Readings: []model.ReadingRow{{TS: ts, Metric: "rpm", Value: value}}}},
			Catalogue:  []model.PartitionInfo{{Key: pk, Rows: rows, Bytes: 10 * rows, MinTS: ts, MaxTS: maxTS, State: "single"}},
		}
	}
	older, newer := batch(1, 1, ts), batch(2, 2, ts+10)
	older.Version = st.Version()
	newer.Version = st.Version()
	if newer.Version <= older.Version {
		t.Fatalf("Version went from %d to %d", older.Version, newer.Version)
	}
	for _, b := range []*store.Batch{newer, older} {
		if err := st.Commit(t.Context(), b); err != nil {
			t.Fatal(err)
		}
	}
	check := func(wantValue float64, want model.PartitionInfo) {
		t.Helper()
		rows, err := st.ScanReadings(t.Context(), pk, store.Range{From: day.Start(), To: day.End()}, 10)
		if err != nil {
			t.Fatal(err)
		}
		if len(rows) != 1 || rows[0].Value != wantValue {
			t.Errorf("rows = %+v, want one with value %g", rows, wantValue)
		}
		cat, err := st.Catalogue(t.Context(), pk.SeriesDay())
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff([]model.PartitionInfo{want}, cat); diff != "" {
			t.Errorf("catalogue (-want +got):\n%s", diff)
		}
	}
	check(2, newer.Catalogue[0])

	third := batch(3, 3, ts+20)
	if err := st.Commit(t.Context(), third); err != nil {
		t.Fatal(err)
	}
	check(3, third.Catalogue[0])
	// Closing it is written in full.
	closing := batch(4, 4, ts+30)
	closing.Catalogue[0].Closed = true
	if err := st.Commit(t.Context(), closing); err != nil {
		t.Fatal(err)
	}
	check(4, closing.Catalogue[0])
}

// TestConcurrentCommitsOneCatalogueEntry commits many batches of one
// partition at once, in an order unrelated to their versions, as the sink's
// committers may: their catalogue entries are coalesced into shared writes,
// and the entry left is the one of the greatest version.
func TestConcurrentCommitsOneCatalogueEntry(t *testing.T) {
	st := openStore(t, nil)
	tenant := unique(t)
	day := model.Day(20_502)
	pk := model.PartitionKey{Kind: model.KindReadings, Tenant: tenant, Series: "pump", Day: day, Sub: 0}
	const n = 24
	batches := make([]*store.Batch, n)
	for i := range batches {
		ts := day.Start() + int64(i)
		batches[i] = &store.Batch{
			Partitions: []store.PartitionWrite{{Key: pk, Readings: []model.ReadingRow{{TS: ts, Metric: "m", Value: float64(i)}}}},
			Catalogue:  []model.PartitionInfo{{Key: pk, Rows: int64(i + 1), Bytes: int64(10 * (i + 1)), MinTS: day.Start(), MaxTS: ts, State: "single", Closed: i == n-1}},
			Version:    st.Version(),
		}
	}
	errs := make(chan error, n)
	for _, i := range []int{5, 23, 0, 17, 9, 2, 21, 14, 7, 19, 11, 1, 22, 4, 16, 8, 20, 3, 13, 6, 18, 10, 15, 12} {
		go func() { errs <- st.Commit(t.Context(), batches[i]) }()
	}
	for range n {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	cat, err := st.Catalogue(t.Context(), pk.SeriesDay())
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(batches[n-1].Catalogue, cat); diff != "" {
		t.Errorf("catalogue (-want +got):\n%s", diff)
	}
	rows, err := st.ScanReadings(t.Context(), pk, store.Range{From: day.Start(), To: day.End()}, 100)
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != n {
		t.Errorf("read back %d rows, want %d", len(rows), n)
	}
}
