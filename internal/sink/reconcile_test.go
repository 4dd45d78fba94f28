package sink

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/sluicehq/sluice/internal/model"
	"github.com/sluicehq/sluice/internal/store"
)

// TestReconcileAfterKill: a gateway killed while its entries run ahead of
// their partitions leaves claims in the catalogue. The next sink on the
// store reconciles them before it lists or counts on: the listing's
// settle shows exactly the rows stored, one more write makes it one more,
// and the partition closes at its bound, not a reserve early.
func TestReconcileAfterKill(t *testing.T) {
	st := tempStore(t)
	bcfg := reserveBuckets() // 200 rows, reserve 40
	sd := model.SeriesDay{Kind: model.KindReadings, Tenant: tenant, Series: "dev", Day: model.DayOf(base)}

	// The first gateway writes 100 one-row readings, then is "killed":
	// from then on nothing it writes reaches the store (its shutdown
	// settle included).
	var killed atomic.Bool
	hs := &hookStore{Store: st, hook: func(int, *store.Batch) error {
		if killed.Load() {
			return errors.New("killed")
		}
		return nil
	}}
	first := New(testConfig(), bcfg, hs, discard, prometheus.NewRegistry(), WithInFlightCheck())
	for i := range 100 {
		if err := first.Write(context.Background(), &Request{Tenant: tenant, Readings: []model.Reading{reading("dev", base+int64(i)*1000, "a")}}); err != nil {
			t.Fatalf("write %d: %v", i, err)
		}
	}
	killed.Store(true)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_ = first.Close(ctx)
	parts := catalogue(t, st, model.KindReadings, tenant, "dev")
	if len(parts) != 1 || !parts[0].Ahead || parts[0].Rows <= 100 {
		t.Fatalf("after the kill the catalogue is %+v, want one claim marked ahead of 100 rows", parts)
	}

	second := New(testConfig(), bcfg, st, discard, prometheus.NewRegistry(), WithInFlightCheck())
	t.Cleanup(func() { _ = second.Close(context.Background()) })
	settled := func(want int64) {
		t.Helper()
		if err := second.Settle(context.Background(), sd); err != nil {
			t.Fatalf("settle: %v", err)
		}
		parts := checkCatalogue(t, st, bcfg, tenant, "dev")
		var rows int64
		for _, pi := range parts {
			rows += pi.Rows
			if pi.Ahead {
				t.Errorf("entry %+v still marked ahead after settling", pi)
			}
		}
		if rows != want {
			t.Errorf("catalogue counts %d rows, want %d", rows, want)
		}
	}
	settled(100)
	if got := testutil.ToFloat64(second.hm.reconciled); got != 1 {
		t.Errorf("partitions reconciled = %v, want 1", got)
	}
	if err := second.Write(context.Background(), &Request{Tenant: tenant, Readings: []model.Reading{reading("dev", base+200_000, "a")}}); err != nil {
		t.Fatal(err)
	}
	settled(101)
	// Filling on: the single partition closes at 200 rows exactly.
	for i := range 120 {
		if err := second.Write(context.Background(), &Request{Tenant: tenant, Readings: []model.Reading{reading("dev", base+300_000+int64(i), "a")}}); err != nil {
			t.Fatal(err)
		}
	}
	settled(221)
	for _, pi := range catalogue(t, st, model.KindReadings, tenant, "dev") {
		if pi.Key.Sub == 0 && (!pi.Closed || pi.Rows != bcfg.MaxRows) {
			t.Errorf("single partition %+v, want closed at %d rows", pi, bcfg.MaxRows)
		}
	}
}

