package e2e

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/sluicehq/sluice/internal/testenv"
	"github.com/sluicehq/sluice/internal/wire"
)

// helpCommands returns the commands `query help` lists.
func helpCommands(t *testing.T, help string) []string {
	t.Helper()
	_, rest, ok := strings.Cut(help, "\nCommands:\n")
	if !ok {
		t.Fatalf("query help has no Commands section:\n%s", help)
	}
	line := regexp.MustCompile(`^  (\S+(?: \S+)?)  +\S`)
	var names []string
	for l := range strings.Lines(rest) {
		m := line.FindStringSubmatch(l)
		if m == nil {
			break
		}
		if m[1] != "help" {
			names = append(names, m[1])
		}
	}
	if len(names) == 0 {
		t.Fatalf("query help lists no command:\n%s", help)
	}
	return names
}

// decodeJSON decodes out into v, refusing unknown fields and anything
// after the value, and checks that out has exactly the top-level keys
// keys (so that a field left out, or null where an array is due, shows).
func decodeJSON(t *testing.T, out string, v any, keys ...string) {
	t.Helper()
	var top map[string]json.RawMessage
	if err := json.Unmarshal([]byte(out), &top); err != nil {
		t.Fatalf("not a JSON object: %v\n%s", err, out)
	}
	got := make([]string, 0, len(top))
	for k, raw := range top {
		got = append(got, k)
		if string(raw) == "null" {
			t.Errorf("key %q is null:\n%s", k, out)
		}
	}
	slices.Sort(got)
	want := slices.Sorted(slices.Values(keys))
	if !slices.Equal(got, want) {
		t.Errorf("keys %v, want %v:\n%s", got, want, out)
	}
	dec := json.NewDecoder(strings.NewReader(out))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		t.Fatalf("decode into %T: %v\n%s", v, err, out)
	}
	if dec.More() {
		t.Fatalf("more than one JSON value:\n%s", out)
	}
}

