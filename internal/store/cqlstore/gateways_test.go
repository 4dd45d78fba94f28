package cqlstore_test

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice/internal/buckets"
	"github.com/sluicehq/sluice/internal/model"
	"github.com/sluicehq/sluice/internal/reader"
	"github.com/sluicehq/sluice/internal/sink"
	"github.com/sluicehq/sluice/internal/store/cqlstore"
)

// partitionCounts reads the real row count of every partition of a tenant
// from Cassandra, found by scanning the table's partition keys (not the
// catalogue), for kind's table.
func partitionCounts(t *testing.T, st *cqlstore.Store, tenant string, kind model.Kind) map[model.PartitionKey]int64 {
	t.Helper()
	table, col := "readings", "device"
	if kind == model.KindAudit {
		table, col = "audit", "stream"
	}
	sess := st.Session()
	ctx := t.Context()
	it := sess.Query(`SELECT DISTINCT tenant, ` + col + `, day, sub FROM ` + table).IterContext(ctx)
	var (
		tn, series string
		day        time.Time
		sub        int32
		keys       []model.PartitionKey
	)
	for it.Scan(&tn, &series, &day, &sub) {
		if tn == tenant {
			keys = append(keys, model.PartitionKey{Kind: kind, Tenant: tn, Series: series, Day: model.DayOf(day.UnixMilli()), Sub: uint32(sub)})
		}
	}
	if err := it.Close(); err != nil {
		t.Fatalf("list partitions of %s: %v", table, err)
	}
	out := make(map[model.PartitionKey]int64, len(keys))
	for _, pk := range keys {
		var n int64
		err := sess.Query(`SELECT COUNT(*) FROM `+table+` WHERE tenant = ? AND `+col+` = ? AND day = ? AND sub = ?`,
			pk.Tenant, pk.Series, pk.Day.Start(), int32(pk.Sub)).ScanContext(ctx, &n)
		if err != nil {
			t.Fatalf("count rows of %v: %v", pk, err)
		}
		out[pk] = n
	}
	return out
}

type gateway struct {
	st *cqlstore.Store
	sk *sink.Sink
}

func newGateway(t *testing.T, writer int, bcfg buckets.Config) gateway {
	t.Helper()
	st := openStore(t, nil)
	bcfg.Writer = writer
	scfg := sink.DefaultConfig()
	scfg.BatchRows, scfg.Linger, scfg.QueueRows = 500, time.Millisecond, 100_000
	sk := sink.New(scfg, bcfg, st, discard, prometheus.NewRegistry())
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := sk.Close(ctx); err != nil {
			t.Errorf("close sink: %v", err)
		}
	})
	return gateway{st: st, sk: sk}
}

