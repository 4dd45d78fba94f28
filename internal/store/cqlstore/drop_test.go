package cqlstore_test

import (
	"fmt"
	"testing"

	"github.com/sluicehq/sluice/internal/model"
	"github.com/sluicehq/sluice/internal/store"
	"github.com/sluicehq/sluice/internal/store/cqlstore"
)

// writeDay commits readings and audit events of two series (one of them
// split in two partitions) and dead letters, for one tenant and day.
func writeDay(t *testing.T, st *cqlstore.Store, tenant string, day model.Day) int {
	t.Helper()
	ts := day.Start() + 1000
	var b store.Batch
	rows := 0
	for i, pk := range []model.PartitionKey{
		{Kind: model.KindReadings, Tenant: tenant, Series: "d1", Day: day, Sub: 0},
		{Kind: model.KindReadings, Tenant: tenant, Series: "d1", Day: day, Sub: 1<<24 | 1},
		{Kind: model.KindReadings, Tenant: tenant, Series: "d2", Day: day, Sub: 0},
	} {
		pw := store.PartitionWrite{Key: pk}
		for j := range 20 {
			pw.Readings = append(pw.Readings, model.ReadingRow{TS: ts + int64(100*i+j), Metric: "m", Value: 1})
		}
		rows += len(pw.Readings)
		b.Partitions = append(b.Partitions, pw)
		b.Catalogue = append(b.Catalogue, model.PartitionInfo{Key: pk, Rows: 20, MinTS: ts, MaxTS: ts + 300, State: "single"})
	}
	apk := model.PartitionKey{Kind: model.KindAudit, Tenant: tenant, Series: "s", Day: day}
	pw := store.PartitionWrite{Key: apk}
	for j := range 10 {
		pw.Events = append(pw.Events, model.AuditEvent{EventID: fmt.Sprintf("e%d", j), Stream: "s", TS: ts + int64(j)})
	}
	b.Partitions = append(b.Partitions, pw)
	b.Catalogue = append(b.Catalogue, model.PartitionInfo{Key: apk, Rows: 10, MinTS: ts, MaxTS: ts + 9, State: "single"})
	for j := range 5 {
		b.DeadLetters = append(b.DeadLetters, model.DeadLetter{Tenant: tenant, TS: ts + int64(j)*3_600_000, ID: fmt.Sprint(j), Source: "mqtt", Reason: "invalid_json", Payload: []byte("{")})
	}
	if err := st.Commit(t.Context(), &b); err != nil {
		t.Fatal(err)
	}
	return rows
}

// dayContents counts what the store still holds of a tenant-day.
func dayContents(t *testing.T, st *cqlstore.Store, tenant string, day model.Day) (rows, events, dead, catalogued int, seen bool) {
	t.Helper()
	all := store.Range{From: day.Start(), To: day.End()}
	for _, series := range []string{"d1", "d2"} {
		for _, sub := range []uint32{0, 1<<24 | 1} {
			r, err := st.ScanReadings(t.Context(), model.PartitionKey{Kind: model.KindReadings, Tenant: tenant, Series: series, Day: day, Sub: sub}, all, 1000)
			if err != nil {
				t.Fatal(err)
			}
			rows += len(r)
		}
		cat, err := st.Catalogue(t.Context(), model.SeriesDay{Kind: model.KindReadings, Tenant: tenant, Series: series, Day: day})
		if err != nil {
			t.Fatal(err)
		}
		catalogued += len(cat)
	}
	ev, err := st.ScanAudit(t.Context(), model.PartitionKey{Kind: model.KindAudit, Tenant: tenant, Series: "s", Day: day}, all, 1000)
	if err != nil {
		t.Fatal(err)
	}
	dl, err := st.ScanDeadLetters(t.Context(), tenant, day, all, 1000)
	if err != nil {
		t.Fatal(err)
	}
	s, err := st.AuditSeen(t.Context(), []store.AuditID{{Tenant: tenant, Day: day, EventID: "e3"}})
	if err != nil {
		t.Fatal(err)
	}
	return rows, len(ev), len(dl), catalogued, s[0]
}

func TestDropPartitions(t *testing.T) {
	st := openStore(t, nil)
	tenant, other := unique(t), unique(t)+"-other"
	const day = model.Day(20_100)
	for _, d := range []model.Day{day - 1, day, day + 1} {
		writeDay(t, st, tenant, d)
	}
	writeDay(t, st, other, day)

	stats, err := st.DropPartitions(t.Context(), tenant, model.KindReadings, day)
	if err != nil {
		t.Fatal(err)
	}
	if stats.Partitions != 3 || stats.Rows != 60 {
		t.Errorf("DropPartitions(readings) = %+v, want 3 partitions of 60 rows", stats)
	}
	// Deletes grow with partitions, not rows: 3 partitions + 64 catalogue
	// shards + the tenant-day row.
	if stats.Deletes != 3+64+1 {
		t.Errorf("DropPartitions issued %d deletes, want %d", stats.Deletes, 3+64+1)
	}
	rows, events, dead, cat, _ := dayContents(t, st, tenant, day)
	if rows != 0 || cat != 0 || events != 10 || dead != 5 {
		t.Errorf("after dropping readings: rows %d catalogue %d events %d dead %d; want 0 0 10 5", rows, cat, events, dead)
	}
	// Again: nothing left to do, no error.
	if again, err := st.DropPartitions(t.Context(), tenant, model.KindReadings, day); err != nil || again.Partitions != 0 {
		t.Errorf("second DropPartitions = %+v, %v; want nothing dropped", again, err)
	}

	// DropDay removes the rest of the day, for every tenant.
	if _, err := st.DropDay(t.Context(), day); err != nil {
		t.Fatal(err)
	}
	for _, tn := range []string{tenant, other} {
		rows, events, dead, cat, seen := dayContents(t, st, tn, day)
		if rows+events+dead+cat != 0 || seen {
			t.Errorf("%s after DropDay: rows %d events %d dead %d catalogue %d audit id seen %v; want nothing", tn, rows, events, dead, cat, seen)
		}
	}
	if tks, err := st.DayTenants(t.Context(), day); err != nil || len(tks) != 0 {
		t.Errorf("DayTenants after DropDay = %v, %v; want none", tks, err)
	}
	// The days around it are intact.
	for _, d := range []model.Day{day - 1, day + 1} {
		rows, events, dead, cat, seen := dayContents(t, st, tenant, d)
		if rows != 60 || events != 10 || dead != 5 || cat != 3 || !seen {
			t.Errorf("day %s: rows %d events %d dead %d catalogue %d seen %v; want 60 10 5 3 true", d, rows, events, dead, cat, seen)
		}
	}
}

// TestMigrateIsIdempotent runs the migration again on the migrated test
// keyspace and checks every table is there.
func TestMigrateIsIdempotent(t *testing.T) {
	st := openStore(t, nil)
	for range 2 {
		if err := cqlstore.Migrate(t.Context(), testCfg, discard); err != nil {
			t.Fatalf("Migrate again: %v", err)
		}
	}
	it := st.Session().Query(`SELECT table_name FROM system_schema.tables WHERE keyspace_name = ?`, testCfg.Keyspace).IterContext(t.Context())
	have := map[string]bool{}
	var name string
	for it.Scan(&name) {
		have[name] = true
	}
	if err := it.Close(); err != nil {
		t.Fatal(err)
	}
	for _, tb := range cqlstore.Tables {
		if !have[tb] {
			t.Errorf("table %s missing after migrations (have %v)", tb, have)
		}
	}
}
