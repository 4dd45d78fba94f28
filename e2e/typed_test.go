package e2e

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/testenv"
	"github.com/sluicehq/sluice/internal/wire"
)

// TestTypedValues sends readings with float, bool and string metrics over
// HTTP (JSON and NDJSON) and over MQTT (the embedded broker), on the
// embedded store and on Cassandra, and reads them back through the query
// binary in JSON (types kept), CSV and table form.
func TestTypedValues(t *testing.T) {
	for _, backend := range []string{"pebble", "cassandra"} {
		t.Run(backend, func(t *testing.T) {
			var env []string
			if backend == "cassandra" {
				env = cassandraEnv(t)
				if _, errOut, err := runBin(t, env, "ingest", "migrate"); err != nil {
					t.Fatalf("ingest migrate: %v\n%s", err, errOut)
				}
			}
			addr := testenv.FreeAddr(t)
			g := startMQTTGateway(t, t.TempDir(), addr, env...)
			base := day(1).Add(8 * time.Hour)
			at := func(s int) string { return base.Add(time.Duration(s) * time.Second).Format(time.RFC3339) }

			// HTTP: a type that changes from reading to reading is kept
			// per reading.
			body := fmt.Sprintf(`[{"device_id":"door-3","ts":%q,"metrics":{"temp_c":21.5,"open":true,"fw":"1.4.2","state":"idle"}},
{"device_id":"door-3","ts":%q,"metrics":{"temp_c":21,"open":false,"fw":"1.4.3","state":2}}]`, at(0), at(1))
			if status, resp := g.post("/v1/readings", "application/json", []byte(body)); status != 202 {
				t.Fatalf("POST typed readings: %d %s", status, resp)
			}
			nd := fmt.Sprintf(`{"device_id":"door-3","ts":%q,"metrics":{"note":"caf\u00e9 \"q\"","state":"\u00e9t\u00e9"}}`+"\n", at(2))
			if status, resp := g.post("/v1/readings", "application/x-ndjson", []byte(nd)); status != 202 {
				t.Fatalf("POST typed NDJSON: %d %s", status, resp)
			}
			// A bad value is refused whole, naming the row and the metric.
			bad := fmt.Sprintf(`[{"device_id":"door-3","ts":%q,"metrics":{"a":1}},{"device_id":"door-3","ts":%q,"metrics":{"state":null}}]`, at(3), at(4))
			if status, resp := g.post("/v1/readings", "application/json", []byte(bad)); status != 400 ||
				!strings.Contains(resp, "row 1") || !strings.Contains(resp, "metrics.state") || !strings.Contains(resp, "got null") {
				t.Fatalf("POST a null metric: %d %s", status, resp)
			}
			// MQTT, the device's own topic.
			dev := device(t, addr)
			if !publishAcked(dev, fmt.Sprintf(`{"ts":%q,"metrics":{"online":true,"mode":"eco","rpm":900}}`, at(5))) {
				t.Fatal("typed MQTT message not acknowledged")
			}

			from, to := day(1).Format(time.RFC3339), day(0).Format(time.RFC3339)
			want := map[string]string{
				"door-3": `[{"ts":"` + ms(at(0)) + `","metrics":{"fw":"1.4.2","open":true,"state":"idle","temp_c":21.5}},` +
					`{"ts":"` + ms(at(1)) + `","metrics":{"fw":"1.4.3","open":false,"state":2.0,"temp_c":21.0}},` +
					`{"ts":"` + ms(at(2)) + `","metrics":{"note":"café \"q\"","state":"été"}}]`,
				mqttDevice: `[{"ts":"` + ms(at(5)) + `","metrics":{"mode":"eco","online":true,"rpm":900.0}}]`,
			}
			for dev, w := range want {
				w = strings.ReplaceAll(w, `{"ts":`, `{"device_id":"","ts":`)
				deadline := time.Now().Add(20 * time.Second)
				for {
					out, _ := g.query("readings", "--device", dev, "--from", from, "--to", to, "--format", "json")
					var page wire.ReadingsPage
					decodeJSON(t, out, &page, "readings")
					for i := range page.Readings {
						page.Readings[i].DeviceID = ""
					}
					got := string(mustJSON(t, page.Readings))
					if got == w {
						break
					}
					if time.Now().After(deadline) { // MQTT is stored a moment after the PUBACK
						t.Fatalf("%s read back as\n%s\nwant\n%s", dev, got, w)
					}
					time.Sleep(100 * time.Millisecond)
				}
			}
			out, _ := g.query("readings", "--device", "door-3", "--from", from, "--to", to, "--format", "csv")
			wantCSV := "ts,fw,note,open,state,temp_c,seq\n" +
				ms(at(0)) + `,"""1.4.2""",,true,"""idle""",21.5,` + "\n" +
				ms(at(1)) + `,"""1.4.3""",,false,2,21,` + "\n" +
				ms(at(2)) + `,,"""café \""q\""""",,"""été""",,` + "\n"
			if out != wantCSV {
				t.Errorf("query readings --format csv:\n%s\nwant:\n%s", out, wantCSV)
			}
			g.stop()
		})
	}
}

// ms writes an RFC 3339 time the way the read API does (milliseconds).
func ms(rfc3339 string) string {
	ts, err := time.Parse(time.RFC3339, rfc3339)
	if err != nil {
		panic(err)
	}
	return ts.UTC().Format(wire.TimeFormat)
}
