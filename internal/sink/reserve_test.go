package sink

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/sluicehq/sluice/internal/buckets"
	"github.com/sluicehq/sluice/internal/model"
	"github.com/sluicehq/sluice/internal/store"
	"github.com/sluicehq/sluice/internal/store/pebblestore"
)

func reserveBuckets() buckets.Config {
	c := testBuckets()
	c.MaxRows = 200
	c.Reserve = buckets.Reserve{Rows: 40, Bytes: 4 << 10, Span: 60_000}
	return c
}

// checkCovers checks that every stored row of dev is inside its partition's
// catalogue range, and that each entry counts at least the rows and bytes
// its partition holds: what readers and a reloaded planner rely on while
// entries run ahead of their partitions.
func checkCovers(t *testing.T, st *pebblestore.Store, bcfg buckets.Config, dev string) (stored int) {
	t.Helper()
	for _, pi := range catalogue(t, st, model.KindReadings, tenant, dev) {
		rows, bytes := scanPartition(t, st, pi)
		if pi.Rows < int64(len(rows)) || pi.Bytes < bytes {
			t.Errorf("entry %v claims %d rows, %d bytes; the partition holds %d rows, %d bytes", pi.Key, pi.Rows, pi.Bytes, len(rows), bytes)
		}
		if pi.Rows > bcfg.MaxRows || pi.Bytes > bcfg.MaxBytes {
			t.Errorf("%v claims %d rows, %d bytes: over the bound", pi.Key, pi.Rows, pi.Bytes)
		}
		stored += len(rows)
	}
	return stored
}

// With a reserve, entries run ahead of their partitions: far fewer entries
// than partition writes, every stored row still covered; Settle makes the
// catalogue exact.
func TestReservedCatalogue(t *testing.T) {
	st := tempStore(t)
	bcfg := reserveBuckets()
	s := start(t, testConfig(), bcfg, st)
	const devices, perDevice = 3, 300
	var wg sync.WaitGroup
	for d := range devices {
		wg.Go(func() {
			dev := fmt.Sprint("dev-", d)
			for i := range perDevice {
				// In time order, with a late reading now and then.
				ts := base + int64(i)*1000
				if i%17 == 0 {
					ts = base + int64(i)*100
				}
				if err := s.Write(context.Background(), &Request{Tenant: tenant, Readings: []model.Reading{reading(dev, ts, "a", "b")}}); err != nil {
					t.Errorf("write: %v", err)
					return
				}
			}
		})
	}
	wg.Wait()
	for d := range devices {
		if got, want := checkCovers(t, st, bcfg, fmt.Sprint("dev-", d)), 2*perDevice; got != want {
			t.Errorf("dev-%d: %d rows stored, want %d", d, got, want)
		}
	}
	placed := testutil.ToFloat64(s.m.entries.WithLabelValues("placed"))
	// Exact entries would take one per reading (each request is one
	// reading); a 40-row reserve and a minute of span take one about
	// every 20 readings, plus closes and late readings.
	if max := float64(devices * perDevice / 5); placed > max {
		t.Errorf("%v catalogue entries written for %d readings, want at most %v", placed, devices*perDevice, max)
	}
	if err := s.Settle(context.Background()); err != nil {
		t.Fatalf("Settle: %v", err)
	}
	for d := range devices {
		parts := checkCatalogue(t, st, bcfg, tenant, fmt.Sprint("dev-", d))
		if want := 2 * perDevice / int(bcfg.MaxRows); len(parts) < want || len(parts) > want+1 {
			t.Errorf("dev-%d: %d partitions, want %d or %d", d, len(parts), want, want+1)
		}
	}
	if testutil.ToFloat64(s.m.entries.WithLabelValues("settled")) == 0 {
		t.Errorf("Settle wrote no entry")
	}
}