// TestTwoGatewaysOneNoisyDevice runs two gateways (each its own sink,
// planner and Cassandra session, with different writer slots) that write
// the same noisy device and the same noisy audit stream at the same time,
// some readings and events through both (a redelivery), plus a quiet
// device. It then checks, from Cassandra itself: no partition holds more
// rows than the bound; every partition that holds rows is in the catalogue
// with its exact count; and the reader returns every reading and event
// exactly once, in order.
func TestTwoGatewaysOneNoisyDevice(t *testing.T) {
	requireCassandra(t)
	bcfg := buckets.DefaultConfig()
	bcfg.MaxRows = 700          // a reading here is 2 rows, so 350 readings per partition
	bcfg.PerWriterSingle = true // as cmd/ingest sets it for Cassandra
	bcfg.Reserve = buckets.DefaultReserve(bcfg)
	gws := []gateway{newGateway(t, 1, bcfg), newGateway(t, 2, bcfg)}
	tenant := unique(t)
	const (
		readings = 4000
		events   = 3000
		perReq   = 25
	)
	base := (20_500 * model.MillisPerDay) + 3_600_000
	reading := func(i int) model.Reading {
		return model.Reading{DeviceID: "noisy", TS: base + int64(i)*10, Seq: int64(i), HasSeq: true,
			Metrics: []model.Metric{{Name: "a", Value: float64(i)}, {Name: "b", Value: -float64(i)}}}
	}
	event := func(i int) model.AuditEvent {
		return model.AuditEvent{EventID: fmt.Sprintf("ev-%05d", i), Stream: "noisy-stream", TS: base + int64(i%500)*7,
			Actor: "u", Action: "a", Resource: "r", Outcome: "ok"}
	}
	var wg sync.WaitGroup
	errs := make(chan error, 1024)
	// Each gateway takes every other request; every 10th request goes to both.
	for g, gw := range gws {
		for w := range 3 {
			wg.Go(func() {
				for req := w; req*perReq < readings; req += 3 {
					if req%2 != g && req%10 != 0 {
						continue
					}
					r := &sink.Request{Tenant: tenant}
					for i := req * perReq; i < min((req+1)*perReq, readings); i++ {
						r.Readings = append(r.Readings, reading(i))
					}
					r.Readings = append(r.Readings, model.Reading{DeviceID: "quiet", TS: base + int64(req), Metrics: []model.Metric{{Name: "t", Value: 1}}})
					if err := gw.sk.Write(t.Context(), r); err != nil {
						errs <- err
					}
				}
			})
			wg.Go(func() {
				for req := w; req*perReq < events; req += 3 {
					if req%2 != g && req%10 != 0 {
						continue
					}
					r := &sink.Request{Tenant: tenant}
					for i := req * perReq; i < min((req+1)*perReq, events); i++ {
						r.Audit = append(r.Audit, event(i))
					}
					if err := gw.sk.Write(t.Context(), r); err != nil {
						errs <- err
					}
				}
			})
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("Write: %v", err)
	}
	st := gws[0].st

	// Entries run ahead of their partitions (the reserve): each claims at
	// least what Cassandra holds. Settled, they are exact.
	for _, kind := range []model.Kind{model.KindReadings, model.KindAudit} {
		for pk, n := range partitionCounts(t, st, tenant, kind) {
			cat, err := st.Catalogue(t.Context(), pk.SeriesDay())
			if err != nil {
				t.Fatal(err)
			}
			for _, pi := range cat {
				if pi.Key == pk && pi.Rows < n {
					t.Errorf("before settling, the catalogue says %v holds %d rows, Cassandra counts %d", pk, pi.Rows, n)
				}
			}
		}
	}
	for _, gw := range gws {
		if err := gw.sk.Settle(t.Context()); err != nil {
			t.Fatalf("Settle: %v", err)
		}
	}

	for _, kind := range []model.Kind{model.KindReadings, model.KindAudit} {
		counts := partitionCounts(t, st, tenant, kind)
		if len(counts) == 0 {
			t.Fatalf("no %s partitions found", kind)
		}
		writers := map[uint8]int{}
		for pk, n := range counts {
			if n > bcfg.MaxRows {
				t.Errorf("partition %v holds %d rows, bound %d", pk, n, bcfg.MaxRows)
			}
			writers[buckets.WriterOf(pk.Sub)]++
			// The catalogue lists it, with its exact count (no write failed).
			cat, err := st.Catalogue(t.Context(), pk.SeriesDay())
			if err != nil {
				t.Fatal(err)
			}
			found := false
			for _, pi := range cat {
				if pi.Key == pk {
					found = true
					if pi.Rows != n {
						t.Errorf("catalogue says %v holds %d rows, Cassandra counts %d", pk, pi.Rows, n)
					}
				}
			}
			if !found {
				t.Errorf("partition %v holds %d rows but is not in the catalogue", pk, n)
			}
		}
		if writers[1] < 2 || writers[2] < 2 {
			t.Errorf("%s partitions per writer = %v; want both gateways to have split the noisy series", kind, writers)
		}
		t.Logf("%s: %d partitions, by writer %v", kind, len(counts), writers)
	}

	// Every reading and event exactly once, in order, through the reader.
	from, to := model.DayOf(base).Start(), model.DayOf(base).End()
	var got []model.Reading
	q := reader.Query{Tenant: tenant, Series: "noisy", From: from, To: to, Limit: 333}
	for {
		page, cursor, err := reader.Readings(t.Context(), st, q)
		if err != nil {
			t.Fatalf("read readings: %v", err)
		}
		got = append(got, page...)
		if cursor == "" {
			break
		}
		q.Cursor = cursor
	}
	if len(got) != readings {
		t.Fatalf("reader returned %d readings, want %d", len(got), readings)
	}
	for i, r := range got {
		want := reading(i)
		if r.TS != want.TS || r.Seq != want.Seq || len(r.Metrics) != 2 || r.Metrics[0] != want.Metrics[0] || r.Metrics[1] != want.Metrics[1] {
			t.Fatalf("reading %d = %+v, want %+v", i, r, want)
		}
	}
	var evs []model.AuditEvent
	q = reader.Query{Tenant: tenant, Series: "noisy-stream", From: from, To: to, Limit: 250}
	for {
		page, cursor, err := reader.Audit(t.Context(), st, q)
		if err != nil {
			t.Fatalf("read audit: %v", err)
		}
		evs = append(evs, page...)
		if cursor == "" {
			break
		}
		q.Cursor = cursor
	}
	ids := make([]string, len(evs))
	for i, e := range evs {
		ids[i] = e.EventID
		if i > 0 && !(evs[i-1].TS < e.TS || evs[i-1].TS == e.TS && evs[i-1].EventID < e.EventID) {
			t.Fatalf("events out of order or repeated at %d: %+v then %+v", i, evs[i-1], e)
		}
	}
	sort.Strings(ids)
	if len(ids) != events {
		t.Fatalf("reader returned %d events, want %d", len(ids), events)
	}
	for i, id := range ids {
		if id != event(i).EventID {
			t.Fatalf("event %d is %q, want %q", i, id, event(i).EventID)
		}
	}
	// The quiet device: one single partition per gateway that wrote it.
	quiet, err := reader.Partitions(t.Context(), st, model.SeriesDay{Kind: model.KindReadings, Tenant: tenant, Series: "quiet", Day: model.DayOf(base)})
	if err != nil {
		t.Fatal(err)
	}
	for _, pi := range quiet {
		if pi.State != buckets.StateSingle || pi.Key.Sub != buckets.SingleID(buckets.WriterOf(pi.Key.Sub)) {
			t.Errorf("quiet device partition %+v, want single partitions only", pi)
		}
	}
	if len(quiet) != 2 {
		t.Errorf("quiet device has %d partitions, want 2 (one single partition per gateway)", len(quiet))
	}
}
