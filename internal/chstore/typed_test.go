package chstore

import (
	"context"
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/sluicehq/sluice/internal/model"
	"github.com/sluicehq/sluice/internal/rollup"
)

// typedReadings are two minutes of pump-1's readings with every type, a
// metric whose type changes within a minute, and int sums past int64.
func typedReadings() []model.Reading {
	at := func(d time.Duration, ms ...model.Metric) model.Reading { return model.Reading{TS: ms0(d), Metrics: ms} }
	return []model.Reading{
		at(0, model.IntMetric("n", math.MaxInt64), model.BoolMetric("on", true), model.StringMetric("state", "idle"), model.Metric{Name: "mix", Value: 1.5}),
		at(10*time.Second, model.IntMetric("n", math.MaxInt64), model.BoolMetric("on", false), model.StringMetric("state", "run"), model.IntMetric("mix", -4)),
		at(20*time.Second, model.IntMetric("n", 3), model.BoolMetric("on", true), model.BoolMetric("mix", true)),
		at(30*time.Second, model.StringMetric("mix", "x")),
		at(70*time.Second, model.IntMetric("n", math.MinInt64), model.BoolMetric("on", true), model.StringMetric("state", "stop"), model.Metric{Name: "mix", Value: 2}),
		at(80*time.Second, model.IntMetric("n", math.MinInt64)),
	}
}

func ms0(d time.Duration) int64 { return ms(d) }

