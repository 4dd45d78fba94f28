package e2e

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/chstore/chstoretest"

	"github.com/google/go-cmp/cmp"

	"github.com/sluicehq/sluice/internal/chstore"
	"github.com/sluicehq/sluice/internal/rollup"
	"github.com/sluicehq/sluice/internal/testenv"
	"github.com/sluicehq/sluice/internal/wire"
)

// TestCassandraRollupRepair runs the rollup repair flow on a gateway whose
// raw store is Cassandra and whose rollups are in ClickHouse: `query
// rollups verify` of a day finds the devices in the Cassandra catalogue and
// agrees with the rollups the gateway shipped; a whole-day `query rollups
// rebuild` (no --device) rebuilds every device; rows added to ClickHouse
// behind the gateway's back (one more count for a device, a device with no
// readings at all) are reported by verify and gone after another whole-day
// rebuild.
func TestCassandraRollupRepair(t *testing.T) {
	env := cassandraEnv(t)
	testenv.LockClickHouse(t, false)
	testenv.Require(t, "clickhouse", clickHouseAddr())
	chCfg := chstore.DefaultConfig()
	chCfg.Addr = clickHouseAddr()
	chCfg.Database = fmt.Sprintf("sluice_e2e_repair_%d", time.Now().UnixNano())
	t.Cleanup(func() {
		if err := chstoretest.Drop(chCfg.Addr, chCfg.Database); err != nil {
			t.Errorf("drop database %s: %v", chCfg.Database, err)
		}
	})
	env = append(env,
		"SLUICE_ROLLUPS_CLICKHOUSE_ADDR="+chCfg.Addr,
		"SLUICE_ROLLUPS_CLICKHOUSE_DATABASE="+chCfg.Database,
	)
	if out, errOut, err := runBin(t, env, "ingest", "migrate"); err != nil {
		t.Fatalf("ingest migrate: %v\n%s%s", err, out, errOut)
	}
	g := startGateway(t, t.TempDir(), env...)

	// 40 devices (over most of the 64 catalogue shards), 30 readings each,
	// one a second from 10:00 yesterday: one minute, two metrics.
	const devices, n = 40, 30
	base := day(1).Add(10 * time.Hour)
	var body strings.Builder
	for d := range devices {
		for i := range n {
			fmt.Fprintln(&body, reading(fmt.Sprintf("pump-%02d", d), base.Add(time.Duration(i)*time.Second), i))
		}
	}
	if status, resp := g.post("/v1/readings", "application/x-ndjson", []byte(body.String())); status != 202 {
		t.Fatalf("POST readings: %d %s", status, resp)
	}
	dayArg, nextArg := day(1).Format(time.DateOnly), day(0).Format(time.DateOnly)

	// verify runs `query rollups verify` of the day; its exit status is 0
	// when nothing differs, 1 with mismatches (or on an error, which
	// prints no verification).
	verify := func() (wire.Verification, int) {
		t.Helper()
		out, errOut, code := g.queryStatus("rollups", "verify", "--day", dayArg, "--format", "json")
		var v wire.Verification
		if err := json.Unmarshal([]byte(out), &v); err != nil || v.Day != dayArg {
			t.Fatalf("query rollups verify --day %s: exit %d, no verification (%v)\nstdout: %s\nstderr: %s", dayArg, code, err, out, errOut)
		}
		if want := map[bool]int{true: 0, false: 1}[len(v.Mismatches) == 0]; code != want {
			t.Fatalf("query rollups verify: exit %d with %d mismatches, want %d", code, len(v.Mismatches), want)
		}
		return v, code
	}
	expect := func(when string, want wire.Verification) {
		t.Helper()
		if v, _ := verify(); !cmp.Equal(want, v) {
			t.Fatalf("verify %s (-want +got):\n%s", when, cmp.Diff(want, v))
		}
	}
	rebuild := func() wire.RebuildResult {
		t.Helper()
		out, _ := g.query("rollups", "rebuild", "--from", dayArg, "--to", nextArg, "--format", "json")
		var r wire.RebuildResult
		if err := json.Unmarshal([]byte(out), &r); err != nil {
			t.Fatalf("query rollups rebuild: %v\n%s", err, out)
		}
		return r
	}
	clean := wire.Verification{Day: dayArg, Devices: devices, Metrics: 2 * devices, RawRows: 2 * devices * n, RollupRows: 2 * devices * n, Mismatches: []wire.Mismatch{}}

	// The gateway ships the minute's rollups within a few flushes.
	deadline := time.Now().Add(time.Minute)
	for {
		v, code := verify()
		if code == 0 {
			if diff := cmp.Diff(clean, v); diff != "" {
				t.Fatalf("verify with the live rollups (-want +got):\n%s", diff)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the live rollups still differ from the raw store after a minute: %+v\n%s", v, g.logs())
		}
		time.Sleep(250 * time.Millisecond)
	}

	// A whole-day rebuild rewrites each device-metric's row. The gateway
	// wrote the same rows (recomputed from the raw store, writer 65535,
	// part 0), so nothing is retracted.
	if r := rebuild(); r.DeviceDays != devices || r.Readings != 2*devices*n || r.Written != 2*devices || r.Retracted != 0 {
		t.Fatalf("rebuild of %s: %+v, want %d device-days, %d readings, %d rows written and none retracted",
			dayArg, r, devices, 2*devices*n, 2*devices)
	}
	expect("after the rebuild", clean)

	// Rows no gateway wrote: five more rpm readings for pump-07, and three
	// temp_c readings of a device that has none in the raw store.
	ch, err := chstore.Open(chCfg, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer ch.Close()
	minute := base.UnixMilli()
	bogus := []rollup.Row{
		{Key: rollup.Key{Tenant: "acme", Device: "pump-07", Metric: "rpm", Minute: minute}, Writer: 9, Count: 5, Sum: 5000, Min: 1000, Max: 1000,
			FirstTS: minute, FirstValue: 1000, LastTS: minute, LastValue: 1000, Version: 1},
		{Key: rollup.Key{Tenant: "acme", Device: "ghost-1", Metric: "temp_c", Minute: minute}, Writer: 9, Count: 3, Sum: 3, Min: 1, Max: 1,
			FirstTS: minute, FirstValue: 1, LastTS: minute, LastValue: 1, Version: 1},
	}
	if err := ch.Insert(t.Context(), bogus); err != nil {
		t.Fatal(err)
	}
	damaged := clean
	damaged.Devices, damaged.Metrics, damaged.RollupRows = devices+1, 2*devices+1, clean.RollupRows+8
	damaged.Mismatches = []wire.Mismatch{
		{Device: "ghost-1", Metric: "temp_c", Raw: 0, Rollup: 3, Diffs: []string{"count: raw 0, rollup 3", "float_count: raw 0, rollup 3"}},
		{Device: "pump-07", Metric: "rpm", Raw: n, Rollup: n + 5, Diffs: []string{"count: raw 30, rollup 35", "float_count: raw 30, rollup 35"}},
	}
	expect("after rows were added behind the gateway", damaged)
	// The text form names them and says how to repair.
	out, errOut, code := g.queryStatus("rollups", "verify", "--day", dayArg)
	if code != 1 || !strings.Contains(out, "ghost-1") || !strings.Contains(out, "pump-07") ||
		!strings.Contains(errOut, "run: query rollups rebuild --from "+dayArg+" --to "+nextArg) {
		t.Fatalf("query rollups verify (table): exit %d\nstdout: %s\nstderr: %s", code, out, errOut)
	}

	// Another whole-day rebuild takes in the device that only the rollups
	// know, and retracts both rows.
	if r := rebuild(); r.DeviceDays != devices+1 || r.Readings != 2*devices*n || r.Written-r.Retracted != 2*devices || r.Retracted != 2 {
		t.Fatalf("rebuild after the damage: %+v, want %d device-days, %d readings, %d rows written and 2 retracted",
			r, devices+1, 2*devices*n, 2*devices)
	}
	expect("after the repair", clean)
	g.stop()
}