// TestQueryEveryCommandJSON runs every command `query help` lists with
// --format json against a live gateway (embedded store, embedded rollup
// store, embedded broker for a dead letter, audit log on) and checks what
// each prints, then runs each again with every other format help names
// for it.
func TestQueryEveryCommandJSON(t *testing.T) {
	dir, data := t.TempDir(), t.TempDir()
	keyFile := filepath.Join(dir, "audit.key")
	kout, err := exec.Command(filepath.Join(bin, "ingest"), "audit", "keygen", "--name", "audit.e2e.example", "--out", keyFile).CombinedOutput()
	if err != nil {
		t.Fatalf("ingest audit keygen: %v\n%s", err, kout)
	}
	klines := strings.Split(strings.TrimSpace(string(kout)), "\n")
	vkey := klines[len(klines)-1]

	// Audit events of billing-api: two of three days ago, three of the day
	// before yesterday at 10:00 (not yesterday: a day is sealed at the
	// earliest 10 minutes after it ends, and the test may run just after
	// midnight). They are accepted by a first run that takes late events;
	// the second run refuses them, so it seals both days (trees of 2, then 5
	// leaves).
	base := day(1).Add(10 * time.Hour)
	auditBase := day(2).Add(10 * time.Hour)
	g := startGateway(t, data, auditEnv(keyFile, "108h", "108h10m")...)
	var events strings.Builder
	for i := range 2 {
		fmt.Fprintf(&events, `{"event_id":"01JP%03d","stream":"billing-api","ts":%q,"action":"invoice.create","attributes":{"amount":%d}}`+"\n",
			i, day(3).Add(time.Duration(i)*time.Minute).Format(time.RFC3339), i)
	}
	for i := range 3 {
		fmt.Fprintf(&events, `{"event_id":"01JQ%03d","stream":"billing-api","ts":%q,"action":"invoice.refund","attributes":{"amount":%d}}`+"\n",
			i, auditBase.Add(time.Duration(i)*time.Minute).Format(time.RFC3339), i)
	}
	if status, resp := g.post("/v1/audit", "application/x-ndjson", []byte(events.String())); status != 202 {
		t.Fatalf("POST audit: %d %s", status, resp)
	}
	g.stop()

	addr := testenv.FreeAddr(t)
	g = startMQTTGateway(t, data, addr, auditEnv(keyFile, "0s", "10m")...)
	origin := "audit.e2e.example/acme/billing-api"
	deadline := time.Now().Add(time.Minute)
	for {
		out, _, code := g.queryStatus("audit", "checkpoint", "--stream", "billing-api")
		if code == 0 && strings.HasPrefix(out, origin+"\n5\n") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("billing-api not sealed to size 5 after a minute:\n%s\n%s", out, g.logs())
		}
		time.Sleep(200 * time.Millisecond)
	}

	// 30 readings of pump-17 (rpm 1000..1029) and of pump-18 (rpm
	// 1100..1129), one a second from 10:00 yesterday; one malformed MQTT
	// message.
	const n = 30
	var body strings.Builder
	for i := range n {
		fmt.Fprintln(&body, reading("pump-17", base.Add(time.Duration(i)*time.Second), i))
		fmt.Fprintln(&body, reading("pump-18", base.Add(time.Duration(i)*time.Second), 100+i))
	}
	if status, resp := g.post("/v1/readings", "application/x-ndjson", []byte(body.String())); status != 202 {
		t.Fatalf("POST readings: %d %s", status, resp)
	}
	const poison = `{"metrics": oops`
	if !publishAcked(device(t, addr), poison) {
		t.Fatal("malformed message not acknowledged by the broker")
	}

	from, to := day(1).Format(time.RFC3339), day(0).Format(time.RFC3339)
	dayArg := day(1).Format(time.DateOnly)
	bucketStart := base.UTC().Format(wire.TimeFormat)
	type check struct {
		args  []string
		check func(t *testing.T, out string)
	}
	// The order matters: rebuild first writes the rollups that verify,
	// rollups and top read.
	// The audit log commands write the files the next ones read.
	order := []string{"rollups rebuild", "rollups verify", "rollups", "top", "readings", "audit", "partitions", "deadletters", "sql",
		"audit checkpoint", "audit checkpoints", "audit proof", "audit consistency", "audit verify-proof", "audit verify"}
	auditDay1, auditDay2 := day(2).Format(time.DateOnly), day(3).Format(time.DateOnly)
	oldCP, proofFile, consFile, exportFile := filepath.Join(dir, "old.checkpoint"), filepath.Join(dir, "evt.proof"),
		filepath.Join(dir, "billing-api.consistency"), filepath.Join(dir, "billing-api.json")
	write := func(t *testing.T, file, content string) {
		t.Helper()
		if err := os.WriteFile(file, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	checks := map[string]check{
		"rollups rebuild": {
			args: []string{"rollups", "rebuild", "--from", from, "--to", to},
			check: func(t *testing.T, out string) {
				var r wire.RebuildResult
				decodeJSON(t, out, &r, "device_days", "readings", "rows_written", "rows_retracted")
				// Two devices on one day; two metrics per reading; one row
				// per device, metric and minute.
				if r.DeviceDays != 2 || r.Readings != 2*2*n || r.Written-r.Retracted != 4 {
					t.Errorf("rebuild result %+v, want 2 device-days, %d metric values, 4 rows net", r, 4*n)
				}
			},
		},
		"rollups verify": {
			args: []string{"rollups", "verify", "--day", dayArg},
			check: func(t *testing.T, out string) {
				var v wire.Verification
				decodeJSON(t, out, &v, "day", "devices", "metrics", "raw_rows", "rollup_rows", "mismatches")
				if v.Day != dayArg || v.Devices != 2 || v.Metrics != 4 || v.RawRows != 4*n || v.RollupRows != 4*n || len(v.Mismatches) != 0 {
					t.Errorf("verification %+v, want %s: 2 devices, 4 metrics, %d rows each side, no mismatch", v, dayArg, 4*n)
				}
			},
		},
		"rollups": {
			args: []string{"rollups", "--device", "pump-17", "--metric", "rpm", "--from", from, "--to", to, "--step", "1h"},
			check: func(t *testing.T, out string) {
				var s wire.RollupSeries
				decodeJSON(t, out, &s, "device", "metric", "step", "buckets")
				f := func(v float64) *float64 { return &v }
				val := func(v float64) *wire.Value { return &wire.Value{Value: v} }
				want := wire.Bucket{Start: bucketStart, Count: n, FloatCount: n, Sum: f(n*1000 + n*(n-1)/2), Min: f(1000), Max: f(1000 + n - 1),
					Mean: f(1000 + float64(n-1)/2), First: val(1000), FirstTS: bucketStart,
					Last: val(1000 + n - 1), LastTS: base.Add((n - 1) * time.Second).UTC().Format(wire.TimeFormat)}
				if s.Device != "pump-17" || s.Metric != "rpm" || s.Step != "1h" || len(s.Buckets) != 1 || !cmp.Equal(s.Buckets[0], want) {
					t.Errorf("series %+v, want pump-17 rpm 1h with one bucket %+v", s, want)
				}
			},
		},
		"top": {
			args: []string{"top", "--metric", "rpm", "--by", "max", "--from", from, "--to", to},
			check: func(t *testing.T, out string) {
				var l wire.TopList
				decodeJSON(t, out, &l, "metric", "by", "devices")
				if l.Metric != "rpm" || l.By != "max" || len(l.Devices) != 2 ||
					l.Devices[0].Device != "pump-18" || l.Devices[0].Max == nil || *l.Devices[0].Max != 1100+n-1 || l.Devices[0].Count != n ||
					l.Devices[1].Device != "pump-17" || l.Devices[1].Max == nil || *l.Devices[1].Max != 1000+n-1 {
					t.Errorf("top list %+v, want pump-18 (max %d) then pump-17 (max %d)", l, 1100+n-1, 1000+n-1)
				}
			},
		},
		"readings": {
			args: []string{"readings", "--device", "pump-17", "--from", from, "--to", to, "--all"},
			check: func(t *testing.T, out string) {
				var p wire.ReadingsPage
				decodeJSON(t, out, &p, "readings")
				if len(p.Readings) != n {
					t.Fatalf("%d readings, want %d", len(p.Readings), n)
				}
				r := p.Readings[n-1]
				if r.DeviceID != "pump-17" || r.TS != base.Add((n-1)*time.Second).UTC().Format(wire.TimeFormat) ||
					r.Seq == nil || *r.Seq != n-1 || r.Metrics["rpm"] != (wire.Value{Value: float64(1000 + n - 1)}) || len(r.Metrics) != 2 {
					t.Errorf("last reading %+v, want pump-17 seq %d rpm %d", r, n-1, 1000+n-1)
				}
			},
		},
		"audit": {
			args: []string{"audit", "--stream", "billing-api", "--from", day(2).Format(time.RFC3339), "--to", day(1).Format(time.RFC3339)},
			check: func(t *testing.T, out string) {
				var p wire.EventsPage
				decodeJSON(t, out, &p, "events")
				if len(p.Events) != 3 || p.Events[2].EventID != "01JQ002" || p.Events[2].Action != "invoice.refund" ||
					string(compactJSON(t, p.Events[2].Attributes)) != `{"amount":2}` {
					t.Errorf("events %+v, want 3 ending with 01JQ002", p.Events)
				}
			},
		},
		"partitions": {
			args: []string{"partitions", "--device", "pump-17", "--day", dayArg},
			check: func(t *testing.T, out string) {
				var p wire.PartitionsPage
				decodeJSON(t, out, &p, "partitions")
				if len(p.Partitions) != 1 {
					t.Fatalf("%d partitions, want 1", len(p.Partitions))
				}
				q := p.Partitions[0]
				if q.Kind != "readings" || q.Series != "pump-17" || q.Day != dayArg || q.Rows != 2*n || q.MinTS != bucketStart {
					t.Errorf("partition %+v, want readings pump-17 %s with %d rows", q, dayArg, 2*n)
				}
			},
		},
		"deadletters": {
			args: []string{"deadletters", "--from", from},
			check: func(t *testing.T, out string) {
				var p wire.DeadLettersPage
				decodeJSON(t, out, &p, "dead_letters")
				if len(p.DeadLetters) != 1 {
					t.Fatalf("%d dead letters, want 1", len(p.DeadLetters))
				}
				if d := p.DeadLetters[0]; d.Source != "mqtt" || d.Topic != mqttTopic || d.Reason != "invalid_json" || d.Payload != poison || d.ID == "" {
					t.Errorf("dead letter %+v, want the malformed message", d)
				}
			},
		},
		// sql reads ClickHouse, not the gateway: it needs the test server.
		"sql": {
			args: []string{"sql", "--clickhouse", clickHouseAddr(), "SELECT 'pump-17' AS device, toUInt64(3) AS n, 1.5 AS mean"},
			check: func(t *testing.T, out string) {
				var r struct {
					Columns []string            `json:"columns"`
					Types   []string            `json:"types"`
					Rows    []map[string]string `json:"rows"`
				}
				decodeJSON(t, out, &r, "columns", "types", "rows")
				if !slices.Equal(r.Columns, []string{"device", "n", "mean"}) || !slices.Equal(r.Types, []string{"String", "UInt64", "Float64"}) ||
					len(r.Rows) != 1 || r.Rows[0]["device"] != "pump-17" || r.Rows[0]["n"] != "3" || r.Rows[0]["mean"] != "1.5" {
					t.Errorf("sql result %+v", r)
				}
			},
		},
	}

	for name, c := range auditLogChecks(t, g, origin, vkey, auditDay1, auditDay2, oldCP, proofFile, consFile, exportFile, write) {
		checks[name] = c
	}

	help, _ := g.query("help")
	names := helpCommands(t, help)
	for _, name := range names {
		if _, ok := checks[name]; !ok {
			t.Errorf("query help lists %q, which this test does not run: add it", name)
		}
	}
	for _, name := range order {
		if !slices.Contains(names, name) {
			t.Errorf("the test runs %q, which query help does not list", name)
		}
	}
	formats := regexp.MustCompile(`--format ([a-z|]+)`)
	for _, name := range order {
		c := checks[name]
		t.Run(name, func(t *testing.T) {
			if name == "sql" {
				testenv.LockClickHouse(t, false)
				testenv.Require(t, "clickhouse", clickHouseAddr())
			}
			out, _ := g.queryT(t, withFormat(c.args, "json")...)
			c.check(t, out)
			// Every other format the command's help names runs too.
			cmdHelp, _ := g.queryT(t, append([]string{"help"}, strings.Fields(name)...)...)
			m := formats.FindStringSubmatch(cmdHelp)
			if m == nil {
				t.Fatalf("query help %s names no --format", name)
			}
			for _, f := range strings.Split(m[1], "|") {
				if f != "json" {
					if out, _ := g.queryT(t, withFormat(c.args, f)...); strings.TrimSpace(out) == "" {
						t.Errorf("--format %s printed nothing", f)
					}
				}
			}
		})
	}
	g.stop()
}

// auditCheck is one audit log command and the check of its JSON.
type auditCheck = struct {
	args  []string
	check func(t *testing.T, out string)
}

// auditLogChecks are the checks of the audit log commands on billing-api,
// whose log holds two events of day2 (leaves 0, 1) and three of day1
// (leaves 2..4). They run in order: checkpoint, checkpoints (writes the
// export and day2's checkpoint), proof (writes the proof of 01JQ001),
// consistency (writes the proof from day2's checkpoint to the latest),
// verify-proof (checks both offline), verify (against the export).
func auditLogChecks(t *testing.T, g *gateway, origin, vkey, day1, day2, oldCP, proofFile, consFile, exportFile string,
	write func(*testing.T, string, string)) map[string]auditCheck {
	t.Helper()
	checkpointOf := func(t *testing.T, cp string, size int) {
		t.Helper()
		if !strings.HasPrefix(cp, fmt.Sprintf("%s\n%d\n", origin, size)) || !strings.Contains(cp, "\n\n— audit.e2e.example ") {
			t.Errorf("checkpoint %q, want %s at size %d signed by audit.e2e.example", cp, origin, size)
		}
	}
	return map[string]auditCheck{
		"audit checkpoint": {
			args: []string{"audit", "checkpoint", "--stream", "billing-api"},
			check: func(t *testing.T, out string) {
				var a struct {
					Origin     string   `json:"origin"`
					Day        string   `json:"day"`
					Size       int64    `json:"size"`
					Checkpoint string   `json:"checkpoint"`
					PublicKeys []string `json:"public_keys"`
				}
				decodeJSON(t, out, &a, "origin", "day", "size", "checkpoint", "public_keys")
				if a.Origin != origin || a.Day != day1 || a.Size != 5 || !slices.Equal(a.PublicKeys, []string{vkey}) {
					t.Errorf("checkpoint answer %+v, want %s of %s at size 5 with key %s", a, origin, day1, vkey)
				}
				checkpointOf(t, a.Checkpoint, 5)
			},
		},
		"audit checkpoints": {
			args: []string{"audit", "checkpoints", "--stream", "billing-api"},
			check: func(t *testing.T, out string) {
				var e struct {
					Origin     string   `json:"origin"`
					PublicKeys []string `json:"public_keys"`
					Days       []struct {
						Day         string   `json:"day"`
						Start       int64    `json:"start"`
						Size        int64    `json:"size"`
						Frontier    []string `json:"frontier"`
						Consistency []string `json:"consistency"`
						Checkpoint  string   `json:"checkpoint"`
						SealedAt    string   `json:"sealed_at"`
					} `json:"days"`
				}
				decodeJSON(t, out, &e, "origin", "public_keys", "days")
				if e.Origin != origin || !slices.Equal(e.PublicKeys, []string{vkey}) || len(e.Days) != 2 {
					t.Fatalf("export %+v, want %s, key %s, two days", e, origin, vkey)
				}
				for i, want := range []struct {
					day         string
					start, size int64
				}{{day2, 0, 2}, {day1, 2, 5}} {
					d := e.Days[i]
					if d.Day != want.day || d.Start != want.start || d.Size != want.size || len(d.Frontier) == 0 || d.SealedAt == "" {
						t.Errorf("day %d: %+v, want %s leaves %d..%d", i, d, want.day, want.start, want.size)
					}
					checkpointOf(t, d.Checkpoint, int(want.size))
				}
				// The first day has no earlier seal to be consistent with.
				if len(e.Days[0].Consistency) != 0 || len(e.Days[1].Consistency) == 0 {
					t.Errorf("consistency proofs %v, %v: want none, then one from size 2", e.Days[0].Consistency, e.Days[1].Consistency)
				}
				write(t, exportFile, out)
				write(t, oldCP, e.Days[0].Checkpoint)
			},
		},
		"audit proof": {
			args: []string{"audit", "proof", "--stream", "billing-api", "--day", day1, "--event-id", "01JQ001"},
			check: func(t *testing.T, out string) {
				var p struct {
					Proof string `json:"proof"`
				}
				decodeJSON(t, out, &p, "proof")
				// Header, the event's canonical form, its leaf index, hashes,
				// then the signed checkpoint.
				lines := strings.Split(p.Proof, "\n")
				var leaf []byte
				if len(lines) > 2 {
					leaf, _ = base64.StdEncoding.DecodeString(strings.TrimPrefix(lines[1], "extra "))
				}
				if len(lines) < 3 || lines[0] != "c2sp.org/tlog-proof@v1" || lines[2] != "index 3" ||
					!strings.Contains(string(leaf), `"event_id":"01JQ001"`) || !strings.Contains(p.Proof, "\n\n"+origin+"\n5\n") {
					t.Errorf("proof %q, want leaf 3 (01JQ001) against the checkpoint of size 5", p.Proof)
				}
				write(t, proofFile, p.Proof)
			},
		},
		"audit consistency": {
			args: []string{"audit", "consistency", "--stream", "billing-api", "--old", oldCP},
			check: func(t *testing.T, out string) {
				var p struct {
					Proof string `json:"proof"`
				}
				decodeJSON(t, out, &p, "proof")
				if !strings.HasPrefix(p.Proof, "old 2\n") || !strings.Contains(p.Proof, origin+"\n5\n") {
					t.Errorf("consistency proof %q, want from size 2 to the checkpoint of size 5", p.Proof)
				}
				write(t, consFile, p.Proof)
			},
		},
		"audit verify-proof": {
			args: []string{"audit", "verify-proof", "--proof", proofFile, "--key", vkey},
			check: func(t *testing.T, out string) {
				var r struct {
					Kind   string `json:"kind"`
					Origin string `json:"origin"`
					Size   int64  `json:"size"`
					Root   string `json:"root"`
					Index  int64  `json:"index"`
					Event  string `json:"event"`
				}
				decodeJSON(t, out, &r, "kind", "origin", "size", "root", "index", "event")
				if r.Kind != "inclusion" || r.Origin != origin || r.Size != 5 || r.Root == "" || r.Index != 3 ||
					!strings.Contains(r.Event, `"event_id":"01JQ001"`) {
					t.Errorf("inclusion check %+v, want 01JQ001 at leaf 3 of %s at size 5", r, origin)
				}
				// The consistency proof, with the export's keys.
				out, _ = g.queryT(t, "audit", "verify-proof", "--proof", consFile, "--old-checkpoint", oldCP, "--keys", exportFile, "--format", "json")
				var c struct {
					Kind    string `json:"kind"`
					Origin  string `json:"origin"`
					Size    int64  `json:"size"`
					Root    string `json:"root"`
					OldSize int64  `json:"old_size"`
				}
				decodeJSON(t, out, &c, "kind", "origin", "size", "root", "old_size")
				if c.Kind != "consistency" || c.Origin != origin || c.Size != 5 || c.OldSize != 2 || c.Root != r.Root {
					t.Errorf("consistency check %+v, want %s from size 2 to 5 (root %s)", c, origin, r.Root)
				}
			},
		},
		"audit verify": {
			args: []string{"audit", "verify", "--stream", "billing-api", "--from", day2, "--to", day1, "--checkpoints", exportFile},
			check: func(t *testing.T, out string) {
				var r struct {
					Origin string `json:"origin"`
					Days   []struct {
						Day    string `json:"day"`
						Status string `json:"status"`
						Start  int64  `json:"start"`
						Size   int64  `json:"size"`
						Events int64  `json:"events"`
					} `json:"days"`
					Problems []json.RawMessage `json:"problems"`
					OK       bool              `json:"ok"`
				}
				decodeJSON(t, out, &r, "origin", "days", "problems", "ok")
				if r.Origin != origin || !r.OK || len(r.Problems) != 0 || len(r.Days) != 2 {
					t.Fatalf("report %+v, want %s ok over two days", r, origin)
				}
				for i, want := range []struct {
					day                 string
					start, size, events int64
				}{{day2, 0, 2, 2}, {day1, 2, 5, 3}} {
					if d := r.Days[i]; d.Day != want.day || d.Status != "ok" || d.Start != want.start || d.Size != want.size || d.Events != want.events {
						t.Errorf("day %d: %+v, want %s ok, leaves %d..%d, %d events", i, d, want.day, want.start, want.size, want.events)
					}
				}
			},
		},
	}
}

// withFormat returns args with --format f before the positional argument
// of sql (flags go first).
func withFormat(args []string, f string) []string {
	out := slices.Clone(args)
	if args[0] == "sql" {
		return slices.Insert(out, len(out)-1, "--format", f)
	}
	return append(out, "--format", f)
}

func compactJSON(t *testing.T, raw json.RawMessage) []byte {
	t.Helper()
	var b bytes.Buffer
	if err := json.Compact(&b, raw); err != nil {
		t.Fatalf("attributes %s: %v", raw, err)
	}
	return b.Bytes()
}

// clickHouseAddr is the test ClickHouse (scripts/servers.sh).
func clickHouseAddr() string {
	if a := os.Getenv("SLUICE_TEST_CLICKHOUSE_ADDR"); a != "" {
		return a
	}
	return "127.0.0.1:9000"
}
