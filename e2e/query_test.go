package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

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
// store, embedded broker for a dead letter) and checks what each prints,
// then runs each again with every other format help names for it.
func TestQueryEveryCommandJSON(t *testing.T) {
	addr := testenv.FreeAddr(t)
	g := startMQTTGateway(t, t.TempDir(), addr)

	// 30 readings of pump-17 (rpm 1000..1029) and of pump-18 (rpm
	// 1100..1129), one a second from 10:00 yesterday; three audit events;
	// one malformed MQTT message.
	const n = 30
	base := day(1).Add(10 * time.Hour)
	var body strings.Builder
	for i := range n {
		fmt.Fprintln(&body, reading("pump-17", base.Add(time.Duration(i)*time.Second), i))
		fmt.Fprintln(&body, reading("pump-18", base.Add(time.Duration(i)*time.Second), 100+i))
	}
	if status, resp := g.post("/v1/readings", "application/x-ndjson", []byte(body.String())); status != 202 {
		t.Fatalf("POST readings: %d %s", status, resp)
	}
	var events strings.Builder
	for i := range 3 {
		fmt.Fprintf(&events, `{"event_id":"01JQ%03d","stream":"billing-api","ts":%q,"action":"invoice.refund","attributes":{"amount":%d}}`+"\n",
			i, base.Add(time.Duration(i)*time.Minute).Format(time.RFC3339), i)
	}
	if status, resp := g.post("/v1/audit", "application/x-ndjson", []byte(events.String())); status != 202 {
		t.Fatalf("POST audit: %d %s", status, resp)
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
	order := []string{"rollups rebuild", "rollups verify", "rollups", "top", "readings", "audit", "partitions", "deadletters", "sql"}
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
				want := wire.Bucket{Start: bucketStart, Count: n, Sum: n*1000 + n*(n-1)/2, Min: 1000, Max: 1000 + n - 1,
					Mean: 1000 + float64(n-1)/2, First: 1000, FirstTS: bucketStart,
					Last: 1000 + n - 1, LastTS: base.Add((n - 1) * time.Second).UTC().Format(wire.TimeFormat)}
				if s.Device != "pump-17" || s.Metric != "rpm" || s.Step != "1h" || len(s.Buckets) != 1 || s.Buckets[0] != want {
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
					l.Devices[0].Device != "pump-18" || l.Devices[0].Max != 1100+n-1 || l.Devices[0].Count != n ||
					l.Devices[1].Device != "pump-17" || l.Devices[1].Max != 1000+n-1 {
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
					r.Seq == nil || *r.Seq != n-1 || r.Metrics["rpm"] != 1000+n-1 || len(r.Metrics) != 2 {
					t.Errorf("last reading %+v, want pump-17 seq %d rpm %d", r, n-1, 1000+n-1)
				}
			},
		},
		"audit": {
			args: []string{"audit", "--stream", "billing-api", "--from", from, "--to", to},
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