// TestReconcileOnWrite: a write, not only a listing, reconciles the entry
// before counting on from it.
func TestReconcileOnWrite(t *testing.T) {
	st := tempStore(t)
	bcfg := reserveBuckets()
	pk := model.SeriesDay{Kind: model.KindReadings, Tenant: tenant, Series: "dev", Day: model.DayOf(base)}.Partition(0)
	// What a killed gateway leaves: 10 rows, an entry claiming 50.
	var rows []model.ReadingRow
	for i := range 10 {
		rows = model.AppendReadingRows(rows, reading("dev", base+int64(i), "a"))
	}
	claim := model.PartitionInfo{Key: pk, Rows: 50, Bytes: 5000, MinTS: base - 60_000, MaxTS: base + 60_000, State: "single", Ahead: true}
	if err := st.Commit(context.Background(), &store.Batch{Partitions: []store.PartitionWrite{{Key: pk, Readings: rows}}, Catalogue: []model.PartitionInfo{claim}, Version: 1}); err != nil {
		t.Fatal(err)
	}
	s := start(t, testConfig(), bcfg, st)
	if err := s.Write(context.Background(), &Request{Tenant: tenant, Readings: []model.Reading{reading("dev", base+100, "a")}}); err != nil {
		t.Fatal(err)
	}
	if err := s.Settle(context.Background()); err != nil {
		t.Fatal(err)
	}
	checkCatalogue(t, st, bcfg, tenant, "dev") // exact counts, within range
	if got := catalogue(t, st, model.KindReadings, tenant, "dev"); len(got) != 1 || got[0].Rows != 11 {
		t.Errorf("catalogue %+v, want one partition of 11 rows", got)
	}
}

// Listing series-days the gateway does not hold loads only those with
// entries to reconcile: a listing of many devices does not grow the
// planner.
func TestSettleUnknownDoesNotLoad(t *testing.T) {
	st := tempStore(t)
	s := start(t, testConfig(), reserveBuckets(), st)
	var sds []model.SeriesDay
	for i := range 200 {
		sds = append(sds, model.SeriesDay{Kind: model.KindReadings, Tenant: tenant, Series: fmt.Sprint("nobody-", i), Day: model.DayOf(base)})
	}
	if err := s.Settle(context.Background(), sds...); err != nil {
		t.Fatal(err)
	}
	if n := s.planner.Len(); n != 0 {
		t.Errorf("after listing 200 unknown series-days the planner holds %d, want 0", n)
	}
}

// slowCatalogueStore holds catalogue reads of series "slow" until their
// context ends or release is closed.
type slowCatalogueStore struct {
	Store
	release chan struct{}
	ended   atomic.Int64 // slow reads that returned on their context
}

func (s *slowCatalogueStore) Catalogue(ctx context.Context, sd model.SeriesDay) ([]model.PartitionInfo, error) {
	if sd.Series == "slow" {
		select {
		case <-ctx.Done():
			s.ended.Add(1)
			return nil, ctx.Err()
		case <-s.release:
		}
	}
	return s.Store.Catalogue(ctx, sd)
}

// A settle asked for by a reader stops its catalogue reads when the
// reader's context ends: the flusher is free to plan writes again, rather
// than waiting on a slow store for a listing nobody waits for.
func TestSettleHonoursCallerContext(t *testing.T) {
	st := &slowCatalogueStore{Store: tempStore(t), release: make(chan struct{})}
	s := start(t, testConfig(), reserveBuckets(), st)
	t.Cleanup(func() { close(st.release) }) // runs before the sink's Close
	slow := model.SeriesDay{Kind: model.KindReadings, Tenant: tenant, Series: "slow", Day: model.DayOf(base)}
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if err := s.Settle(ctx, slow); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("settle of a series-day whose catalogue read hangs: %v, want %v", err, context.DeadlineExceeded)
	}
	wctx, wcancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer wcancel()
	if err := s.Write(wctx, &Request{Tenant: tenant, Readings: []model.Reading{reading("dev", base, "a")}}); err != nil {
		t.Fatalf("write after a reader's settle timed out: %v (the flusher is still busy with it)", err)
	}
	if n := st.ended.Load(); n != 1 {
		t.Errorf("slow catalogue reads ended by the reader's context: %d, want 1", n)
	}
}
