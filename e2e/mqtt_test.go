package e2e

import (
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	mqtt "github.com/eclipse/paho.mqtt.golang"

	"github.com/sluicehq/sluice/internal/testenv"
)

// The MQTT tests run the gateway with its embedded broker (no external
// server needed) and publish as a device account of that broker.
const (
	mqttDevice   = "pump-1"
	mqttPassword = "pump-1-password"
	mqttTopic    = "devices/" + mqttDevice + "/readings"
)

// startMQTTGateway runs ingest with the embedded broker on brokerAddr, one
// device account, and MQTT readings filed under the test token's tenant;
// it returns once the gateway is ready (the broker listens before that).
func startMQTTGateway(t *testing.T, dataDir, brokerAddr string, env ...string) *gateway {
	t.Helper()
	cfg := fmt.Sprintf(`mqtt:
  client_id: sluice-e2e
  tenant: acme
  embedded:
    enabled: true
    listen: %q
    users:
      - username: %s
        password: %s
        device_id: %s
`, brokerAddr, mqttDevice, mqttPassword, mqttDevice)
	file := filepath.Join(t.TempDir(), "ingest.yaml")
	if err := os.WriteFile(file, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	g := startGateway(t, dataDir, append([]string{"SLUICE_CONFIG=" + file}, env...)...)
	g.waitLog("embedded mqtt broker listening")
	return g
}

// waitLog waits until the gateway logged a line containing s.
func (g *gateway) waitLog(s string) {
	g.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !strings.Contains(g.logs(), s) {
		if time.Now().After(deadline) {
			g.t.Fatalf("gateway did not log %q within 30s:\n%s", s, g.logs())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// kill stops the gateway with SIGKILL: no shutdown code runs.
func (g *gateway) kill() {
	g.t.Helper()
	if err := g.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		g.t.Fatal(err)
	}
	<-g.exited
}

// metric returns the value of one counter or gauge sample of /metrics,
// given as exposed: its name, and its labels if any (`name{k="v",…}`).
func (g *gateway) metric(sample string) float64 {
	g.t.Helper()
	return g.metricOf(g.scrape(), sample)
}

// metricOf is metric of samples scraped once for several reads.
func (g *gateway) metricOf(ss []sample, sample string) float64 {
	g.t.Helper()
	name, labels, _ := strings.Cut(sample, "{")
	want := map[string]string{}
	for _, lp := range labelPair.FindAllStringSubmatch(labels, -1) {
		want[lp[1]] = lp[2]
	}
	for _, s := range ss {
		if s.name == name && maps.Equal(s.labels, want) {
			return s.value
		}
	}
	g.t.Fatalf("metric %s not exposed", sample)
	return 0
}

// metricSum returns the sum of every sample of the metric family name
// (all label values; 0 when none was observed yet).
func (g *gateway) metricSum(name string) float64 {
	g.t.Helper()
	return sum(g.scrape(), name)
}

// device connects to the embedded broker as the device account.
func device(t *testing.T, brokerAddr string) mqtt.Client {
	t.Helper()
	o := mqtt.NewClientOptions().AddBroker("tcp://" + brokerAddr).SetClientID("e2e-" + mqttDevice).
		SetUsername(mqttDevice).SetPassword(mqttPassword).SetCleanSession(true).SetAutoReconnect(false).
		SetConnectTimeout(5 * time.Second).SetWriteTimeout(5 * time.Second)
	c := mqtt.NewClient(o)
	if tok := c.Connect(); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
		t.Fatalf("device connect to %s: %v", brokerAddr, tok.Error())
	}
	t.Cleanup(func() { c.Disconnect(0) })
	return c
}

// publishAcked publishes at QoS 1 and reports whether the broker
// acknowledged the message.
func publishAcked(c mqtt.Client, payload string) bool {
	tok := c.Publish(mqttTopic, 1, false, payload)
	return tok.WaitTimeout(10*time.Second) && tok.Error() == nil
}

// storedSeqs returns the seq column of every reading of the device, in
// timestamp order, read through the query binary.
func storedSeqs(g *gateway) []int {
	g.t.Helper()
	out, _ := g.query("readings", "--device", mqttDevice, "--from", day(1).Format(time.RFC3339),
		"--to", day(-1).Format(time.RFC3339), "--all", "--format", "csv")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) == 0 || lines[0] != "ts,rpm,temp_c,seq" {
		g.t.Fatalf("query readings: unexpected output:\n%s", head(out))
	}
	var seqs []int
	for _, l := range lines[1:] {
		f := strings.Split(l, ",")
		n, err := strconv.Atoi(f[len(f)-1])
		if err != nil {
			g.t.Fatalf("query readings: bad line %q", l)
		}
		seqs = append(seqs, n)
	}
	return seqs
}

func TestMQTTEmbeddedReadingsAndDeadLetters(t *testing.T) {
	addr := testenv.FreeAddr(t)
	g := startMQTTGateway(t, t.TempDir(), addr)
	dev := device(t, addr)
	base := day(1).Add(9 * time.Hour)
	const n, poisonAt = 40, 17
	const poison = `{"ts": not-json, "metrics": {` // malformed JSON
	var idx []int
	for i := range n {
		if i == poisonAt {
			if !publishAcked(dev, poison) {
				t.Fatal("poison message not acknowledged by the broker")
			}
		}
		// device_id is optional over MQTT: every other message leaves it out.
		p := reading(mqttDevice, base.Add(time.Duration(i)*time.Second), i)
		if i%2 == 1 {
			p = strings.Replace(p, `"device_id":"`+mqttDevice+`",`, "", 1)
		}
		if !publishAcked(dev, p) {
			t.Fatalf("message %d not acknowledged by the broker", i)
		}
		idx = append(idx, i)
	}
	// Acknowledged means stored: read at once, no polling.
	from, to := day(1).Format(time.RFC3339), day(-1).Format(time.RFC3339)
	out, _ := g.query("readings", "--device", mqttDevice, "--from", from, "--to", to, "--all", "--format", "csv")
	if want := expectedCSV(base, idx); out != want {
		t.Fatalf("query readings:\n%s\nwant:\n%s", head(out), head(want))
	}

	// The poison message is a dead letter, stored before it was
	// acknowledged.
	out, _ = g.query("deadletters", "--from", day(1).Format(time.RFC3339), "--all", "--format", "json")
	var got struct {
		DeadLetters []struct {
			Source, Topic, Reason, Error, Payload string
		} `json:"dead_letters"`
	}
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatalf("query deadletters --format json: %v\n%s", err, out)
	}
	if len(got.DeadLetters) != 1 {
		t.Fatalf("want exactly 1 dead letter, got %d:\n%s", len(got.DeadLetters), out)
	}
	dl := got.DeadLetters[0]
	if dl.Source != "mqtt" || dl.Topic != mqttTopic || dl.Reason != "invalid_json" || dl.Payload != poison || dl.Error == "" {
		t.Fatalf("dead letter: %+v", dl)
	}
	table, _ := g.query("deadletters", "--from", day(1).Format(time.RFC3339))
	if !strings.Contains(table, "invalid_json") || !strings.Contains(table, mqttTopic) {
		t.Fatalf("query deadletters (table) does not show the dead letter:\n%s", table)
	}
	g.stop()
}

