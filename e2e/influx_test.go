package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	influxdb2 "github.com/influxdata/influxdb-client-go/v2"
	influxhttp "github.com/influxdata/influxdb-client-go/v2/api/http"
	"github.com/influxdata/influxdb-client-go/v2/api/write"
	influx1 "github.com/influxdata/influxdb1-client/v2"

	"github.com/sluicehq/sluice/internal/testenv"
)

// The line-protocol tests write through real Influx producers (the
// official Go clients of InfluxDB 2.x and 1.x, mosquitto_pub, and, in the
// long form, Telegraf) to the real gateway binary, and read the readings
// back through the read API.

// storedReading is one reading of GET /v1/readings.
type storedReading struct {
	DeviceID string         `json:"device_id"`
	TS       time.Time      `json:"ts"`
	Metrics  map[string]any `json:"metrics"`
}

// readingsOf returns the readings of device over the last and next day.
func (g *gateway) readingsOf(t *testing.T, device string) []storedReading {
	t.Helper()
	q := url.Values{"device": {device}, "from": {time.Now().Add(-48 * time.Hour).UTC().Format(time.RFC3339)},
		"to": {time.Now().Add(time.Hour).UTC().Format(time.RFC3339)}, "limit": {"10000"}}
	req, err := http.NewRequest(http.MethodGet, g.url+"/v1/readings?"+q.Encode(), nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out struct {
		Readings []storedReading `json:"readings"`
	}
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /v1/readings: %d", resp.StatusCode)
	}
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		t.Fatal(err)
	}
	return out.Readings
}

// TestInfluxClientV2 writes with influxdb-client-go, the official Go client
// of InfluxDB 2.x, to POST /api/v2/write: its blocking write API (points
// and raw lines) and its batching write API, with gzip, changing only the
// URL and the token. Values keep their types; a refused batch comes back
// as the client's error naming the line.
func TestInfluxClientV2(t *testing.T) {
	g := startGateway(t, t.TempDir())
	c := influxdb2.NewClientWithOptions(g.url, token, influxdb2.DefaultOptions().SetUseGZip(true).SetBatchSize(50).SetFlushInterval(100))
	defer c.Close()
	ctx := context.Background()
	if ok, err := c.Ping(ctx); !ok || err != nil {
		t.Fatalf("Ping: %v %v", ok, err)
	}
	base := time.Now().Add(-time.Hour).Truncate(time.Second)

	blocking := c.WriteAPIBlocking("my-org", "my-bucket")
	p := influxdb2.NewPoint("weather", map[string]string{"device": "v2-blocking", "site": "north"},
		map[string]any{"temp": 21.5, "count": int64(7), "ok": true, "state": "running", "u": uint64(9)}, base)
	if err := blocking.WritePoint(ctx, p); err != nil {
		t.Fatalf("WritePoint: %v", err)
	}
	if err := blocking.WriteRecord(ctx, fmt.Sprintf("cpu,host=v2-blocking,cpu=cpu-total usage_idle=97.25 %d", base.Add(time.Second).UnixNano())); err != nil {
		t.Fatalf("WriteRecord: %v", err)
	}
	got := g.readingsOf(t, "v2-blocking")
	if len(got) != 2 || !got[0].TS.Equal(base) || !got[1].TS.Equal(base.Add(time.Second)) {
		t.Fatalf("stored %+v", got)
	}
	want := map[string]any{"weather.temp:site.north": 21.5, "weather.count:site.north": float64(7), "weather.ok:site.north": true,
		"weather.state:site.north": "running", "weather.u:site.north": float64(9)}
	if fmt.Sprint(got[0].Metrics) != fmt.Sprint(want) {
		t.Errorf("metrics %v, want %v", got[0].Metrics, want)
	}
	if got[1].Metrics["cpu.usage_idle:cpu.cpu-total"] != 97.25 {
		t.Errorf("metrics %v", got[1].Metrics)
	}

	// A refused write: the client returns the gateway's message, which
	// names the line.
	err := blocking.WriteRecord(ctx, "m,host=v2-blocking v=1", "m,nohost=x v=2")
	var he *influxhttp.Error
	if !errors.As(err, &he) || he.StatusCode != http.StatusBadRequest || he.Code != "invalid" || !strings.Contains(he.Message, "line 2") {
		t.Fatalf("write of a line without a device: %v, want a 400 invalid naming line 2", err)
	}

	// The batching API: 500 points of 10 devices, flushed in batches of 50.
	async := c.WriteAPI("my-org", "my-bucket")
	errs := async.Errors()
	for i := range 500 {
		async.WritePoint(write.NewPoint("pump", map[string]string{"host": fmt.Sprintf("v2-batch-%d", i%10)},
			map[string]any{"rpm": int64(1000 + i), "temp": 20 + float64(i)/100}, base.Add(time.Duration(i)*time.Millisecond)))
	}
	async.Flush()
	select {
	case err := <-errs:
		t.Fatalf("batching write: %v", err)
	default:
	}
	total := 0
	for d := range 10 {
		rs := g.readingsOf(t, fmt.Sprintf("v2-batch-%d", d))
		total += len(rs)
		for _, r := range rs {
			if len(r.Metrics) != 2 || r.Metrics["pump.rpm"] == nil || r.Metrics["pump.temp"] == nil {
				t.Fatalf("reading %+v", r)
			}
		}
	}
	if total != 500 {
		t.Fatalf("stored %d readings of the batching writes, want 500", total)
	}
}

