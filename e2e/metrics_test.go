package e2e

import (
	"cmp"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	mqtt "github.com/eclipse/paho.mqtt.golang"

	"github.com/sluicehq/sluice/internal/testenv"
)

const (
	alertRules     = "../deploy/prometheus/alerts.yml"
	alertRuleTests = "../deploy/prometheus/alerts_test.yml"
)

// testMosquitto is the broker of scripts/servers.sh.
var testMosquitto = "127.0.0.1:" + cmp.Or(os.Getenv("SLUICE_MQTT_PORT"), "1883")

// promtool returns the path of Prometheus's promtool, or stops the test
// (skips; fails under CI=true) when it is not installed.
func promtool(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("promtool")
	if err != nil {
		testenv.Missing(t, "promtool not found (it checks deploy/prometheus/alerts.yml); install it with: bash scripts/servers.sh tools")
	}
	return p
}

// TestAlertRules parses the alert rules with Prometheus's own parser and
// runs their unit tests (every alert fires on its symptom, and not on
// normal series).
func TestAlertRules(t *testing.T) {
	pt := promtool(t)
	for _, args := range [][]string{{"check", "rules", alertRules}, {"test", "rules", alertRuleTests}} {
		out, err := exec.Command(pt, args...).CombinedOutput()
		if err != nil {
			t.Errorf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
}

// alertMetrics returns the sluice_ metric names the alert rules mention.
func alertMetrics(t *testing.T) []string {
	t.Helper()
	b, err := os.ReadFile(alertRules)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, n := range regexp.MustCompile(`\bsluice_[a-z0-9_]*[a-z0-9]`).FindAllString(string(b), -1) {
		if !slices.Contains(names, n) {
			names = append(names, n)
		}
	}
	if len(names) < 10 {
		t.Fatalf("found only %d metric names in %s: %v", len(names), alertRules, names)
	}
	return names
}

// sample is one series of a /metrics answer: a histogram's buckets, sum
// and count are samples of their own (name_bucket, name_sum, name_count).
type sample struct {
	name   string
	labels map[string]string
	value  float64
}

var (
	sampleLine = regexp.MustCompile(`^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)(?: \d+)?$`)
	labelPair  = regexp.MustCompile(`([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"`)
)

// scrape returns the series of the gateway's /metrics.
func (g *gateway) scrape() []sample {
	g.t.Helper()
	resp, err := http.Get(g.url + "/metrics")
	if err != nil {
		g.t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		g.t.Fatal(err)
	}
	var out []sample
	for line := range strings.Lines(string(body)) {
		line = strings.TrimSuffix(line, "\n")
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		m := sampleLine.FindStringSubmatch(line)
		if m == nil {
			g.t.Fatalf("/metrics line not understood: %q", line)
		}
		v, err := strconv.ParseFloat(m[3], 64)
		if err != nil {
			g.t.Fatalf("/metrics line %q: %v", line, err)
		}
		s := sample{name: m[1], labels: map[string]string{}, value: v}
		for _, lp := range labelPair.FindAllStringSubmatch(m[2], -1) {
			s.labels[lp[1]] = lp[2]
		}
		out = append(out, s)
	}
	if len(out) == 0 {
		g.t.Fatalf("/metrics has no series:\n%s", body)
	}
	return out
}

// exported reports whether a series of that name (a histogram's name_bucket,
// name_sum, name_count included) is in ss.
func exported(ss []sample, name string) bool {
	return slices.ContainsFunc(ss, func(s sample) bool { return s.name == name })
}

// sum adds the values of the series of that name.
func sum(ss []sample, name string) float64 {
	var v float64
	for _, s := range ss {
		if s.name == name {
			v += s.value
		}
	}
	return v
}

// mqttSubscriberConfig writes a config for a gateway that subscribes to the
// test Mosquitto on a topic of its own.
func mqttSubscriberConfig(t *testing.T, prefix string) string {
	t.Helper()
	cfg := fmt.Sprintf(`mqtt:
  enabled: true
  brokers: ["tcp://%s"]
  client_id: %s
  tenant: acme
  topics:
    - filter: %s/devices/+/readings
      qos: 1
  topic_template: %s/devices/{device_id}/readings
`, testMosquitto, prefix, prefix, prefix)
	file := filepath.Join(t.TempDir(), "ingest.yaml")
	if err := os.WriteFile(file, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	return file
}

// TestAlertMetricsExported starts the real gateway as an operator would
// run it (embedded store, rollups and retention on, subscribed to an MQTT
// broker), makes it refuse a request and dead-letter a message (labelled
// counters appear with their first label values), and checks that every
// metric the alert rules use is on its /metrics.
func TestAlertMetricsExported(t *testing.T) {
	testenv.Require(t, "mosquitto", testMosquitto)
	names := alertMetrics(t)
	prefix := fmt.Sprintf("e2e-alerts-%d", time.Now().UnixNano())
	g := startGateway(t, t.TempDir(), "SLUICE_CONFIG="+mqttSubscriberConfig(t, prefix))
	g.waitLog("mqtt subscribed") // messages published before are not delivered

	if status, body := g.post("/v1/readings", "application/x-ndjson", []byte(`{"device_id": 7}`+"\n")); status != http.StatusBadRequest {
		t.Fatalf("invalid reading: %d %s, want 400", status, body)
	}
	o := mqtt.NewClientOptions().AddBroker("tcp://" + testMosquitto).SetClientID(prefix + "-device").
		SetCleanSession(true).SetAutoReconnect(false).SetConnectTimeout(5 * time.Second)
	c := mqtt.NewClient(o)
	if tok := c.Connect(); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
		t.Fatalf("connect to %s: %v", testMosquitto, tok.Error())
	}
	defer c.Disconnect(0)
	if tok := c.Publish(prefix+"/devices/d1/readings", 1, false, "not json"); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
		t.Fatalf("publish: %v", tok.Error())
	}

	var missing []string
	deadline := time.Now().Add(30 * time.Second)
	for {
		ss := g.scrape()
		missing = missing[:0]
		for _, n := range names {
			if !exported(ss, n) {
				missing = append(missing, n)
			}
		}
		if len(missing) == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if len(missing) > 0 {
		t.Errorf("metrics the alert rules use but the gateway does not export: %v\n%s", missing, g.logs())
	}
}

// TestMetricLabelsBounded writes one reading each for 10,001 devices (and
// audit events of 200 streams, and a few MQTT messages) through the real
// gateway: no label value of any metric names a device, stream, actor or
// topic, and the number of series hardly moves.
func TestMetricLabelsBounded(t *testing.T) {
	testenv.Require(t, "mosquitto", testMosquitto)
	const devices = 10_001
	prefix := fmt.Sprintf("e2e-labels-%d", time.Now().UnixNano())
	g := startGateway(t, t.TempDir(), "SLUICE_CONFIG="+mqttSubscriberConfig(t, prefix))
	g.waitLog("mqtt subscribed")
	// One write of each kind first, so that the series every write creates
	// (per kind, per reason) are there before counting.
	devID := func(i int) string { return fmt.Sprintf("labels-dev-%05d", i) }
	ts := time.Now().UTC().Add(-time.Minute).Format(time.RFC3339Nano)
	if status, body := g.post("/v1/readings", "application/x-ndjson",
		fmt.Appendf(nil, `{"device_id":%q,"ts":%q,"metrics":{"v":1}}`+"\n", devID(0), ts)); status != http.StatusAccepted {
		t.Fatalf("first write: %d %s", status, body)
	}
	before := len(g.scrape())

	const perRequest = 2_500
	for from := 1; from < devices; from += perRequest {
		var body strings.Builder
		for i := from; i < min(from+perRequest, devices); i++ {
			fmt.Fprintf(&body, `{"device_id":%q,"ts":%q,"metrics":{"v":%d,"w":%d}}`+"\n", devID(i), ts, i, i%7)
		}
		if status, resp := g.post("/v1/readings", "application/x-ndjson", []byte(body.String())); status != http.StatusAccepted {
			t.Fatalf("write devices %d..: %d %s", from, status, resp)
		}
	}
	// Audit events of many streams.
	var events strings.Builder
	for i := range 200 {
		fmt.Fprintf(&events, `{"stream":"labels-dev-stream-%d","event_id":"e%d","ts":%q,"actor":"labels-dev-actor-%d","action":"open"}`+"\n", i, i, ts, i)
	}
	if status, resp := g.post("/v1/audit", "application/x-ndjson", []byte(events.String())); status != http.StatusAccepted {
		t.Fatalf("write audit events: %d %s", status, resp)
	}
	// MQTT: a few devices' readings and one dead letter each.
	o := mqtt.NewClientOptions().AddBroker("tcp://" + testMosquitto).SetClientID(prefix + "-device").
		SetCleanSession(true).SetAutoReconnect(false).SetConnectTimeout(5 * time.Second)
	c := mqtt.NewClient(o)
	if tok := c.Connect(); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
		t.Fatalf("connect to %s: %v", testMosquitto, tok.Error())
	}
	defer c.Disconnect(0)
	const mqttDevices = 20
	for i := range mqttDevices {
		topic := prefix + "/devices/" + devID(devices+i) + "/readings"
		for _, payload := range []string{fmt.Sprintf(`{"ts":%q,"metrics":{"v":%d}}`, ts, i), "not json"} {
			if tok := c.Publish(topic, 1, false, payload); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
				t.Fatalf("publish: %v", tok.Error())
			}
		}
	}
	deadline := time.Now().Add(30 * time.Second)
	for g.metric("sluice_mqtt_messages_stored_total") < 2*mqttDevices {
		if time.Now().After(deadline) {
			t.Fatalf("MQTT messages not stored within 30s:\n%s", g.logs())
		}
		time.Sleep(50 * time.Millisecond)
	}

	ss := g.scrape()
	if got := sum(ss, "sluice_sink_rows_written_total"); got < 2*(devices-1) {
		t.Fatalf("sluice_sink_rows_written_total %v, want at least %d rows", got, 2*(devices-1))
	}
	for _, s := range ss {
		for k, v := range s.labels {
			if strings.Contains(v, "labels-dev-") || strings.Contains(v, prefix) {
				t.Errorf("metric %s has label %s=%q: a device id or topic in a label", s.name, k, v)
			}
		}
	}
	after := len(ss)
	// New series may appear for the MQTT side (dead letters by reason) and
	// for histograms' first buckets, never per device: a few dozen at most.
	if after-before > 50 {
		t.Errorf("series grew from %d to %d for %d devices; some label grows with devices", before, after, devices+mqttDevices)
	}
	t.Logf("%d series before, %d after writing %d devices", before, after, devices+mqttDevices)
}

