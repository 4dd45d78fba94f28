package chstore

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/sluicehq/sluice/internal/model"
	"github.com/sluicehq/sluice/internal/rollup"
	"github.com/sluicehq/sluice/internal/testenv"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// requireServer skips (or, under CI=true, fails) when ClickHouse does not
// answer on addr. It holds the shared ClickHouse lock until the test ends.
func requireServer(t testing.TB, addr string) {
	t.Helper()
	testenv.LockClickHouse(t, false)
	testenv.Require(t, "clickhouse", addr)
}

func testAddr() string {
	if a := os.Getenv("SLUICE_ROLLUPS_CLICKHOUSE_ADDR"); a != "" {
		return a
	}
	return "127.0.0.1:9000"
}

// openTest opens a store on a fresh database, dropped at the end.
func openTest(t testing.TB) *Store {
	addr := testAddr()
	requireServer(t, addr)
	cfg := DefaultConfig()
	cfg.Addr = addr
	cfg.Database = fmt.Sprintf("sluice_test_%d", time.Now().UnixNano())
	s, err := Open(cfg, quiet)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Migrate(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = s.conn.Exec(context.Background(), "DROP DATABASE IF EXISTS "+cfg.Database)
		_ = s.Close()
	})
	return s
}

var t0 = time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)

func ms(d time.Duration) int64 { return t0.Add(d).UnixMilli() }

func TestExactValuesWithLateRowsAndRetries(t *testing.T) {
	s := openTest(t)
	ctx := context.Background()
	var inserted [][]rollup.Row
	recompute := func(device string, version uint64, readings ...model.Reading) {
		rows := rollup.Compute("acme", device, readings, version)
		if err := s.Insert(ctx, rows); err != nil {
			t.Fatal(err)
		}
		inserted = append(inserted, rows)
	}
	at := func(ts time.Duration, v float64) model.Reading {
		return model.Reading{TS: ms(ts), Metrics: []model.Metric{{Name: "temp", Value: v}}}
	}
	// Minutes 0 and 1 of pump-1 and pump-2 as first recomputed.
	recompute("pump-1", 1, at(0, 20), at(30*time.Second, 22), at(45*time.Second, 18.5), at(61*time.Second, 30))
	recompute("pump-2", 1, at(10*time.Second, 5), at(70*time.Second, 7))
	// Two late readings for minute 0: recomputed whole, a higher version.
	recompute("pump-1", 2, at(0, 20), at(30*time.Second, 22), at(45*time.Second, 18.5), at(50*time.Second, -10), at(59*time.Second, 40))

	// Retried inserts of every recompute, in any order, change nothing.
	for i := len(inserted) - 1; i >= 0; i-- {
		if err := s.Insert(ctx, inserted[i]); err != nil {
			t.Fatal(err)
		}
	}

	want := []rollup.Bucket{
		{Start: ms(0), Count: 5, Sum: 20 + 22 + 18.5 + 40 - 10, Min: -10, Max: 40, FirstTS: ms(0), FirstValue: 20, LastTS: ms(59 * time.Second), LastValue: 40},
		{Start: ms(time.Minute), Count: 1, Sum: 30, Min: 30, Max: 30, FirstTS: ms(61 * time.Second), FirstValue: 30, LastTS: ms(61 * time.Second), LastValue: 30},
	}
	f := rollup.Filter{Tenant: "acme", Device: "pump-1", Metric: "temp", From: ms(0), To: ms(time.Hour)}
	got, err := s.Series(ctx, f, rollup.StepMinute)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("minute series (-want +got):\n%s", diff)
	}
	hour, err := s.Series(ctx, f, rollup.StepHour)
	if err != nil {
		t.Fatal(err)
	}
	wantHour := []rollup.Bucket{{Start: ms(0), Count: 6, Sum: 120.5, Min: -10, Max: 40, FirstTS: ms(0), FirstValue: 20, LastTS: ms(61 * time.Second), LastValue: 30}}
	if diff := cmp.Diff(wantHour, hour); diff != "" {
		t.Errorf("hour series (-want +got):\n%s", diff)
	}
	// The same answer as folding the rows in Go.
	rows, err := s.Rows(ctx, f)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, rollup.Combine(rows, rollup.StepMinute)); diff != "" {
		t.Errorf("rows folded in Go (-want +got):\n%s", diff)
	}

	top, err := s.Top(ctx, rollup.Filter{Tenant: "acme", Metric: "temp", From: ms(0), To: ms(time.Hour)}, rollup.ByCount, 10)
	if err != nil {
		t.Fatal(err)
	}
	wantTop := []rollup.Rank{
		{Device: "pump-1", Value: 6, Count: 6, Mean: 120.5 / 6, Max: 40},
		{Device: "pump-2", Value: 2, Count: 2, Mean: 6, Max: 7},
	}
	if diff := cmp.Diff(wantTop, top, cmpopts.IgnoreFields(rollup.Rank{}, "Agg")); diff != "" {
		t.Errorf("top by count (-want +got):\n%s", diff)
	}
	// Another tenant sees nothing.
	other, err := s.Series(ctx, rollup.Filter{Tenant: "other", Device: "pump-1", Metric: "temp", From: ms(0), To: ms(time.Hour)}, rollup.StepMinute)
	if err != nil || len(other) != 0 {
		t.Errorf("other tenant's series = %v, %v", other, err)
	}
}