// TestTypedRoundTrip: typed rows read back whole, and the series and top
// lists folded by the server equal those folded in Go, int sums exact past
// int64 both ways.
func TestTypedRoundTrip(t *testing.T) {
	s := openTest(t)
	ctx := context.Background()
	rows := rollup.Compute("acme", "pump-1", typedReadings(), 1)
	rows = append(rows, rollup.Compute("acme", "pump-2", []model.Reading{
		{TS: ms(5 * time.Second), Metrics: []model.Metric{model.IntMetric("n", 7), model.BoolMetric("on", false), model.StringMetric("state", "z")}},
	}, 1)...)
	if err := s.Insert(ctx, rows); err != nil {
		t.Fatal(err)
	}
	got, err := s.Rows(ctx, rollup.Filter{Tenant: "acme", From: ms(0), To: ms(time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	sortRows := cmpopts.SortSlices(func(a, b rollup.Row) bool {
		return fmt.Sprint(a.Device, a.Metric, a.Minute) < fmt.Sprint(b.Device, b.Metric, b.Minute)
	})
	if diff := cmp.Diff(rows, got, sortRows); diff != "" {
		t.Errorf("rows (-want +got):\n%s", diff)
	}
	for _, metric := range []string{"n", "on", "state", "mix"} {
		f := rollup.Filter{Tenant: "acme", Device: "pump-1", Metric: metric, From: ms(0), To: ms(time.Hour)}
		var mine []rollup.Row
		for _, r := range rows {
			if r.Device == "pump-1" && r.Metric == metric {
				mine = append(mine, r)
			}
		}
		for _, step := range []rollup.Step{rollup.StepMinute, rollup.StepHour} {
			series, err := s.Series(ctx, f, step)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(rollup.Combine(mine, step), series); diff != "" {
				t.Errorf("%s by %s (-go +clickhouse):\n%s", metric, step, diff)
			}
		}
	}
	hour, err := s.Series(ctx, rollup.Filter{Tenant: "acme", Device: "pump-1", Metric: "n", From: ms(0), To: ms(time.Hour)}, rollup.StepHour)
	if err != nil || len(hour) != 1 {
		t.Fatalf("hour of n = %v, %v", hour, err)
	}
	// 2×MaxInt64 + 3 + 2×MinInt64 = 1: exact through two overflows.
	if got := hour[0].IntSum.String(); got != "1" {
		t.Errorf("hour's int sum = %s, want 1", got)
	}
	if rows[0].Metric != "mix" || rows[1].Metric != "n" {
		t.Fatalf("rows out of order: %+v", rows[:2])
	}
	if got, want := rows[1].IntSum.String(), "18446744073709551617"; got != want {
		t.Errorf("minute 0's int sum = %s, want %s", got, want)
	}
	for _, by := range []rollup.By{rollup.ByCount, rollup.ByMax, rollup.ByMean} {
		for _, metric := range []string{"n", "on", "state", "mix"} {
			f := rollup.Filter{Tenant: "acme", Metric: metric, From: ms(0), To: ms(time.Hour)}
			top, err := s.Top(ctx, f, by, 10)
			if err != nil {
				t.Fatal(err)
			}
			var mine []rollup.Row
			for _, r := range rows {
				if r.Metric == metric {
					mine = append(mine, r)
				}
			}
			want := rollup.Top(mine, by, 10)
			if diff := cmp.Diff(want, top, cmpopts.EquateNaNs(), cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("top %s by %s (-go +clickhouse):\n%s", metric, by, diff)
			}
		}
	}
}

// oldSchema is the minute table as gateways before typed rollups created
// it.
const oldSchema = `CREATE TABLE %s (
    tenant      String,
    device      String,
    metric      String,
    minute      DateTime,
    writer      UInt16,
    part        UInt64,
    count       UInt64,
    sum         Float64,
    min         Float64,
    max         Float64,
    first_ts    Int64,
    first_value Float64,
    last_ts     Int64,
    last_value  Float64,
    version     UInt64
) ENGINE = ReplacingMergeTree(version)
PARTITION BY toYYYYMMDD(minute)
ORDER BY (tenant, metric, device, minute, writer, part)`

// TestMigrateOldTable: a table created before typed rollups gets their
// columns in place; its rows read back as the float rows they were; the
// migration is idempotent and safe to run from two gateways at once.
func TestMigrateOldTable(t *testing.T) {
	s := openTest(t)
	ctx := context.Background()
	if err := s.exec(ctx, "DROP TABLE "+s.table); err != nil {
		t.Fatal(err)
	}
	if err := s.exec(ctx, fmt.Sprintf(oldSchema, s.table)); err != nil {
		t.Fatal(err)
	}
	old := rollup.Row{Key: rollup.Key{Tenant: "acme", Device: "d", Metric: "temp", Minute: ms(0)}, Writer: 3, Part: 9,
		Count: 2, Sum: 3.5, Min: 1.5, Max: 2, FirstTS: ms(time.Second), FirstValue: 1.5, LastTS: ms(2 * time.Second), LastValue: 2, Version: 5}
	// As today's main inserts: the old column list.
	b, err := s.conn.PrepareBatch(ctx, "INSERT INTO "+s.table+
		" (tenant, device, metric, minute, writer, part, count, sum, min, max, first_ts, first_value, last_ts, last_value, version)")
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Append(old.Tenant, old.Device, old.Metric, time.UnixMilli(old.Minute).UTC(), old.Writer, old.Part, old.Count,
		old.Sum, old.Min, old.Max, old.FirstTS, old.FirstValue, old.LastTS, old.LastValue, old.Version); err != nil {
		t.Fatal(err)
	}
	if err := b.Send(); err != nil {
		t.Fatal(err)
	}
	// Two gateways migrating at once, then a third time.
	other, err := Open(s.cfg, quiet)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	errs := make(chan error, 2)
	for _, st := range []*Store{s, other} {
		go func() { _, err := st.Migrate(ctx); errs <- err }()
	}
	for range 2 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	stmts, err := s.Migrate(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(stmts) != 2 {
		t.Errorf("a migrated table was altered again: %q", stmts[2:])
	}
	f := rollup.Filter{Tenant: "acme", Metric: "temp", From: ms(0), To: ms(time.Hour)}
	got, err := s.Rows(ctx, f)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]rollup.Row{old}, got); diff != "" {
		t.Errorf("old row after migration (-want +got):\n%s", diff)
	}
	f.Device = "d"
	series, err := s.Series(ctx, f, rollup.StepHour)
	if err != nil {
		t.Fatal(err)
	}
	want := []rollup.Bucket{{Start: ms(0), Count: 2, Sum: 3.5, Min: 1.5, Max: 2, FirstTS: ms(time.Second), FirstValue: 1.5, LastTS: ms(2 * time.Second), LastValue: 2}}
	if diff := cmp.Diff(want, series); diff != "" {
		t.Errorf("old row's series after migration (-want +got):\n%s", diff)
	}
	// New typed rows go in beside it.
	typed := rollup.Compute("acme", "d", []model.Reading{{TS: ms(3 * time.Second), Metrics: []model.Metric{model.IntMetric("temp", 4)}}}, 6)
	typed[0].Writer = 65535
	if err := s.Insert(ctx, typed); err != nil {
		t.Fatal(err)
	}
	series, err = s.Series(ctx, f, rollup.StepHour)
	if err != nil || len(series) != 1 || series[0].Count != 3 || series[0].FloatCount() != 2 || series[0].IntCount != 1 || series[0].Sum != 3.5 {
		t.Errorf("series after a typed row = %+v, %v", series, err)
	}
}

// TestUpgradeWithoutMigrate: a gateway upgraded without `ingest migrate`
// inserts float rows into the old table as it is, and adds the typed
// columns when it first inserts typed rows (or reads).
func TestUpgradeWithoutMigrate(t *testing.T) {
	s := openTest(t)
	ctx := context.Background()
	if err := s.exec(ctx, "DROP TABLE "+s.table); err != nil {
		t.Fatal(err)
	}
	if err := s.exec(ctx, fmt.Sprintf(oldSchema, s.table)); err != nil {
		t.Fatal(err)
	}
	fresh, err := Open(s.cfg, quiet) // the upgraded gateway
	if err != nil {
		t.Fatal(err)
	}
	defer fresh.Close()
	floats := rollup.Compute("acme", "d", []model.Reading{{TS: ms(0), Metrics: []model.Metric{{Name: "f", Value: 1.5}}}}, 1)
	if err := fresh.Insert(ctx, floats); err != nil {
		t.Fatal(err)
	}
	if have, err := fresh.columnNames(ctx); err != nil || have["int_count"] {
		t.Fatalf("a float insert altered the table (int_count: %v, %v)", have["int_count"], err)
	}
	typed := rollup.Compute("acme", "d", []model.Reading{{TS: ms(0), Metrics: []model.Metric{model.IntMetric("n", 3), model.StringMetric("s", "x")}}}, 1)
	if err := fresh.Insert(ctx, typed); err != nil {
		t.Fatal(err)
	}
	got, err := fresh.Rows(ctx, rollup.Filter{Tenant: "acme", From: ms(0), To: ms(time.Minute)})
	if err != nil {
		t.Fatal(err)
	}
	want := append(append([]rollup.Row(nil), floats...), typed...)
	if diff := cmp.Diff(want, got, cmpopts.SortSlices(func(a, b rollup.Row) bool { return a.Metric < b.Metric })); diff != "" {
		t.Errorf("rows (-want +got):\n%s", diff)
	}
}