// TestMetricsDocumented checks the metrics reference against the code both
// ways: every metric the code registers (a Name: "sluice_..." in a
// non-test source file) is named in docs/operations.md, and every
// sluice_ metric the document names is registered.
func TestMetricsDocumented(t *testing.T) {
	const doc = "../docs/operations.md"
	registered := map[string]bool{}
	nameField := regexp.MustCompile(`Name:\s*"(sluice_[a-z0-9_]+)"`)
	// A Pebble database's metrics (package pebblemetrics) are a Prefix:
	// "sluice_..." where it is registered and each family's suffix.
	prefixField := regexp.MustCompile(`Prefix:\s*"(sluice_[a-z0-9_]+)"`)
	suffixField := regexp.MustCompile(`suffix:\s*"(_[a-z0-9_]+)"`)
	var prefixes, suffixes []string
	for _, root := range []string{"../internal", "../cmd"} {
		err := filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
			if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
				return err
			}
			b, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			for _, m := range nameField.FindAllStringSubmatch(string(b), -1) {
				registered[m[1]] = true
			}
			for _, m := range prefixField.FindAllStringSubmatch(string(b), -1) {
				prefixes = append(prefixes, m[1])
			}
			for _, m := range suffixField.FindAllStringSubmatch(string(b), -1) {
				suffixes = append(suffixes, m[1])
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	if len(prefixes) < 2 || len(suffixes) < 10 {
		t.Fatalf("found %d Pebble databases' prefixes and %d suffixes: %v, %v", len(prefixes), len(suffixes), prefixes, suffixes)
	}
	for _, p := range prefixes {
		for _, sfx := range suffixes {
			registered[p+sfx] = true
		}
	}
	if len(registered) < 30 {
		t.Fatalf("found only %d registered metrics: %v", len(registered), registered)
	}
	b, err := os.ReadFile(doc)
	if err != nil {
		t.Fatal(err)
	}
	documented := map[string]bool{}
	for _, n := range regexp.MustCompile(`\bsluice_[a-z0-9_]*[a-z0-9]`).FindAllString(string(b), -1) {
		for _, suffix := range []string{"_bucket", "_sum", "_count"} {
			if base, ok := strings.CutSuffix(n, suffix); ok && registered[base] {
				n = base
			}
		}
		documented[n] = true
	}
	for n := range registered {
		if !documented[n] {
			t.Errorf("metric %s is registered but not described in %s", n, doc)
		}
	}
	for n := range documented {
		if !registered[n] {
			t.Errorf("%s names metric %s, which no code registers", doc, n)
		}
	}
}
