package pebblestore_test

import (
	"fmt"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/sluicehq/sluice/internal/model"
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
