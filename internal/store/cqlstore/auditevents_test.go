package cqlstore_test

import (
	"fmt"
	"testing"

	"github.com/sluicehq/sluice/internal/model"
	"github.com/sluicehq/sluice/internal/store"
)

// AuditEvents finds a stored event among more events of the same
// millisecond than one page of its scan holds (it read one page, so an
// identical resubmission of a late id was taken for another payload: 409).
func TestAuditEventsPastOnePage(t *testing.T) {
	st := openStore(t, nil)
	const ts, n = int64(1_764_000_000_000), 1500
	tenant := fmt.Sprintf("ae%d", ts%1000)
	stream := t.Name()
	pk := model.PartitionKey{Kind: model.KindAudit, Tenant: tenant, Series: stream, Day: model.DayOf(ts)}
	events := make([]model.AuditEvent, n)
	for i := range events {
		events[i] = model.AuditEvent{EventID: fmt.Sprintf("e%05d", i), Stream: stream, TS: ts, Actor: "u", Action: "a"}
	}
	batch := &store.Batch{
		Partitions: []store.PartitionWrite{{Key: pk, Events: events}},
		Catalogue:  []model.PartitionInfo{{Key: pk, Rows: n, MinTS: ts, MaxTS: ts, State: "single"}},
	}
	if err := st.Commit(t.Context(), batch); err != nil {
		t.Fatal(err)
	}
	last := events[n-1]
	got, err := st.AuditEvents(t.Context(), []store.AuditID{{Tenant: tenant, Day: pk.Day, EventID: last.EventID}}, []*model.AuditEvent{&last})
	if err != nil {
		t.Fatal(err)
	}
	if got[0] == nil || got[0].EventID != last.EventID || got[0].Actor != "u" {
		t.Fatalf("AuditEvents(%s) = %+v, want the stored event", last.EventID, got[0])
	}
}
