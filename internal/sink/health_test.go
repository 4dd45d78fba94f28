package sink

import (
	"context"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice/internal/model"
)

// A noisy device closes partitions and splits its day: the close-size and
// sub-bucket histograms see it, and it ranks first among the hottest.
func TestPartitionHealth(t *testing.T) {
	st := tempStore(t)
	bcfg := testBuckets()
	bcfg.MaxRows = 100
	reg := prometheus.NewRegistry()
	s := New(testConfig(), bcfg, st, discard, reg, WithInFlightCheck())
	t.Cleanup(func() { _ = s.Close(context.Background()) })
	write := func(dev string, n int) {
		for i := range n {
			if err := s.Write(context.Background(), &Request{Tenant: tenant, Readings: []model.Reading{reading(dev, base+int64(i), "a", "b")}}); err != nil {
				t.Fatal(err)
			}
		}
	}
	write("noisy", 260) // 520 rows: 5 partitions closed, 6 opened
	write("quiet", 3)
	if err := s.Write(context.Background(), &Request{Tenant: "other", Readings: []model.Reading{reading("noisy", base, "a")}}); err != nil {
		t.Fatal(err)
	}

	if got := sampleCount(t, reg, "sluice_partition_closed_rows"); got != 5 {
		t.Errorf("closed partitions observed %d, want 5", got)
	}
	if got := sampleCount(t, reg, "sluice_partition_sub_buckets"); got != 6+1+1 {
		t.Errorf("sub-bucket observations %d, want 8 (6 noisy partitions, the quiet one, the other tenant's)", got)
	}

	top := s.Hottest(tenant, model.KindReadings, model.DayOf(base), 10)
	if len(top) != 7 {
		t.Fatalf("Hottest = %+v, want the noisy device's 6 partitions and the quiet one", top)
	}
	if last := top[len(top)-1]; last.Key.Series != "quiet" {
		t.Errorf("Hottest = %+v, want the quiet device last", top)
	}
	if got := s.Hottest(tenant, model.KindAudit, model.DayOf(base), 10); len(got) != 0 {
		t.Errorf("Hottest audit = %+v, want none", got)
	}
}

func sampleCount(t *testing.T, reg *prometheus.Registry, name string) uint64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var n uint64
	for _, mf := range mfs {
		if mf.GetName() == name {
			for _, m := range mf.GetMetric() {
				n += m.GetHistogram().GetSampleCount()
			}
		}
	}
	return n
}
