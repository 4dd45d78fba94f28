package retention_test

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"

	"github.com/sluicehq/sluice/internal/chstore"
	"github.com/sluicehq/sluice/internal/model"
	"github.com/sluicehq/sluice/internal/retention"
	"github.com/sluicehq/sluice/internal/rollup"
	"github.com/sluicehq/sluice/internal/store"
	"github.com/sluicehq/sluice/internal/testenv"
)

func clickhouseAddr() string {
	if a := os.Getenv("SLUICE_ROLLUPS_CLICKHOUSE_ADDR"); a != "" {
		return a
	}
	return "127.0.0.1:9000"
}

func openClickHouse(t *testing.T) *chstore.Store {
	t.Helper()
	testenv.LockClickHouse(t, false)
	testenv.Require(t, "clickhouse", clickhouseAddr())
	cfg := chstore.DefaultConfig()
	cfg.Addr = clickhouseAddr()
	cfg.Database = fmt.Sprintf("sluice_retention_%d", time.Now().UnixNano())
	s, err := chstore.Open(cfg, discard)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Migrate(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = s.Close()
		if conn, err := clickhouse.Open(&clickhouse.Options{Addr: []string{cfg.Addr}}); err == nil {
			_ = conn.Exec(context.Background(), "DROP DATABASE IF EXISTS "+cfg.Database)
			_ = conn.Close()
		}
	})
	return s
}

// TestClickHouse: 40 days of rollups of three tenants; with a 30-day
// rollups policy (and one tenant at 35 days, which holds the all-tenant
// partitions longer) exactly the days older than 35 days go, one DROP
// PARTITION each, whatever their row count; a dry run and a second sweeper
// change nothing more.
func TestClickHouse(t *testing.T) {
	s := openClickHouse(t)
	ctx := t.Context()
	tenants := map[string]int{"acme": 1, "bulk": 10, "brief": 1} // rows per minute-metric multiplier
	var rows []rollup.Row
	for i := range days {
		d := today - model.Day(i)
		for tenant, mul := range tenants {
			for m := range 5 * mul {
				rows = append(rows, rollup.Row{Key: rollup.Key{Tenant: tenant, Device: "d1", Metric: fmt.Sprint("m", m), Minute: d.Start() + 60_000*int64(i)},
					Count: 1, Sum: 1, Min: 1, Max: 1, FirstTS: d.Start(), LastTS: d.Start(), Version: 1})
			}
		}
	}
	if err := s.Insert(ctx, rows); err != nil {
		t.Fatal(err)
	}
	cfg := retention.DefaultConfig()
	cfg.Rollups = retention.Duration(30 * retention.Day)
	cfg.Tenants = map[string]retention.Policy{"brief": {Rollups: retention.Duration(35 * retention.Day)}}
	sw := func() *retention.Sweeper {
		return retention.New(cfg, []retention.Store{s}, func() time.Time { return now }, discard, nil)
	}
	daysLeft := func() map[model.Day]int {
		out := map[model.Day]int{}
		got, err := s.Rows(ctx, rollup.Filter{Tenant: "bulk", Device: "d1", From: (today - days).Start(), To: (today + 1).Start()})
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range got {
			out[model.DayOf(r.Minute)]++
		}
		return out
	}
	dry, err := sw().Sweep(ctx, retention.Options{DryRun: true})
	if err != nil {
		t.Fatal(err)
	}
	if n := len(daysLeft()); n != days {
		t.Fatalf("dry run: %d days left, want %d", n, days)
	}
	// The longest rollups policy is brief's 35 days: days 36..39 ago go.
	if len(dry.Buckets) != 4 {
		t.Fatalf("dry run planned %v, want the 4 days older than 35 days", dry.Buckets)
	}
	rep, err := sw().Sweep(ctx, retention.Options{})
	if err != nil {
		t.Fatal(err)
	}
	kr := rep.Kinds[store.BucketRollups]
	if kr == nil || kr.Days != 4 || kr.Deletes != 4 || kr.Rows != int64(4*5*12) {
		t.Errorf("report %+v, want 4 days, 4 DROP PARTITION, %d rows", kr, 4*5*12)
	}
	left := daysLeft()
	for i := range days {
		d := today - model.Day(i)
		want := 50
		if i > 35 {
			want = 0
		}
		if left[d] != want {
			t.Errorf("bulk rollups of %s (%d days ago): %d rows, want %d", d, i, left[d], want)
		}
	}
	again, err := sw().Sweep(ctx, retention.Options{})
	if err != nil || len(again.Buckets) != 0 {
		t.Errorf("second sweep: %v, %v", again.Buckets, err)
	}
	// Dropping a day that is already gone is not an error (two sweepers).
	if _, err := s.DropData(ctx, store.Bucket{Kind: store.BucketRollups, Day: today - 39}); err != nil {
		t.Errorf("drop of a dropped day: %v", err)
	}
}
