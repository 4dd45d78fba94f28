package pebblestore_test

import (
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/sluicehq/sluice/internal/model"
	"github.com/sluicehq/sluice/internal/store"
	"github.com/sluicehq/sluice/internal/store/pebblestore"
)

// gather returns the value of every family reg holds, by name.
func gather(t *testing.T, reg *prometheus.Registry) map[string]float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			// A labelled family's sum, and each of its series as
			// name{label=value}.
			names := []string{mf.GetName()}
			for _, l := range m.GetLabel() {
				names = append(names, mf.GetName()+"{"+l.GetName()+"="+l.GetValue()+"}")
			}
			for _, name := range names {
				switch mf.GetType() {
				case dto.MetricType_COUNTER:
					out[name] += m.GetCounter().GetValue()
				case dto.MetricType_GAUGE:
					out[name] += m.GetGauge().GetValue()
				}
			}
		}
	}
	return out
}

// The store's metrics follow its LSM tree: a commit and a flush show as a
// flush, a table in level 0 and bytes on disk; a write stall Pebble
// reports is counted with its time, under its reason.
func TestStoreMetrics(t *testing.T) {
	st, err := pebblestore.Open(t.TempDir(), pebblestore.Options{CacheBytes: 1 << 20}, discard)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	reg := prometheus.NewRegistry()
	if err := st.Register(reg); err != nil {
		t.Fatal(err)
	}
	before := gather(t, reg)
	for _, name := range []string{"sluice_store_flushes_total", "sluice_store_l0_tables", "sluice_store_l0_sublevels", "sluice_store_write_stalls_total"} {
		if v, ok := before[name]; !ok || v != 0 {
			t.Errorf("%s = %v (exported: %v) on an empty store, want 0", name, v, ok)
		}
	}

	day := model.DayOf(time.Now().UnixMilli())
	pk := model.PartitionKey{Kind: model.KindReadings, Tenant: "t", Series: "d", Day: day}
	b := &store.Batch{Catalogue: []model.PartitionInfo{{Key: pk, Rows: 1, MinTS: day.Start(), MaxTS: day.Start(), State: "single"}}}
	if err := st.Commit(t.Context(), b); err != nil {
		t.Fatal(err)
	}
	if err := st.Flush(); err != nil {
		t.Fatal(err)
	}
	st.StallForTest(pebble.WriteStallBeginInfo{Reason: "test"}, 20*time.Millisecond)
	st.StallForTest(pebble.WriteStallBeginInfo{Reason: "memtable count limit reached"}, time.Millisecond)

	after := gather(t, reg)
	for name, want := range map[string]float64{
		"sluice_store_flushes_total":                        1,
		"sluice_store_l0_tables":                            1,
		"sluice_store_l0_sublevels":                         1,
		"sluice_store_write_stalls_total":                   2,
		"sluice_store_write_stalls_total{reason=memtables}": 1,
		"sluice_store_write_stalls_total{reason=l0}":        0,
		"sluice_store_write_stalls_total{reason=other}":     1,
		"sluice_store_write_stall_seconds_total{reason=l0}": 0,
	} {
		if after[name] != want {
			t.Errorf("%s = %v after a commit, a flush and a stall, want %v", name, after[name], want)
		}
	}
	if err := st.Register(prometheus.NewRegistry()); err != nil {
		t.Errorf("a second registry: %v", err)
	}
	if err := st.Register(reg); err == nil {
		t.Error("registered twice on one registry without an error")
	}
	if d := after["sluice_store_write_stall_seconds_total{reason=other}"]; d < 0.02 || d > 10 {
		t.Errorf("sluice_store_write_stall_seconds_total{reason=other} = %v after a stall of 20ms", d)
	}
	if after["sluice_store_disk_bytes"] <= 0 {
		t.Errorf("sluice_store_disk_bytes = %v with a table on disk", after["sluice_store_disk_bytes"])
	}
}
