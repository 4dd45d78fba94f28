package rollupstore

import (
	"context"
	"log/slog"
	"path/filepath"
	"testing"

	"github.com/cockroachdb/pebble/v2"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice/internal/rollup"
	"github.com/sluicehq/sluice/internal/store/pebblestore"
)

// The rollup store exports its LSM tree's health beside the raw store's,
// on one registry, under its own names: a flush shows as a flush and a
// table in level 0, a stall Pebble reports is counted under its reason.
func TestRollupStoreMetrics(t *testing.T) {
	quiet := slog.New(slog.DiscardHandler)
	s, err := Open(filepath.Join(t.TempDir(), "rollups"), quiet)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	raw, err := pebblestore.Open(t.TempDir(), pebblestore.Options{}, quiet)
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	reg := prometheus.NewRegistry()
	if err := raw.Register(reg); err != nil {
		t.Fatal(err)
	}
	if err := s.Register(reg); err != nil {
		t.Fatalf("the rollup store's metrics beside the raw store's: %v", err)
	}
	if err := s.Register(reg); err == nil {
		t.Error("registered twice on one registry without an error")
	}
	row := rollup.Row{Key: rollup.Key{Tenant: "acme", Device: "d", Metric: "x", Minute: 1_796_000_040_000}, Writer: rollup.RebuildWriter, Count: 1, Sum: 1, Min: 1, Max: 1, Version: 1}
	if err := s.Insert(context.Background(), []rollup.Row{row}); err != nil {
		t.Fatal(err)
	}
	if err := s.db.Flush(); err != nil {
		t.Fatal(err)
	}
	// A stall as Pebble reports it to the listener of the options the
	// store opens its database with.
	l := pebbleOptions(Options{}, quiet, s.stalls).EventListener
	l.WriteStallBegin(pebble.WriteStallBeginInfo{Reason: "L0 file count limit exceeded"})
	l.WriteStallEnd()

	got := map[string]float64{}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			name := mf.GetName()
			for _, lp := range m.GetLabel() {
				name += "{" + lp.GetValue() + "}"
			}
			got[name] += m.GetCounter().GetValue() + m.GetGauge().GetValue()
		}
	}
	for name, want := range map[string]float64{
		"sluice_rollup_store_flushes_total":                 1,
		"sluice_rollup_store_l0_tables":                     1,
		"sluice_rollup_store_write_stalls_total{l0}":        1,
		"sluice_rollup_store_write_stalls_total{memtables}": 0,
		"sluice_store_flushes_total":                        0, // the raw store's own
		"sluice_store_write_stalls_total{l0}":               0,
	} {
		if v, ok := got[name]; !ok || v != want {
			t.Errorf("%s = %v (exported: %v), want %v", name, v, ok, want)
		}
	}
}
