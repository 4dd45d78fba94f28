package pebblestore

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/sluicehq/sluice/internal/model"
	"github.com/sluicehq/sluice/internal/reader"
	"github.com/sluicehq/sluice/internal/store"
)

// TestEachAuditMatchesReader checks EachAudit against the read API's merge
// on a day spread over several sub-buckets, with events stored twice (the
// later sub-bucket's copy wins) and ranges that cut the day.
func TestEachAuditMatchesReader(t *testing.T) {
	ctx := context.Background()
	st := openAuditStore(t)
	d := model.Day(20500)
	rng := rand.New(rand.NewPCG(7, 8))
	const subs = 4
	var keys []model.PartitionKey
	var parts []store.PartitionWrite
	for sub := range subs {
		pk := model.PartitionKey{Kind: model.KindAudit, Tenant: "t", Series: "s", Day: d, Sub: uint32(sub)}
		keys = append(keys, pk)
		parts = append(parts, store.PartitionWrite{Key: pk})
	}
	for i := range 3000 {
		e := model.AuditEvent{EventID: fmt.Sprintf("e%04d", rng.IntN(2500)), Stream: "s", TS: d.Start() + rng.Int64N(1000),
			Actor: fmt.Sprintf("actor-%d", i), Action: "a", Resource: "r", Outcome: "ok"}
		if i%3 == 0 {
			e.Attributes = fmt.Appendf(nil, `{"i":%d}`, i)
		}
		p := &parts[rng.IntN(subs)]
		p.Events = append(p.Events, e)
	}
	var cat []model.PartitionInfo
	for _, p := range parts {
		cat = append(cat, model.PartitionInfo{Key: p.Key, Rows: int64(len(p.Events)), Bytes: 1, MinTS: d.Start(), MaxTS: d.End() - 1})
	}
	if err := st.Commit(ctx, &store.Batch{Partitions: parts, Catalogue: cat}); err != nil {
		t.Fatal(err)
	}
	for _, r := range []store.Range{{From: d.Start(), To: d.End()}, {From: d.Start() + 100, To: d.Start() + 700}, {From: d.Start() + 2000, To: d.End()}} {
		var want []model.AuditEvent
		q := reader.Query{Tenant: "t", Series: "s", From: r.From, To: r.To, Limit: 97}
		for {
			evs, next, err := reader.Audit(ctx, st, q)
			if err != nil {
				t.Fatal(err)
			}
			want = append(want, evs...)
			if next == "" {
				break
			}
			q.Cursor = next
		}
		var got []model.AuditEvent
		if err := st.EachAudit(ctx, keys, r, func(e *model.AuditEvent) error {
			got = append(got, *e)
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		if r.From == d.Start() && len(want) < 2000 {
			t.Fatalf("the reader found %d events: the test wrote too few", len(want))
		}
		// got's events were kept as copies while later ones were read:
		// they must not have changed.
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("range %+v: EachAudit differs from the reader (-reader +EachAudit):\n%s", r, diff)
		}
	}
	stop := errors.New("stop")
	n := 0
	err := st.EachAudit(ctx, keys, store.Range{From: d.Start(), To: d.End()}, func(*model.AuditEvent) error {
		if n++; n == 10 {
			return stop
		}
		return nil
	})
	if !errors.Is(err, stop) || n != 10 {
		t.Errorf("fn's error: got %v after %d events, want stop after 10", err, n)
	}
	if err := st.EachAudit(ctx, []model.PartitionKey{{Kind: model.KindReadings, Tenant: "t", Series: "s", Day: d}}, store.Range{From: d.Start(), To: d.End()}, func(*model.AuditEvent) error { return nil }); err == nil {
		t.Error("EachAudit read a readings partition")
	}
}
