package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"math/big"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/sluicehq/sluice/internal/testenv"
	"github.com/sluicehq/sluice/internal/wire"
)

// preTypedSchema is the minute table as `ingest migrate` created it before
// typed rollups (commit eb966e3).
const preTypedSchema = `CREATE TABLE %s.rollups_1m (
    tenant String, device String, metric String, minute DateTime, writer UInt16, part UInt64,
    count UInt64, sum Float64, min Float64, max Float64,
    first_ts Int64, first_value Float64, last_ts Int64, last_value Float64, version UInt64
) ENGINE = ReplacingMergeTree(version)
PARTITION BY toYYYYMMDD(minute)
ORDER BY (tenant, metric, device, minute, writer, part)`

// TestTypedRollupsOverHTTP posts bools, strings and floats over HTTP JSON
// to a gateway and reads them back as typed rollups (`query rollups`,
// `query top`), checks that `query rollups verify` is clean and that a
// rebuild writes the same rollups: with the embedded rollup store, and
// with ClickHouse whose table was created by the gateway before typed
// rollups and holds a row of that time, which `ingest migrate` upgrades in
// place and which still reads back.
func TestTypedRollupsOverHTTP(t *testing.T) {
	t.Run("embedded", func(t *testing.T) {
		typedRollups(t, nil, nil, nil)
	})
	t.Run("clickhouse", func(t *testing.T) {
		testenv.LockClickHouse(t, false)
		testenv.Require(t, "clickhouse", clickHouseAddr())
		database := fmt.Sprintf("sluice_e2e_typed_%d_%d", os.Getpid(), time.Now().UnixNano()%1_000_000_000)
		ch := openClickHouse(t, database)
		ctx := context.Background()
		if err := ch.Exec(ctx, "CREATE DATABASE "+database); err != nil {
			t.Fatal(err)
		}
		if err := ch.Exec(ctx, fmt.Sprintf(preTypedSchema, database)); err != nil {
			t.Fatal(err)
		}
		// A row of the old gateway: pump-old's temp, 2 readings, at 09:00
		// yesterday.
		old := day(1).Add(9 * time.Hour)
		b, err := ch.PrepareBatch(ctx, "INSERT INTO "+database+".rollups_1m (tenant, device, metric, minute, writer, part, count, sum, min, max, first_ts, first_value, last_ts, last_value, version)")
		if err != nil {
			t.Fatal(err)
		}
		if err := b.Append("acme", "pump-old", "temp", old, uint16(3), uint64(1), uint64(2), 41.0, 20.0, 21.0,
			old.UnixMilli(), 20.0, old.Add(time.Second).UnixMilli(), 21.0, uint64(1)); err != nil {
			t.Fatal(err)
		}
		if err := b.Send(); err != nil {
			t.Fatal(err)
		}
		env := []string{"SLUICE_ROLLUPS_CLICKHOUSE_ADDR=" + clickHouseAddr(), "SLUICE_ROLLUPS_CLICKHOUSE_DATABASE=" + database}
		for range 2 { // idempotent
			if out, errOut, err := runBin(t, env, "ingest", "migrate"); err != nil {
				t.Fatalf("ingest migrate: %v\n%s%s", err, out, errOut)
			}
		}
		// The old row reads back as floats; having no raw readings, verify
		// reports it until the rebuild retracts it.
		readOld := func(g *gateway) {
			t.Helper()
			out, _ := g.query("rollups", "--device", "pump-old", "--metric", "temp", "--from", day(1).Format(time.DateOnly), "--to", day(0).Format(time.DateOnly), "--format", "json")
			var s wire.RollupSeries
			if err := json.Unmarshal([]byte(out), &s); err != nil {
				t.Fatalf("query rollups of pump-old: %v\n%s", err, out)
			}
			if len(s.Buckets) != 1 || s.Buckets[0].Count != 2 || s.Buckets[0].FloatCount != 2 || s.Buckets[0].Sum == nil || *s.Buckets[0].Sum != 41 ||
				s.Buckets[0].IntCount != 0 || s.Buckets[0].Last == nil || s.Buckets[0].Last.Value != 21 {
				t.Errorf("the row written before the migration reads as %s", out)
			}
		}
		typedRollups(t, env, readOld, []wire.Mismatch{{Device: "pump-old", Metric: "temp", Rollup: 2,
			Diffs: []string{"count: raw 0, rollup 2", "float_count: raw 0, rollup 2"}}})
	})
}