// TestInfluxClientV1 writes with influxdb1-client, the Go client of
// InfluxDB 1.x, to POST /write: the token as the password, precision s,
// and a refused batch.
func TestInfluxClientV1(t *testing.T) {
	g := startGateway(t, t.TempDir())
	c, err := influx1.NewHTTPClient(influx1.HTTPConfig{Addr: g.url, Username: "telegraf", Password: token})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, _, err := c.Ping(5 * time.Second); err != nil {
		t.Fatalf("Ping: %v", err)
	}
	base := time.Now().Add(-time.Hour).Truncate(time.Second)
	bp, err := influx1.NewBatchPoints(influx1.BatchPointsConfig{Database: "telegraf", RetentionPolicy: "autogen", Precision: "s"})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 20 {
		pt, err := influx1.NewPoint("mem", map[string]string{"host": "v1-host"},
			map[string]any{"used_percent": 40 + float64(i), "free": int64(1000 - i)}, base.Add(time.Duration(i)*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		bp.AddPoint(pt)
	}
	if err := c.Write(bp); err != nil {
		t.Fatalf("Write: %v", err)
	}
	got := g.readingsOf(t, "v1-host")
	if len(got) != 20 || !got[19].TS.Equal(base.Add(19*time.Second)) || got[19].Metrics["mem.free"] != float64(981) || got[19].Metrics["mem.used_percent"] != float64(59) {
		t.Fatalf("stored %d readings, last %+v", len(got), got[len(got)-1])
	}

	bad, _ := influx1.NewBatchPoints(influx1.BatchPointsConfig{Database: "telegraf"})
	pt, _ := influx1.NewPoint("m", map[string]string{"host": "v1-host"}, map[string]any{"big": uint64(1 << 63)}, base)
	bad.AddPoint(pt)
	// The 1.x client returns the body as it is: {"error": "..."}.
	if err := c.Write(bad); err == nil || !strings.Contains(err.Error(), `{"error":"nothing stored: line 1: field \"big\": unsigned integer`) {
		t.Fatalf("write of a uint over int64: %v, want an error naming line 1 and the field", err)
	}
}

// TestInfluxMosquittoPub publishes line protocol with mosquitto_pub to the
// real Mosquitto, on a topic whose filter says influx, and on one that
// says auto (JSON and line protocol both); a line naming another device
// than the topic's becomes a dead letter.
func TestInfluxMosquittoPub(t *testing.T) {
	testenv.Require(t, "mosquitto", testMosquitto)
	pub, err := exec.LookPath("mosquitto_pub")
	if err != nil {
		testenv.Missing(t, "mosquitto_pub is not installed (apt-get install mosquitto-clients)")
	}
	prefix := fmt.Sprintf("e2e-influx-%d", time.Now().UnixNano())
	file := filepath.Join(t.TempDir(), "ingest.yaml")
	write := func(kind string) {
		c := fmt.Sprintf(`mqtt:
  enabled: true
  brokers: ["tcp://%s"]
  client_id: %s-%s
  tenant: acme
  topics:
    - filter: %s/%s/+/readings
      qos: 1
      payload_format: %s
  topic_template: %s/%s/{device_id}/readings
`, testMosquitto, prefix, kind, prefix, kind, kind, prefix, kind)
		if err := os.WriteFile(file, []byte(c), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	base := time.Now().Add(-time.Hour).Truncate(time.Second)
	publish := func(topic, payload string) {
		t.Helper()
		out, err := exec.Command(pub, "-h", "127.0.0.1", "-p", strings.TrimPrefix(testMosquitto, "127.0.0.1:"),
			"-q", "1", "-t", topic, "-m", payload).CombinedOutput()
		if err != nil {
			t.Fatalf("mosquitto_pub: %v\n%s", err, out)
		}
	}

	write("influx")
	g := startGateway(t, t.TempDir(), "SLUICE_CONFIG="+file)
	g.waitLog("mqtt subscribed")
	lines := fmt.Sprintf("cpu,host=lp-dev-1,cpu=cpu0 usage_user=3.5,usage_idle=96.5 %d\nsystem,host=lp-dev-1 uptime=1234i,load1=0.25 %d\n",
		base.UnixNano(), base.UnixNano())
	publish(prefix+"/influx/lp-dev-1/readings", lines)
	publish(prefix+"/influx/lp-dev-1/readings", fmt.Sprintf("disk used=1i %d", base.Add(time.Second).UnixNano()))
	publish(prefix+"/influx/lp-dev-1/readings", fmt.Sprintf("disk,host=someone-else used=1i %d", base.Add(2*time.Second).UnixNano()))
	var got []storedReading
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		if got = g.readingsOf(t, "lp-dev-1"); len(got) == 2 && g.metric("sluice_mqtt_lineprotocol_messages_total") >= 3 {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	want := fmt.Sprint([]map[string]any{
		{"cpu.usage_idle:cpu.cpu0": 96.5, "cpu.usage_user:cpu.cpu0": 3.5, "system.load1": 0.25, "system.uptime": float64(1234)},
		{"disk.used": float64(1)}})
	if len(got) != 2 || fmt.Sprint([]map[string]any{got[0].Metrics, got[1].Metrics}) != want {
		t.Fatalf("stored %+v, want metrics %s\n%s", got, want, g.logs())
	}
	out, _ := g.query("deadletters", "--from", day(1).Format(time.RFC3339), "--to", day(-1).Format(time.RFC3339))
	if !strings.Contains(out, "device_mismatch") {
		t.Errorf("dead letters: want a device_mismatch one:\n%s", out)
	}
	g.stop()

	// auto: JSON and line protocol on the same topics.
	write("auto")
	g = startGateway(t, t.TempDir(), "SLUICE_CONFIG="+file)
	g.waitLog("mqtt subscribed")
	publish(prefix+"/auto/lp-dev-2/readings", fmt.Sprintf(`{"ts":%d,"metrics":{"json_v":1}}`, base.UnixMilli()))
	publish(prefix+"/auto/lp-dev-2/readings", fmt.Sprintf("m lp_v=2 %d", base.Add(time.Second).UnixNano()))
	deadline = time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		if got = g.readingsOf(t, "lp-dev-2"); len(got) == 2 {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if len(got) != 2 || got[0].Metrics["json_v"] != float64(1) || got[1].Metrics["m.lp_v"] != float64(2) {
		t.Fatalf("auto: stored %+v\n%s", got, g.logs())
	}
}

// telegrafVersion is the Telegraf release the long form builds.
const telegrafVersion = "v1.37.2"

// telegrafTags are the build tags of a Telegraf with only the plugins the
// test uses (Telegraf's custom builds), which keeps its build to minutes.
const telegrafTags = "custom,inputs.file,parsers.influx,outputs.influxdb_v2,outputs.influxdb,outputs.mqtt,serializers.influx"

// TestTelegraf (long form: -sluice.long) builds Telegraf from its Go module
// and runs it once against the gateway: inputs.file reads line protocol,
// and outputs.influxdb_v2, outputs.influxdb and outputs.mqtt (data_format
// influx, through the real Mosquitto) each write their share of it, with
// only the URL and the token changed from an InfluxDB setup. When the long
// form is asked for and Telegraf cannot be built, the test fails.
func TestTelegraf(t *testing.T) {
	if !longForm() {
		t.Skip("long form: go test ./e2e -run TestTelegraf -sluice.long (builds Telegraf " + telegrafVersion + " from the Go module proxy)")
	}
	// Asked for, the long form fails rather than skips without its broker.
	if c, err := net.DialTimeout("tcp", testMosquitto, 2*time.Second); err != nil {
		t.Fatalf("long form: mosquitto is not reachable on %s (%v); start it with: bash scripts/servers.sh up mosquitto", testMosquitto, err)
	} else {
		_ = c.Close()
	}
	gobin := t.TempDir()
	build := exec.Command("go", "install", "-tags", telegrafTags, "github.com/influxdata/telegraf/cmd/telegraf@"+telegrafVersion)
	build.Env = append(os.Environ(), "GOBIN="+gobin, "GOFLAGS=")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build Telegraf %s (needs the Go module proxy): %v\n%s", telegrafVersion, err, out)
	}

	prefix := fmt.Sprintf("e2e-telegraf-%d", time.Now().UnixNano())
	dir := t.TempDir()
	cfgFile := filepath.Join(dir, "ingest.yaml")
	if err := os.WriteFile(cfgFile, fmt.Appendf(nil, `mqtt:
  enabled: true
  brokers: ["tcp://%s"]
  client_id: %s
  tenant: acme
  topics:
    - filter: %s/+/metrics
      qos: 1
      payload_format: influx
  topic_template: %s/{device_id}/metrics
`, testMosquitto, prefix, prefix, prefix), 0o600); err != nil {
		t.Fatal(err)
	}
	g := startGateway(t, t.TempDir(), "SLUICE_CONFIG="+cfgFile)
	g.waitLog("mqtt subscribed")

	// Whole seconds: Telegraf rounds the times of what it collects to its
	// agent precision (1s by default).
	base := time.Now().Add(-time.Minute).Truncate(time.Second)
	var lp strings.Builder
	for i := range 5 {
		ts := base.Add(time.Duration(i) * time.Second).UnixNano()
		fmt.Fprintf(&lp, "v2cpu,host=tg-dev,cpu=cpu-total usage_idle=%d.5,procs=%di %d\n", 90+i, 100+i, ts)
		fmt.Fprintf(&lp, "v1mem,host=tg-dev used_percent=%d.25,ok=true %d\n", 40+i, ts)
		fmt.Fprintf(&lp, "mqdisk,host=tg-dev,path=/ used=%di %d\n", 1000+i, ts)
	}
	input := filepath.Join(dir, "metrics.lp")
	if err := os.WriteFile(input, []byte(lp.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	conf := filepath.Join(dir, "telegraf.conf")
	if err := os.WriteFile(conf, fmt.Appendf(nil, `[agent]
  omit_hostname = true
  flush_interval = "1s"

[[inputs.file]]
  files = [%q]
  data_format = "influx"

[[outputs.influxdb_v2]]
  urls = [%q]
  token = %q
  organization = "my-org"
  bucket = "my-bucket"
  namepass = ["v2*"]

[[outputs.influxdb]]
  urls = [%q]
  database = "telegraf"
  username = "telegraf"
  password = %q
  namepass = ["v1*"]

[[outputs.mqtt]]
  servers = ["tcp://%s"]
  topic = "%s/tg-dev/metrics"
  qos = 1
  data_format = "influx"
  namepass = ["mq*"]
`, input, g.url, token, g.url, token, testMosquitto, prefix), 0o600); err != nil {
		t.Fatal(err)
	}
	run := exec.Command(filepath.Join(gobin, "telegraf"), "--config", conf, "--once")
	out, err := run.CombinedOutput()
	if err != nil {
		t.Fatalf("telegraf --once: %v\n%s", err, out)
	}
	// outputs.influxdb creates its database first: that must not fail,
	// nor any output warn (Telegraf's own deprecation notices aside).
	for line := range strings.Lines(string(out)) {
		if strings.Contains(line, "E!") || strings.Contains(line, "W!") && strings.Contains(line, "[outputs.") {
			t.Errorf("telegraf: %s", line)
		}
	}

	var got []storedReading
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		if got = g.readingsOf(t, "tg-dev"); len(got) == 5 && len(got[4].Metrics) == 5 {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if len(got) != 5 {
		t.Fatalf("stored %d readings, want 5: %+v\n%s", len(got), got, g.logs())
	}
	for i, r := range got {
		want := fmt.Sprint(map[string]any{
			"mqdisk.used:path.-2f":           float64(1000 + i),
			"v1mem.ok":                       true,
			"v1mem.used_percent":             float64(40+i) + 0.25,
			"v2cpu.procs:cpu.cpu-total":      float64(100 + i),
			"v2cpu.usage_idle:cpu.cpu-total": float64(90+i) + 0.5,
		})
		if !r.TS.Equal(base.Add(time.Duration(i)*time.Second)) || fmt.Sprint(r.Metrics) != want {
			t.Errorf("reading %d: %v %v, want %v", i, r.TS, r.Metrics, want)
		}
	}
}
