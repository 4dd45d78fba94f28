package sink

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/sluicehq/sluice/internal/buckets"
	"github.com/sluicehq/sluice/internal/model"
	"github.com/sluicehq/sluice/internal/store"
)

// A fleet larger than the planner's bound, each device writing a reading
// a pass, on a store that began the day empty: with forgotten series-days
// remembered, no catalogue is read (the day is known empty, and every
// forgotten series-day is restored from what is remembered), and every
// reading and entry is as it is when they are read from the store.
func TestRememberedSeriesDaysReadNoCatalogue(t *testing.T) {
	const devices, passes = 60, 3
	for _, settled := range []int{0, 1000} {
		t.Run(fmt.Sprintf("max_settled=%d", settled), func(t *testing.T) {
			st := tempStore(t)
			bcfg := testBuckets()
			bcfg.MaxSeriesDays, bcfg.MaxSettled = 5, settled
			bcfg.Reserve = buckets.DefaultReserve(bcfg) // as the gateway runs
			s := New(testConfig(), bcfg, st, discard, prometheus.NewRegistry(), WithInFlightCheck())
			for pass := range passes {
				for first := 0; first < devices; first += 10 {
					var rs []model.Reading
					for d := first; d < first+10; d++ {
						rs = append(rs, reading(fmt.Sprintf("dev-%d", d), base+int64(pass)*1000+int64(d), "a"))
					}
					if err := s.Write(t.Context(), &Request{Tenant: tenant, Readings: rs}); err != nil {
						t.Fatal(err)
					}
				}
			}
			reads := testutil.ToFloat64(s.m.catalogueReads)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if err := s.Close(ctx); err != nil {
				t.Fatal(err)
			}
			t.Logf("%v catalogue reads, %v series-days remembered", reads, testutil.ToFloat64(s.m.settled))
			switch {
			case settled > 0 && reads != 0:
				t.Errorf("%v catalogue reads, want none", reads)
			case settled == 0 && reads < devices*(passes-1):
				t.Errorf("%v catalogue reads without remembering, want at least %d: the test does not make the planner forget", reads, devices*(passes-1))
			}
			for d := range devices {
				sd := model.SeriesDay{Kind: model.KindReadings, Tenant: tenant, Series: fmt.Sprintf("dev-%d", d), Day: model.DayOf(base)}
				parts, err := st.Catalogue(t.Context(), sd)
				if err != nil {
					t.Fatal(err)
				}
				if len(parts) != 1 || parts[0].Rows != passes || parts[0].Ahead ||
					parts[0].MinTS != base+int64(d) || parts[0].MaxTS != base+int64(passes-1)*1000+int64(d) {
					t.Fatalf("%v: catalogue %+v, want one exact partition of %d rows", sd, parts, passes)
				}
				rows, err := st.ScanReadings(t.Context(), parts[0].Key, store.Range{From: base, To: base + day}, 10)
				if err != nil {
					t.Fatal(err)
				}
				if len(rows) != passes {
					t.Errorf("%v: %d rows read back, want %d", sd, len(rows), passes)
				}
			}
		})
	}
}