// Idle partitions are settled by the sink's own timer.
func TestSettleIdle(t *testing.T) {
	st := tempStore(t)
	bcfg := reserveBuckets()
	s := New(testConfig(), bcfg, st, discard, nil, WithSettleInterval(10*time.Millisecond), WithInFlightCheck())
	t.Cleanup(func() { _ = s.Close(context.Background()) })
	for i := range 5 {
		if err := s.Write(context.Background(), &Request{Tenant: tenant, Readings: []model.Reading{reading("dev", base+int64(i), "a")}}); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, "the idle partition's entry to be settled", func() bool {
		parts := catalogue(t, st, model.KindReadings, tenant, "dev")
		return len(parts) == 1 && parts[0].Rows == 5 && parts[0].MinTS == base && parts[0].MaxTS == base+4
	})
}

// startFailingCommit starts a sink with the reserve, one batch per request,
// whose commit number failing (counting from 1) waits for the gate to open
// and then fails; seen is closed when that commit has begun.
func startFailingCommit(t *testing.T, failing int) (s *Sink, hs *hookStore, seen chan struct{}, g *gate) {
	t.Helper()
	g, seen = newGate(), make(chan struct{})
	var once sync.Once
	hs = &hookStore{Store: tempStore(t), hook: func(n int, _ *store.Batch) error {
		if n == failing {
			once.Do(func() { close(seen) })
			g.wait()
			return errors.New("disk on fire")
		}
		return nil
	}}
	cfg := testConfig()
	cfg.BatchRows, cfg.Linger = 1, 0
	return start(t, cfg, reserveBuckets(), hs), hs, seen, g
}

// inFlight returns the batches submitted and not yet finished.
func inFlight(s *Sink) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.flight)
}

// A batch whose rows rely on an entry carried by an earlier batch in
// flight fails when that batch fails, and the lost entry is written again
// by the next batch.
func TestReservedEntryLostWithFailedCommit(t *testing.T) {
	s, hs, firstSeen, g := startFailingCommit(t, 2)
	defer g.open()
	bcfg := reserveBuckets()
	write := func(i int) error {
		return s.Write(context.Background(), &Request{Tenant: tenant, Readings: []model.Reading{reading("dev", base+int64(i+1)*1000, "a")}})
	}
	// Commit 1 opens the partition with an exact entry; commit 2's entry
	// claims ahead.
	if err := write(-1); err != nil {
		t.Fatal(err)
	}
	errs := make(chan error, 2)
	go func() { errs <- write(0) }()
	<-firstSeen // the partition's claim is in flight, and will fail
	go func() { errs <- write(1) }()
	waitFor(t, "the second batch", func() bool { return inFlight(s) >= 2 })
	g.open()
	for range 2 {
		if err := <-errs; err == nil {
			t.Errorf("a request succeeded though the entry it relies on was not stored")
		}
	}
	// Nor were its rows stored: they would lie in a partition no entry
	// covers. Only commit 1's row is.
	sd := model.SeriesDay{Kind: model.KindReadings, Tenant: tenant, Series: "dev", Day: model.DayOf(base)}
	for sub := range uint32(2) {
		pk := sd.Partition(sub)
		rows, err := hs.Store.ScanReadings(context.Background(), pk, store.Range{From: pk.Day.Start(), To: pk.Day.End()}, 1<<20)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range rows {
			if r.TS != base {
				t.Errorf("partition %d holds a row at %d, of a request that failed", sub, r.TS)
			}
		}
	}
	if rows, _ := scanPartition(t, hs.Store, model.PartitionInfo{Key: sd.Partition(0), MinTS: base, MaxTS: base}); len(rows) != 1 {
		t.Errorf("partition 0 holds %d rows, want commit 1's", len(rows))
	}
	if err := write(2); err != nil {
		t.Fatalf("write after the failure: %v", err)
	}
	if got := checkCovers(t, hs.Store, bcfg, "dev"); got < 1 {
		t.Errorf("%d rows stored, want the acknowledged one at least", got)
	}
	found := false
	for _, r := range readAll(t, hs.Store, tenant, "dev") {
		found = found || r.TS == base+3000
	}
	if !found {
		t.Errorf("the acknowledged reading is not found by a reader")
	}
}

