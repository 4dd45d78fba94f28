package pebblestore

import (
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"

	"github.com/sluicehq/sluice/internal/model"
	"github.com/sluicehq/sluice/internal/store"
)

// benchRows is the size of the day to expire: SLUICE_BENCH_RETENTION_ROWS,
// default 1,000,000 (docs/benchmarks.md uses 10,000,000).
func benchRows(b *testing.B) int {
	if s := os.Getenv("SLUICE_BENCH_RETENTION_ROWS"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil {
			b.Fatal(err)
		}
		return n
	}
	return 1_000_000
}

// fillDay writes rows readings of one tenant-day: 100 devices, partitions
// of 100,000 rows, ten metrics per reading, plus the neighbouring day.
func fillDay(b *testing.B, s *Store, d model.Day, rows int) {
	b.Helper()
	const devices, perPartition = 100, 100_000
	for _, day := range []model.Day{d, d + 1} {
		n := rows
		if day != d {
			n = 1000 // a live neighbour, checked after the drop
		}
		perDevice := (n + devices - 1) / devices
		for dev := range devices {
			for start := 0; start < perDevice; start += perPartition {
				pk := model.PartitionKey{Kind: model.KindReadings, Tenant: "bench", Series: fmt.Sprintf("dev-%03d", dev), Day: day, Sub: uint32(start / perPartition)}
				pw := store.PartitionWrite{Key: pk}
				for j := start; j < min(start+perPartition, perDevice); j++ {
					pw.Readings = append(pw.Readings, model.ReadingRow{TS: day.Start() + int64(j/10)*100, Metric: "m" + strconv.Itoa(j%10), Value: float64(j)})
				}
				batch := &store.Batch{Partitions: []store.PartitionWrite{pw},
					Catalogue: []model.PartitionInfo{{Key: pk, Rows: int64(len(pw.Readings)), MinTS: day.Start(), MaxTS: day.End() - 1}}}
				if err := s.Commit(b.Context(), batch); err != nil {
					b.Fatal(err)
				}
			}
		}
	}
	if err := s.db.Flush(); err != nil {
		b.Fatal(err)
	}
}

// BenchmarkExpireDay expires one tenant-day of readings two ways on the same
// data: the bucket drop the sweeper does (range deletes) and per-row deletes
// (what a store without day buckets would do). It reports the delete
// operations issued, and the time to compact the range afterwards (when the
// space actually comes back) as compact-s. Run with -benchtime=1x.
func BenchmarkExpireDay(b *testing.B) {
	rows := benchRows(b)
	d := model.Day(20_000)
	for _, mode := range []string{"bucket_drop", "per_row_delete"} {
		b.Run(fmt.Sprintf("%s/rows=%d", mode, rows), func(b *testing.B) {
			var deletes int
			var compact time.Duration
			for b.Loop() {
				b.StopTimer()
				s, err := Open(b.TempDir(), Options{}, slog.New(slog.DiscardHandler))
				if err != nil {
					b.Fatal(err)
				}
				fillDay(b, s, d, rows)
				bucket := store.Bucket{Kind: store.BucketReadings, Tenant: "bench", Day: d}
				b.StartTimer()
				switch mode {
				case "bucket_drop":
					n, err := s.DropData(b.Context(), bucket)
					if err != nil {
						b.Fatal(err)
					}
					m, err := s.DropCatalogue(b.Context(), bucket)
					if err != nil {
						b.Fatal(err)
					}
					deletes = n + m
				default:
					deletes = deleteRowByRow(b, s, d)
				}
				b.StopTimer()
				start := time.Now()
				if err := s.CompactRange(b.Context(), d); err != nil {
					b.Fatal(err)
				}
				compact = time.Since(start)
				checkExpired(b, s, d, rows)
				if err := s.Close(); err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
			}
			b.ReportMetric(float64(deletes), "deletes")
			b.ReportMetric(compact.Seconds(), "compact-s")
		})
	}
}

// deleteRowByRow deletes every key of the tenant-day (rows and catalogue)
// one by one, in durable batches of 10,000: the per-row alternative.
func deleteRowByRow(b *testing.B, s *Store, d model.Day) int {
	n := 0
	for _, table := range []byte{tabReadings, tabCatalogue} {
		p := tenantPrefix(table, d, "bench")
		it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: p, UpperBound: prefixEnd(p)})
		if err != nil {
			b.Fatal(err)
		}
		batch := s.db.NewBatch()
		for ok := it.First(); ok; ok = it.Next() {
			if err := batch.Delete(it.Key(), nil); err != nil {
				b.Fatal(err)
			}
			n++
			if batch.Count() >= 10_000 {
				if err := s.db.Apply(batch, pebble.Sync); err != nil {
					b.Fatal(err)
				}
				batch.Reset()
			}
		}
		if err := s.db.Apply(batch, pebble.Sync); err != nil {
			b.Fatal(err)
		}
		if err := it.Close(); err != nil {
			b.Fatal(err)
		}
	}
	return n
}

// checkExpired verifies that the day is gone and its neighbour intact.
func checkExpired(b *testing.B, s *Store, d model.Day, rows int) {
	count := func(day model.Day) int {
		p := tenantPrefix(tabReadings, day, "bench")
		it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: p, UpperBound: prefixEnd(p)})
		if err != nil {
			b.Fatal(err)
		}
		n := 0
		for ok := it.First(); ok; ok = it.Next() {
			n++
		}
		_ = it.Close()
		return n
	}
	if n := count(d); n != 0 {
		b.Fatalf("%d of %d rows left", n, rows)
	}
	if n := count(d + 1); n != 1000 {
		b.Fatalf("neighbouring day has %d rows, want 1000", n)
	}
}