func TestTombstoneAndReplace(t *testing.T) {
	s := openTest(t)
	ctx := context.Background()
	k := rollup.Key{Tenant: "t", Device: "d", Metric: "m", Minute: ms(0)}
	row := rollup.Row{Key: k, Writer: 1, Part: 7, Count: 2, Sum: 3, Min: 1, Max: 2, FirstTS: ms(0), FirstValue: 1, LastTS: ms(time.Second), LastValue: 2, Version: 10}
	tomb := rollup.Row{Key: k, Writer: 1, Part: 7, Version: 11}
	older := row
	older.Version, older.Count = 9, 100
	for _, batch := range [][]rollup.Row{{row}, {tomb}, {older}, {row}} {
		if err := s.Insert(ctx, batch); err != nil {
			t.Fatal(err)
		}
	}
	got, err := s.Rows(ctx, rollup.Filter{Tenant: "t", From: ms(0), To: ms(time.Minute)})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 0 {
		t.Errorf("after a tombstone with the highest version, rows = %+v", got)
	}
	day := model.DayOf(ms(0))
	if devs, err := s.Devices(ctx, "t", day); err != nil || len(devs) != 0 {
		t.Errorf("after a tombstone, Devices = %v, %v; want none", devs, err)
	}
	row.Version = 12
	if err := s.Insert(ctx, []rollup.Row{row}); err != nil {
		t.Fatal(err)
	}
	got, err = s.Rows(ctx, rollup.Filter{Tenant: "t", Metric: "m", From: ms(0), To: ms(time.Minute)})
	if err != nil || len(got) != 1 || got[0].Count != 2 {
		t.Errorf("after a newer version, rows = %+v, %v", got, err)
	}
	other := func(tenant, device string) rollup.Row {
		return rollup.Row{Key: rollup.Key{Tenant: tenant, Device: device, Metric: "m", Minute: ms(0)}, Count: 1, Sum: 1, Version: 1}
	}
	if err := s.Insert(ctx, []rollup.Row{other("t", "e"), other("u", "f")}); err != nil {
		t.Fatal(err)
	}
	if devs, err := s.Devices(ctx, "t", day); err != nil || !slices.Equal(devs, []string{"d", "e"}) {
		t.Errorf("Devices = %v, %v; want [d e]", devs, err)
	}
}

func TestSQLIsReadOnly(t *testing.T) {
	s := openTest(t)
	ctx := context.Background()
	res, err := s.SQL(ctx, "SELECT number, toString(number) AS s, number / 2 AS h FROM system.numbers LIMIT 3", 100)
	if err != nil {
		t.Fatal(err)
	}
	want := &Result{Columns: []string{"number", "s", "h"}, Types: []string{"UInt64", "String", "Float64"},
		Rows: [][]string{{"0", "0", "0"}, {"1", "1", "0.5"}, {"2", "2", "1"}}}
	if diff := cmp.Diff(want, res); diff != "" {
		t.Errorf("result (-want +got):\n%s", diff)
	}
	for _, q := range []string{
		"DROP TABLE " + s.Table(),
		"INSERT INTO " + s.Table() + " (tenant) VALUES ('x')",
		"SELECT 1; DROP TABLE " + s.Table(),
		"/* SELECT */ TRUNCATE TABLE " + s.Table(),
		"",
	} {
		if _, err := s.SQL(ctx, q, 100); !errors.Is(err, ErrNotSelect) {
			t.Errorf("SQL(%q) = %v, want ErrNotSelect", q, err)
		}
	}
	// The server enforces readonly too: a SELECT cannot lift it.
	if _, err := s.SQL(ctx, "SELECT 1 SETTINGS readonly = 0", 100); err == nil {
		t.Error("SELECT ... SETTINGS readonly = 0 was accepted")
	}
	if _, err := s.SQL(ctx, "SELECT number FROM system.numbers LIMIT 5", 2); err == nil {
		t.Error("a result over maxRows was accepted")
	}
}

func TestParseVersionAndSchema(t *testing.T) {
	tests := []struct {
		in     string
		major  int
		minor  int
		lowCar bool
		bad    bool
	}{
		{"18.16.1", 18, 16, false, false},
		{"19.17.4.11", 19, 17, false, false},
		{"20.1.2.4", 20, 1, true, false},
		{"24.8.4.13", 24, 8, true, false},
		{"banana", 0, 0, false, true},
	}
	s := &Store{cfg: Config{Database: "db"}, table: "db.rollups_1m"}
	for _, tc := range tests {
		major, minor, err := parseVersion(tc.in)
		if (err != nil) != tc.bad || major != tc.major || minor != tc.minor {
			t.Errorf("parseVersion(%q) = %d, %d, %v", tc.in, major, minor, err)
			continue
		}
		if tc.bad {
			continue
		}
		schema := s.Schema(major, minor)[1]
		if got := strings.Contains(schema, "LowCardinality"); got != tc.lowCar {
			t.Errorf("schema for %s uses LowCardinality: %v, want %v", tc.in, got, tc.lowCar)
		}
	}
}

func TestValidate(t *testing.T) {
	c := DefaultConfig()
	if err := c.Validate("rollups.clickhouse."); err != nil {
		t.Errorf("defaults: %v", err)
	}
	c.Addr, c.Database, c.DialTimeout, c.TLSInsecureSkipVerify = "nohost", "1bad", 0, true
	err := c.Validate("rollups.clickhouse.")
	for _, key := range []string{"rollups.clickhouse.addr", "rollups.clickhouse.database", "rollups.clickhouse.dial_timeout", "rollups.clickhouse.tls_insecure_skip_verify"} {
		if err == nil || !strings.Contains(err.Error(), key) {
			t.Errorf("Validate does not name %s: %v", key, err)
		}
	}
}