// typedRollups runs the typed flow on a gateway with env: first before,
// if not nil; the live rollups' verify finds the mismatches extra, the
// rebuilt ones none.
func typedRollups(t *testing.T, env []string, before func(*gateway), extra []wire.Mismatch) {
	t.Helper()
	env = append(env, "SLUICE_ROLLUPS_ROLL_DELAY=200ms")
	g := startGateway(t, t.TempDir(), env...)
	if before != nil {
		before(g)
	}
	base := day(1).Add(10 * time.Hour)
	states := []string{"idle", "run", "stop"}
	var body strings.Builder
	for i := range 90 {
		fmt.Fprintf(&body, `{"device_id":"valve-1","ts":%q,"metrics":{"open":%t,"state":%q,"flow":%d.5}}`+"\n",
			base.Add(time.Duration(i)*time.Second).Format(time.RFC3339Nano), i%3 == 0, states[i%3], i)
	}
	fmt.Fprintf(&body, `{"device_id":"valve-2","ts":%q,"metrics":{"open":false,"state":"off"}}`+"\n", base.Format(time.RFC3339Nano))
	if status, resp := g.post("/v1/readings", "application/x-ndjson", []byte(body.String())); status != 202 {
		t.Fatalf("POST readings: %d %s", status, resp)
	}
	// Ints come from line protocol: 2^62 + i, whose sum over the minute
	// needs more than 64 bits and more than a float64's 53.
	var lines strings.Builder
	for i := range 90 {
		fmt.Fprintf(&lines, "valve,device=valve-1 pulses=%di %d\n", int64(1)<<62+int64(i), base.Add(time.Duration(i)*time.Second).UnixNano())
	}
	if status, resp := g.post("/api/v2/write?org=o&bucket=b&precision=ns", "text/plain", []byte(lines.String())); status != 204 {
		t.Fatalf("POST line protocol: %d %s", status, resp)
	}
	from, to := day(1).Format(time.DateOnly), day(0).Format(time.DateOnly)
	series := func(metric string) []wire.Bucket {
		t.Helper()
		out, _ := g.query("rollups", "--device", "valve-1", "--metric", metric, "--from", from, "--to", to, "--step", "1h", "--format", "json")
		var s wire.RollupSeries
		if err := json.Unmarshal([]byte(out), &s); err != nil {
			t.Fatalf("query rollups: %v\n%s", err, out)
		}
		return s.Buckets
	}
	deadline := time.Now().Add(time.Minute)
	for {
		if b := series("state"); len(b) == 1 && b[0].Count == 90 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("valve-1's state not rolled up after a minute:\n%s", g.logs())
		}
		time.Sleep(200 * time.Millisecond)
	}
	u := func(v uint64) *uint64 { return &v }
	bl := func(v bool) *bool { return &v }
	str := func(v string) *string { return &v }
	at := func(i int) string { return base.Add(time.Duration(i) * time.Second).UTC().Format(wire.TimeFormat) }
	start := base.Truncate(time.Hour).UTC().Format(wire.TimeFormat)
	check := func(when string, mismatches []wire.Mismatch) {
		t.Helper()
		wantOpen := []wire.Bucket{{Start: start, Count: 90, First: &wire.Value{Type: 2, Int: 1}, FirstTS: at(0), Last: &wire.Value{Type: 2}, LastTS: at(89),
			BoolCount: 90, TrueCount: u(30), BoolFirst: bl(true), BoolFirstTS: at(0), BoolLast: bl(false), BoolLastTS: at(89)}}
		if diff := cmp.Diff(wantOpen, series("open")); diff != "" {
			t.Errorf("%s: open (-want +got):\n%s", when, diff)
		}
		wantState := []wire.Bucket{{Start: start, Count: 90, First: &wire.Value{Type: 3, Str: "idle"}, FirstTS: at(0), Last: &wire.Value{Type: 3, Str: "stop"}, LastTS: at(89),
			StrCount: 90, StrFirst: str("idle"), StrFirstTS: at(0), StrLast: str("stop"), StrLastTS: at(89)}}
		if diff := cmp.Diff(wantState, series("state")); diff != "" {
			t.Errorf("%s: state (-want +got):\n%s", when, diff)
		}
		if f := series("flow"); len(f) != 1 || f[0].FloatCount != 90 || f[0].Sum == nil || *f[0].Sum != 89*90/2+45 {
			t.Errorf("%s: flow = %+v", when, f)
		}
		// 90 × 2^62 + 0+1+…+89, exactly.
		wantSum := new(big.Int).Add(new(big.Int).Mul(big.NewInt(90), new(big.Int).Lsh(big.NewInt(1), 62)), big.NewInt(89*90/2)).String()
		if p := series("valve.pulses"); len(p) != 1 || p[0].IntCount != 90 || p[0].Count != 90 || p[0].IntSum.String() != wantSum ||
			p[0].IntMin == nil || *p[0].IntMin != 1<<62 || p[0].IntMax == nil || *p[0].IntMax != 1<<62+89 {
			t.Errorf("%s: valve.pulses = %+v, want 90 ints summing to %s", when, p, wantSum)
		}
		out, _ := g.query("top", "--metric", "open", "--by", "count", "--from", from, "--to", to, "--format", "json")
		var l wire.TopList
		if err := json.Unmarshal([]byte(out), &l); err != nil {
			t.Fatalf("query top: %v\n%s", err, out)
		}
		want := []wire.Rank{
			{Device: "valve-1", Value: 90, Count: 90, TrueCount: u(30), Last: &wire.Value{Type: 2}, LastTS: at(89)},
			{Device: "valve-2", Value: 1, Count: 1, TrueCount: u(0), Last: &wire.Value{Type: 2}, LastTS: at(0)},
		}
		if diff := cmp.Diff(want, l.Devices); diff != "" {
			t.Errorf("%s: top by count (-want +got):\n%s", when, diff)
		}
		out, _ = g.query("top", "--metric", "open", "--by", "max", "--from", from, "--to", to, "--format", "json")
		if err := json.Unmarshal([]byte(out), &l); err != nil || len(l.Devices) != 0 {
			t.Errorf("%s: top of bools by max = %s, want no device", when, out)
		}
		out, errOut, code := g.queryStatus("rollups", "verify", "--day", from, "--format", "json")
		var v wire.Verification
		if err := json.Unmarshal([]byte(out), &v); err != nil || code != map[bool]int{true: 0, false: 1}[len(mismatches) == 0] ||
			!cmp.Equal(v.Mismatches, mismatches, cmpopts.EquateEmpty()) || v.RawRows != 4*90+2 {
			t.Errorf("%s: verify: exit %d, %s%s", when, code, out, errOut)
		}
	}
	check("live", extra)
	out, _ := g.query("rollups", "rebuild", "--from", from, "--to", to, "--format", "json")
	var r wire.RebuildResult
	if err := json.Unmarshal([]byte(out), &r); err != nil || r.Readings != 4*90+2 {
		t.Fatalf("rebuild: %v\n%s", err, out)
	}
	check("after rebuild", nil)
}