// The same when the batch also closes a partition: its entries then number
// as many as the partitions it writes rows to, and still it relies on an
// entry in flight for one of them.
func TestReliesOnEntryInFlightWhileClosing(t *testing.T) {
	s, _, seen, g := startFailingCommit(t, 3)
	defer g.open()
	bcfg := reserveBuckets()
	write := func(rs ...model.Reading) error {
		return s.Write(context.Background(), &Request{Tenant: tenant, Readings: rs})
	}
	// Commit 1 fills device a's partition to the bound exactly; commit 2
	// opens device c's with an exact entry.
	var fill []model.Reading
	for i := range int(bcfg.MaxRows) {
		fill = append(fill, reading("a", base+int64(i), "m"))
	}
	if err := write(fill...); err != nil {
		t.Fatal(err)
	}
	if err := write(reading("c", base+2, "m")); err != nil {
		t.Fatal(err)
	}
	errs := make(chan error, 2)
	// Commit 3 carries device c's claim ahead, and will fail.
	go func() { errs <- write(reading("c", base, "m")) }()
	<-seen
	// Commit 4 closes a's partition, opens the next, and adds a row to c
	// within the entry of commit 3: two entries for two partitions written.
	go func() { errs <- write(reading("a", base+5000, "m"), reading("c", base+1, "m")) }()
	waitFor(t, "the fourth batch", func() bool { return inFlight(s) >= 2 })
	g.open()
	for range 2 {
		if err := <-errs; err == nil {
			t.Errorf("a request succeeded though the entry it relies on was not stored")
		}
	}
}

// A device that reports once an hour claims its partition once for the
// day: a claim runs to the end of the day, not a span past the newest row.
func TestHourlyReadingsClaimOnce(t *testing.T) {
	st := tempStore(t)
	bcfg := reserveBuckets()
	s := start(t, testConfig(), bcfg, st)
	const hours = 12
	for h := range hours {
		ts := base + int64(h)*3_600_000
		if err := s.Write(context.Background(), &Request{Tenant: tenant, Readings: []model.Reading{reading("dev", ts, "a")}}); err != nil {
			t.Fatal(err)
		}
	}
	checkCovers(t, st, bcfg, "dev")
	// The first entry is exact, the second claims the rest of the day.
	if placed := testutil.ToFloat64(s.m.entries.WithLabelValues("placed")); placed != 2 {
		t.Errorf("%v catalogue entries for %d hourly readings, want 2", placed, hours)
	}
}

// The sink's timer settles a claim only after settleIdleTicks intervals
// without a row, not after one: a device reporting every few intervals
// keeps its claim.
func TestSettleWaitsForIdleTicks(t *testing.T) {
	st := tempStore(t)
	bcfg := reserveBuckets()
	const every = 50 * time.Millisecond
	s := New(testConfig(), bcfg, st, discard, nil, WithSettleInterval(every), WithInFlightCheck())
	t.Cleanup(func() { _ = s.Close(context.Background()) })
	for i := range 2 { // the exact entry, then the claim
		if err := s.Write(context.Background(), &Request{Tenant: tenant, Readings: []model.Reading{reading("dev", base+int64(i), "a")}}); err != nil {
			t.Fatal(err)
		}
	}
	wrote := time.Now()
	time.Sleep(4 * every)
	parts := catalogue(t, st, model.KindReadings, tenant, "dev")
	// A slow machine only delays the timer's ticks; the check is
	// conclusive while fewer than settleIdleTicks intervals have passed.
	if time.Since(wrote) < (settleIdleTicks-2)*every {
		if len(parts) != 1 || !parts[0].Ahead {
			t.Fatalf("after 4 settle intervals the entries are %+v, want the claim still", parts)
		}
	} else {
		t.Logf("the machine took %v for 4 settle intervals: whether the claim waited is not checked", time.Since(wrote))
	}
	waitFor(t, "the claim to be settled", func() bool {
		parts := catalogue(t, st, model.KindReadings, tenant, "dev")
		return len(parts) == 1 && !parts[0].Ahead && parts[0].Rows == 2
	})
}