// TestMQTTEmbeddedKillRestart kills the gateway (and so its embedded
// broker) with SIGKILL while a device publishes, restarts it on the same
// data directory, and checks the embedded broker's promise: a message the
// device was acknowledged is already durable, so every acknowledged message
// is stored before the device publishes again; the message it was not
// acknowledged it sends again, and in the end every message is stored
// exactly once. A sink linger keeps each message for a while between its
// receipt and the durable commit (the broker acknowledges only after the
// commit), so the kill usually lands inside that window.
func TestMQTTEmbeddedKillRestart(t *testing.T) {
	addr, data := testenv.FreeAddr(t), t.TempDir()
	env := []string{"SLUICE_SINK_LINGER=20ms"}
	g := startMQTTGateway(t, data, addr, env...)
	base := day(1).Add(11 * time.Hour)
	const n, killAfter = 400, 150
	payload := func(i int) string { return reading(mqttDevice, base.Add(time.Duration(i)*time.Second), i) }

	var mu sync.Mutex
	var acked []int
	ackedCount := func() int {
		mu.Lock()
		defer mu.Unlock()
		return len(acked)
	}
	dev := device(t, addr)
	published := make(chan int) // index of the first message not acknowledged
	go func() {
		i := 0
		for ; i < n && publishAcked(dev, payload(i)); i++ {
			mu.Lock()
			acked = append(acked, i)
			mu.Unlock()
		}
		published <- i
	}()
	for ackedCount() < killAfter {
		time.Sleep(time.Millisecond)
	}
	g.kill() // the device is still publishing
	next := <-published
	if next == n {
		t.Fatalf("all %d messages were acknowledged before the kill took effect", n)
	}
	t.Logf("killed with %d messages acknowledged to the device", next)

	g = startMQTTGateway(t, data, addr, env...)
	// Nothing delivers messages but the device, which has not published
	// again yet: what it was acknowledged must be there already.
	seqs := storedSeqs(g)
	var missing []int
	for _, s := range acked {
		if _, ok := slices.BinarySearch(seqs, s); !ok {
			missing = append(missing, s)
		}
	}
	if len(missing) > 0 {
		t.Fatalf("messages acknowledged to the device before the kill are not stored: %v\n%s", missing, g.logs())
	}
	_, inWindow := slices.BinarySearch(seqs, next)
	t.Logf("after the restart %d readings are stored; the message in flight at the kill (%d) was stored without its acknowledgement: %v",
		len(seqs), next, inWindow)

	// The device reconnects and sends again what it was not acknowledged.
	dev = device(t, addr)
	for i := next; i < n; i++ {
		if !publishAcked(dev, payload(i)) {
			t.Fatalf("message %d not acknowledged after the restart", i)
		}
	}
	// Acknowledged means stored: no waiting.
	seqs = storedSeqs(g)
	// Exactly once by key: every message 0..n-1 once, and nothing else.
	want := make([]int, n)
	for i := range want {
		want[i] = i
	}
	if !slices.Equal(seqs, want) {
		t.Fatalf("stored %d readings, want 0..%d exactly once; got %v", len(seqs), n-1, seqs)
	}
	out, _ := g.query("readings", "--device", mqttDevice, "--from", day(1).Format(time.RFC3339),
		"--to", day(-1).Format(time.RFC3339), "--all", "--format", "csv")
	if wantCSV := expectedCSV(base, want); out != wantCSV {
		t.Fatalf("query readings:\n%s\nwant:\n%s", head(out), head(wantCSV))
	}
	if got := g.metric("sluice_mqtt_messages_stored_total"); got != float64(n-next) {
		t.Errorf("sluice_mqtt_messages_stored_total = %v after the restart, want %d (the messages published since)", got, n-next)
	}
	g.stop()
}
