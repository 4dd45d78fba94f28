package pebblestore_test

import (
	"fmt"
	"path/filepath"
	"slices"
	"testing"

	"github.com/sluicehq/sluice/internal/model"
	"github.com/sluicehq/sluice/internal/reader"
	"github.com/sluicehq/sluice/internal/store"
	"github.com/sluicehq/sluice/internal/store/pebblestore"
)

// BenchmarkSessionRecompute reads back what a rollup recompute reads at a
// fleet of 100,000 devices a day that each report once in the minute read:
// every device's catalogue and its one reading, in key order, through one
// read session, from tables (the store flushed). It reports the CPU-bound
// cost of a device's read (ns/device).
func BenchmarkSessionRecompute(b *testing.B) {
	const devices = 100_000
	st, err := pebblestore.Open(filepath.Join(b.TempDir(), "raw"), pebblestore.Options{CacheBytes: 32 << 20}, discard)
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close()
	day := model.DayOf(1_700_000_000_000)
	ts := day.Start() + 3_600_000
	names := make([]string, devices)
	for i := range names {
		names[i] = fmt.Sprintf("dev-%d", i)
	}
	for lo := 0; lo < devices; lo += 1000 {
		var batch store.Batch
		for _, dev := range names[lo : lo+1000] {
			pk := model.SeriesDay{Kind: model.KindReadings, Tenant: "acme", Series: dev, Day: day}.Partition(1 << 24)
			pw := store.PartitionWrite{Key: pk}
			for m := range 5 {
				pw.Readings = append(pw.Readings, model.ReadingRow{TS: ts, Metric: fmt.Sprintf("m%d", m), Value: float64(m)})
			}
			batch.Partitions = append(batch.Partitions, pw)
			batch.Catalogue = append(batch.Catalogue, model.PartitionInfo{Key: pk, Rows: 5, MinTS: ts, MaxTS: ts, State: "open"})
		}
		if err := st.Commit(b.Context(), &batch); err != nil {
			b.Fatal(err)
		}
	}
	if err := st.Flush(); err != nil {
		b.Fatal(err)
	}
	slices.Sort(names)
	for b.Loop() {
		rs, err := st.NewReads(b.Context())
		if err != nil {
			b.Fatal(err)
		}
		for _, dev := range names {
			got, _, err := reader.Readings(b.Context(), rs, reader.Query{Tenant: "acme", Series: dev, From: ts, To: ts + 60_000, Limit: reader.MaxLimit})
			if err != nil || len(got) != 1 {
				b.Fatalf("%s: %d readings, %v", dev, len(got), err)
			}
		}
		if err := rs.Close(); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*devices), "ns/device")
}
