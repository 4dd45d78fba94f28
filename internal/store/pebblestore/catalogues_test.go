package pebblestore_test

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/sluicehq/sluice/internal/model"
	"github.com/sluicehq/sluice/internal/store"
	"github.com/sluicehq/sluice/internal/store/storetest"
)

// Catalogues, which reads many series-days' catalogues with one iterator,
// returns for each exactly what was committed for it, and what Catalogue
// returns: series whose names are prefixes of each other, series-days
// without entries, a series-day asked twice, the same series as an audit
// stream and on the next day.
func TestCataloguesMatchCatalogue(t *testing.T) {
	st := open(t, t.TempDir())
	defer st.Close()
	day := model.DayOf(1_700_000_000_000)
	series := []string{"d", "d1", "d10", "d2", "a", "z", "d1x"}
	for i := range 40 {
		series = append(series, fmt.Sprintf("dev-%03d", 40-i))
	}
	b, sds := storetest.CatalogueFixture("acme", day, series)
	b.Catalogue = append(b.Catalogue,
		model.PartitionInfo{Key: model.PartitionKey{Kind: model.KindAudit, Tenant: "acme", Series: "d", Day: day}, Rows: 1, State: "single"},
		model.PartitionInfo{Key: model.PartitionKey{Kind: model.KindReadings, Tenant: "acme", Series: "d", Day: day + 1}, Rows: 1, State: "single"},
		model.PartitionInfo{Key: model.PartitionKey{Kind: model.KindReadings, Tenant: "acme2", Series: "d", Day: day}, Rows: 1, State: "single"})
	if err := st.Commit(t.Context(), &b); err != nil {
		t.Fatal(err)
	}
	sds = append(sds, sds[0], sds[4], model.SeriesDay{Kind: model.KindReadings, Tenant: "other", Series: "d", Day: day})
	// Catalogue reads one series-day through Catalogues, so check both
	// against what was committed too, not only against each other.
	if entries := storetest.CataloguesMatch(t, st, sds); entries == 0 {
		t.Fatal("no catalogue entries read back")
	}
	got, err := st.Catalogues(t.Context(), sds)
	if err != nil {
		t.Fatal(err)
	}
	for i, sd := range sds {
		var want []model.PartitionInfo
		for _, pi := range b.Catalogue {
			if pi.Key.SeriesDay() == sd {
				want = append(want, pi)
			}
		}
		if diff := cmp.Diff(want, got[i]); diff != "" {
			t.Errorf("%v: catalogue read back differs from the committed one (-want +got):\n%s", sd, diff)
		}
	}
	if got, err := st.Catalogues(t.Context(), nil); err != nil || len(got) != 0 {
		t.Errorf("Catalogues(nil) = %v, %v", got, err)
	}
}

// Catalogues finds each series-day's entries whether it seeks to it or
// finds the iterator already standing past it: many series-days, most of
// them absent, asked in random sets, with duplicates and with a series
// whose encoding is a prefix of another's.
func TestCataloguesSkipAbsent(t *testing.T) {
	st := open(t, t.TempDir())
	defer st.Close()
	day := model.DayOf(1_700_000_000_000)
	rng := rand.New(rand.NewPCG(3, 4))
	var series []string
	for i := range 600 {
		series = append(series, fmt.Sprintf("dev-%04d", i))
	}
	series = append(series, "p", "p\x00q", "p\x00q\x00r") // "p\x00" prefixes the others' keys
	committed := map[model.SeriesDay][]model.PartitionInfo{}
	var b store.Batch
	for _, s := range series {
		if rng.IntN(4) != 0 && s != "p\x00q" {
			continue // three in four have no catalogue
		}
		sd := model.SeriesDay{Kind: model.KindReadings, Tenant: "acme", Series: s, Day: day}
		for sub := range uint32(1 + rng.IntN(3)) {
			pi := model.PartitionInfo{Key: sd.Partition(sub), Rows: int64(1 + rng.IntN(100)), State: "single"}
			b.Catalogue = append(b.Catalogue, pi)
			committed[sd] = append(committed[sd], pi)
		}
	}
	if err := st.Commit(t.Context(), &b); err != nil {
		t.Fatal(err)
	}
	found := 0
	for round := range 50 {
		var sds []model.SeriesDay
		for range 1 + rng.IntN(200) {
			sds = append(sds, model.SeriesDay{Kind: model.KindReadings, Tenant: "acme", Series: series[rng.IntN(len(series))], Day: day})
		}
		got, err := st.Catalogues(t.Context(), sds)
		if err != nil {
			t.Fatal(err)
		}
		for i, sd := range sds {
			if diff := cmp.Diff(committed[sd], got[i]); diff != "" {
				t.Fatalf("round %d: %q differs (-committed +read):\n%s", round, sd.Series, diff)
			}
			found += len(got[i])
		}
	}
	if found == 0 {
		t.Fatal("setup: no catalogue entry asked for")
	}
}

// CatalogueEmpty tells a day with a catalogue entry (of any tenant or
// kind) from one without, including the days on either side of one that
// has entries, and a day whose only entry was dropped by retention.
func TestCatalogueEmpty(t *testing.T) {
	st := open(t, t.TempDir())
	defer st.Close()
	day := model.DayOf(1_700_000_000_000)
	b := store.Batch{Catalogue: []model.PartitionInfo{
		{Key: model.PartitionKey{Kind: model.KindAudit, Tenant: "acme", Series: "s", Day: day}, Rows: 1, State: "single"},
		{Key: model.PartitionKey{Kind: model.KindReadings, Tenant: "z", Series: "d", Day: day + 2}, Rows: 1, State: "single"},
	}}
	if err := st.Commit(t.Context(), &b); err != nil {
		t.Fatal(err)
	}
	if _, err := st.DropCatalogue(t.Context(), store.Bucket{Kind: store.BucketReadings, Tenant: "z", Day: day + 2}); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		d     model.Day
		empty bool
	}{{day - 1, true}, {day, false}, {day + 1, true}, {day + 2, true}, {day + 3, true}} {
		got, err := st.CatalogueEmpty(t.Context(), tc.d)
		if err != nil {
			t.Fatal(err)
		}
		if got != tc.empty {
			t.Errorf("CatalogueEmpty(%v) = %v, want %v", tc.d, got, tc.empty)
		}
	}
}
