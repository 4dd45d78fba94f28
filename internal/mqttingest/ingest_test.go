package mqttingest

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	mqtt "github.com/eclipse/paho.mqtt.golang"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/sluicehq/sluice/internal/broker"
	"github.com/sluicehq/sluice/internal/buckets"
	"github.com/sluicehq/sluice/internal/decode"
	"github.com/sluicehq/sluice/internal/testenv"
)

// path is one way from a device to the store, as a delivery test sees it.
type path struct {
	addr string // where devices publish
	// ackAfterStore: the device is acknowledged only once the gateway
	// stored the message (the embedded broker), not by the broker at once.
	ackAfterStore bool
	// start starts the gateway's side, writing through w.
	start func(t *testing.T, w Writer) gatewaySide
	// publisher connects a device. It keeps a session (clean session off)
	// when messages it was not acknowledged must be sent again after the
	// gateway's side restarts.
	publisher func(t *testing.T, id string) mqtt.Client
}

// gatewaySide is the running gateway's side of a path.
type gatewaySide interface {
	// kill stops it as a crash would: nothing more is acknowledged.
	kill()
	stop(t testing.TB)
}

// paths returns the ways every delivery test runs: the subscriber on the
// real Mosquitto of scripts/servers.sh, and the embedded broker whose
// publish hook stores each message before acknowledging it.
//
// cfg is the gateway's configuration (testConfig and the test's changes);
// the path sets its brokers.
func paths() map[string]func(t *testing.T, prefix string, cfg Config) path {
	return map[string]func(t *testing.T, prefix string, cfg Config) path{
		"mosquitto": func(t *testing.T, _ string, cfg Config) path {
			requireServer(t, mosquittoAddr, "mosquitto")
			cfg.Brokers = []string{"tcp://" + mosquittoAddr}
			started := false
			return path{
				addr: mosquittoAddr,
				// The first gateway must have subscribed before anything is
				// published; one that resumes the session may see its
				// SUBACK only after the backlog, so it is not waited for.
				start: func(t *testing.T, w Writer) gatewaySide {
					first := !started
					started = true
					return startGatewayWait(t, cfg, w, first)
				},
				publisher: func(t *testing.T, id string) mqtt.Client {
					return publisher(t, mosquittoAddr, id, "", "")
				},
			}
		},
		"embedded": func(t *testing.T, prefix string, cfg Config) path {
			addr := testenv.FreeAddr(t)
			return path{
				addr: addr, ackAfterStore: true,
				start: func(t *testing.T, w Writer) gatewaySide {
					b, _ := startEmbedded(t, prefix, cfg, broker.Config{Enabled: true, Listen: addr, AllowAnonymous: true}, w)
					return embeddedSide{b}
				},
				publisher: func(t *testing.T, id string) mqtt.Client {
					return persistentPublisher(t, addr, id)
				},
			}
		},
	}
}

// embeddedSide is an embedded broker storing through a Receiver.
type embeddedSide struct{ b *broker.Broker }

// kill closes the broker: the message being stored is not acknowledged and
// the devices are disconnected, as they would be by a crash. (What a crash
// leaves on disk is tested with the real binary in e2e.)
func (e embeddedSide) kill() { _ = e.b.Close() }

func (e embeddedSide) stop(t testing.TB) {
	if err := e.b.Close(); err != nil {
		t.Error(err)
	}
}

// startEmbedded runs an embedded broker on bcfg.Listen whose publish hook
// stores through a Receiver of cfg writing to w.
func startEmbedded(t *testing.T, prefix string, cfg Config, bcfg broker.Config, w Writer) (*broker.Broker, *Receiver) {
	t.Helper()
	rc, err := NewReceiver(cfg, w, decode.DefaultLimits(), time.Now, testLogger(t), prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	b, err := broker.Start(bcfg, rc.BrokerOptions(t.TempDir()), testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	return b, rc
}

// stream is a set of messages and the rows they must produce.
type stream struct {
	topics   []string
	payloads []string
	want     map[cell]int
	devices  []string
	from, to int64
}

// makeStream builds n messages over 7 devices; every tenth carries an
// array of two readings, the others one reading.
func makeStream(prefix string, first, n int, base int64) stream {
	s := stream{want: make(map[cell]int), from: base, to: base + int64(4*(first+n)) + 1}
	for d := range 7 {
		s.devices = append(s.devices, fmt.Sprintf("dev-%d", d))
	}
	for i := first; i < first+n; i++ {
		dev := s.devices[i%7]
		ts := base + int64(2*i)
		one := func(ts int64) string {
			s.want[cell{device: dev, metric: "v", ts: ts, value: float64(i)}] = 1
			s.want[cell{device: dev, metric: "w", ts: ts, value: float64(-i)}] = 1
			return fmt.Sprintf(`{"ts":%d,"metrics":{"v":%d,"w":%d}}`, ts, i, -i)
		}
		p := one(ts)
		if i%10 == 0 {
			p = "[" + p + "," + fmt.Sprintf(`{"device_id":%q,"ts":%d,"seq":%d,"metrics":{"v":%d,"w":%d}}`, dev, ts+1, i, i, -i) + "]"
			s.want[cell{device: dev, metric: "v", ts: ts + 1, value: float64(i)}] = 1
			s.want[cell{device: dev, metric: "w", ts: ts + 1, value: float64(-i)}] = 1
		}
		s.topics = append(s.topics, prefix+"/"+dev+"/readings")
		s.payloads = append(s.payloads, p)
	}
	return s
}

func (s stream) publish(t *testing.T, c mqtt.Client) {
	t.Helper()
	if err := <-s.publishAsync(c, 60*time.Second); err != nil {
		t.Fatal(err)
	}
}

// publishAsync sends every message at once and reports, when all are
// acknowledged, nil, or the first error; wait bounds the wait for each
// acknowledgement.
func (s stream) publishAsync(c mqtt.Client, wait time.Duration) <-chan error {
	toks := make([]mqtt.Token, len(s.topics))
	for i := range s.topics {
		toks[i] = c.Publish(s.topics[i], 1, false, s.payloads[i])
	}
	done := make(chan error, 1)
	go func() {
		for i, tok := range toks {
			if !tok.WaitTimeout(wait) {
				done <- fmt.Errorf("message %d not acknowledged within %s", i, wait)
				return
			}
			if err := tok.Error(); err != nil {
				done <- fmt.Errorf("publish message %d: %w", i, err)
				return
			}
		}
		done <- nil
	}()
	return done
}

// checkExactlyOnce fails unless the stored rows are exactly want, each key
// once.
func checkExactlyOnce(t *testing.T, got, want map[cell]int) {
	t.Helper()
	missing, extra, dup := 0, 0, 0
	for c := range want {
		if got[c] == 0 {
			missing++
		}
	}
	for c, n := range got {
		if want[c] == 0 {
			extra++
		}
		if n > 1 {
			dup++
		}
	}
	if missing+extra+dup > 0 {
		t.Errorf("stored %d distinct rows, want %d: %d missing, %d unexpected, %d keys returned more than once", len(got), len(want), missing, extra, dup)
	}
}

func baseTS() int64 { return time.Now().Add(-time.Hour).UnixMilli() }

// A gateway that stalls and dies without acknowledging, and a second one
// (same client id, or the embedded broker again on the same address):
// every message ends up stored exactly once. On Mosquitto the broker keeps
// what the dead subscriber did not acknowledge; on the embedded broker the
// device does, and sends it again when it reconnects.
func TestCrashRedelivery(t *testing.T) {
	for name, setup := range paths() {
		t.Run(name, func(t *testing.T) {
			prefix := "sluicetest/" + uniq(t)
			cfg := testConfig(mosquittoAddr, prefix)
			cfg.MaxInflight = 64
			p := setup(t, prefix, cfg)
			// A small bound splits each device-day into several partitions,
			// so redelivered readings may meet a planner that moved on.
			bc := buckets.DefaultConfig()
			bc.MaxRows = 300
			stk := newStack(t, bc)
			const n = 3000
			s := makeStream(prefix, 0, n, baseTS())

			hw := &hangingWriter{w: stk.sk, left: n / 3, stalled: make(chan struct{})}
			g1 := p.start(t, hw)
			published := s.publishAsync(p.publisher(t, prefix+"-pub"), 3*time.Minute)
			timeout := time.After(3 * time.Minute) // generous: a loaded CI machine is slow
			var pubErr error
			for stalled := false; !stalled; {
				select {
				case <-hw.stalled:
					stalled = true
				case pubErr = <-published:
					// Mosquitto acknowledges to the device at once; the
					// embedded broker only what the gateway stored.
					if p.ackAfterStore {
						t.Fatalf("every message was acknowledged before the gateway stalled (err %v)", pubErr)
					}
					published = nil
				case <-timeout:
					t.Fatal("the first gateway never reached its stall point")
				}
			}
			g1.kill()
			if gw, ok := g1.(*gateway); ok {
				// Nothing is left counted in flight by a stopped ingester.
				if v := testutil.ToFloat64(gw.in.m.inflight); v != 0 {
					t.Errorf("in-flight gauge %v after the ingester stopped, want 0", v)
				}
			}
			partial := len(readAll(t, stk.st, "acme", s.devices, s.from, s.to))
			t.Logf("first gateway stored %d of %d rows before it was killed", partial, len(s.want))

			g2 := p.start(t, stk.sk)
			if published != nil {
				pubErr = <-published
			}
			if pubErr != nil {
				t.Fatal(pubErr)
			}
			eventually(t, 2*time.Minute, "every row stored", func() bool {
				return len(readAll(t, stk.st, "acme", s.devices, s.from, s.to)) >= len(s.want)
			})
			g2.stop(t)
			checkExactlyOnce(t, readAll(t, stk.st, "acme", s.devices, s.from, s.to), s.want)
			if partial >= len(s.want) {
				t.Errorf("the first gateway stored everything (%d rows) before the kill: the test proved nothing", partial)
			}
		})
	}
}

// Poison messages become dead letters, with their reason, and the good
// messages around them are stored.
func TestPoisonMessages(t *testing.T) {
	for name, setup := range paths() {
		t.Run(name, func(t *testing.T) {
			prefix := "sluicetest/" + uniq(t)
			cfg := testConfig(mosquittoAddr, prefix)
			cfg.DeadLetterPayloadBytes = 24
			cfg.MaxPayloadBytes = 4096
			p := setup(t, prefix, cfg)
			stk := newStack(t, buckets.DefaultConfig())
			g := p.start(t, stk.sk)
			pub := p.publisher(t, prefix+"-pub")

			good := makeStream(prefix, 0, 200, baseTS())
			poison := []struct{ device, payload, reason string }{
				{"dev-0", `{"ts":1,"metrics":{"v":1}`, "invalid_json"},
				{"dev-1", `not json at all`, "invalid_json"},
				{"dev-2", `{"ts":"yesterday","metrics":{"v":1}}`, "invalid_field"},
				{"dev-3", `{"ts":1,"metrics":{"v":1},"colour":"red"}`, "invalid_field"},
				{"dev-4", `{"device_id":"dev-5","ts":1,"metrics":{"v":1}}`, "device_mismatch"},
				{"dev-5", `{"ts":1,"metrics":{}}`, "invalid_field"},
				{"dev-6", strings.Repeat(" ", 5000), "too_large"},
				{"bad device!", `{"ts":1,"metrics":{"v":1}}`, "bad_topic"},
			}
			// Interleave: poison between good messages, in one stream.
			for i := range good.topics {
				publish(t, pub, good.topics[i], good.payloads[i])
				if i%25 == 0 && i/25 < len(poison) {
					p := poison[i/25]
					publish(t, pub, prefix+"/"+p.device+"/readings", p.payload)
				}
			}
			eventually(t, time.Minute, "good rows and dead letters stored", func() bool {
				return len(readAll(t, stk.st, "acme", good.devices, good.from, good.to)) >= len(good.want) &&
					len(deadLetters(t, stk.st, "acme")) >= len(poison)
			})
			g.stop(t)
			checkExactlyOnce(t, readAll(t, stk.st, "acme", good.devices, good.from, good.to), good.want)
			dls := deadLetters(t, stk.st, "acme")
			var gotReasons, wantReasons []string
			for _, p := range poison {
				wantReasons = append(wantReasons, p.reason)
			}
			for _, d := range dls {
				gotReasons = append(gotReasons, d.Reason)
				if d.Source != "mqtt" || !strings.HasPrefix(d.Topic, prefix+"/") || d.Error == "" || d.ID == "" {
					t.Errorf("dead letter lacks its source, topic, error or id: %+v", d)
				}
				if len(d.Payload) > 24 {
					t.Errorf("dead letter keeps %d payload bytes, the limit is 24", len(d.Payload))
				}
				if d.Reason == "too_large" && !d.Truncated {
					t.Errorf("dead letter of a 5000-byte payload is not marked truncated: %+v", d)
				}
			}
			slices.Sort(gotReasons)
			slices.Sort(wantReasons)
			if !slices.Equal(gotReasons, wantReasons) {
				t.Errorf("dead-letter reasons = %v, want %v", gotReasons, wantReasons)
			}
		})
	}
}

// Mosquitto restarted mid-stream (persistence on): nothing is lost. The
// broker is a private Mosquitto with the shared one's configuration, so
// that restarting it does not cut the tests of other packages running
// beside this one.
func TestBrokerRestart(t *testing.T) {
	requireServer(t, mosquittoAddr, "mosquitto") // the binary is installed
	addr := testenv.FreeAddr(t)
	restart := privateMosquitto(t, addr)
	prefix := "sluicetest/" + uniq(t)
	cfg := testConfig(addr, prefix)
	cfg.MaxInflight = 16
	stk := newStack(t, buckets.DefaultConfig())
	const n = 2000
	first := makeStream(prefix, 0, n/2, baseTS())
	second := makeStream(prefix, n/2, n/2, first.from)

	// A slow writer keeps messages queued at the broker when it restarts.
	g := startGateway(t, cfg, slowWriter{w: stk.sk, delay: 5 * time.Millisecond})
	first.publish(t, publisher(t, addr, prefix+"-pub1", "", ""))
	stored := len(readAll(t, stk.st, "acme", first.devices, first.from, second.to))
	restart()
	t.Logf("restarted mosquitto with %d of %d rows of the first half stored", stored, len(first.want))
	second.publish(t, publisher(t, addr, prefix+"-pub2", "", ""))

	want := first.want
	for c := range second.want {
		want[c] = 1
	}
	eventually(t, 2*time.Minute, "every row stored", func() bool {
		return len(readAll(t, stk.st, "acme", first.devices, first.from, second.to)) >= len(want)
	})
	g.stop(t)
	checkExactlyOnce(t, readAll(t, stk.st, "acme", first.devices, first.from, second.to), want)
}

// privateMosquitto runs a Mosquitto of its own on addr, configured as
// scripts/servers.sh configures the shared one (persistence on, its state
// in a temporary directory), and returns a function that stops it the way
// a service stop does (SIGTERM: it saves its state) and starts it again.
func privateMosquitto(t *testing.T, addr string) (restart func()) {
	t.Helper()
	path, err := exec.LookPath("mosquitto")
	if err != nil {
		testenv.Missing(t, "mosquitto is not installed: bash scripts/servers.sh install mosquitto")
	}
	host, port, _ := net.SplitHostPort(addr)
	dir := t.TempDir()
	tmpl, err := os.ReadFile(filepath.Join("..", "..", "scripts", "mosquitto", "mosquitto.conf"))
	if err != nil {
		t.Fatal(err)
	}
	conf := strings.NewReplacer("@MQTT_PORT@", port, "@HOST@", host, "@STATE_DIR@", dir).Replace(string(tmpl))
	if err := os.MkdirAll(filepath.Join(dir, "data"), 0o755); err != nil {
		t.Fatal(err)
	}
	confPath := filepath.Join(dir, "mosquitto.conf")
	if err := os.WriteFile(confPath, []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	var cmd *exec.Cmd
	var done chan struct{}
	start := func() {
		cmd = exec.Command(path, "-c", confPath)
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		done = make(chan struct{})
		go func(c *exec.Cmd, d chan struct{}) { _ = c.Wait(); close(d) }(cmd, done)
		deadline := time.Now().Add(10 * time.Second)
		for {
			c, err := net.DialTimeout("tcp", addr, time.Second)
			if err == nil {
				_ = c.Close()
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("private mosquitto on %s not listening after 10s: %v", addr, err)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	stop := func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
	}
	start()
	t.Cleanup(stop)
	return func() { stop(); start() }
}

// On the embedded broker a device account publishes to its own topic only,
// and cannot subscribe.
func TestEmbeddedBrokerACL(t *testing.T) {
	prefix := "sluicetest/" + uniq(t)
	stk := newStack(t, buckets.DefaultConfig())
	b, _ := startEmbedded(t, prefix, testConfig("", prefix), broker.Config{Enabled: true, Listen: "127.0.0.1:0", Users: []broker.User{
		{Username: "pump-1", Password: "pump-1-secret", DeviceID: "pump-1"},
		{Username: "pump-2", Password: "pump-2-secret", DeviceID: "pump-2"},
	}}, stk.sk)

	ts := baseTS()
	// MQTT 3.1.1 lets a broker answer a refused publish only by closing
	// the connection; the forger must not reconnect and retry for ever.
	fo := mqtt.NewClientOptions().AddBroker("tcp://" + b.Addr()).SetClientID(prefix + "-forger").
		SetUsername("pump-1").SetPassword("pump-1-secret").SetAutoReconnect(false)
	forger := mqtt.NewClient(fo)
	if tok := forger.Connect(); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
		t.Fatalf("connect pump-1: %v", tok.Error())
	}
	forger.Publish(prefix+"/pump-2/readings", 1, false, fmt.Sprintf(`{"ts":%d,"metrics":{"forged":1}}`, ts)).WaitTimeout(2 * time.Second)
	eventually(t, 10*time.Second, "the broker to drop the forger", func() bool { return !forger.IsConnectionOpen() })
	forger.Disconnect(0)

	p1 := publisher(t, b.Addr(), prefix+"-p1", "pump-1", "pump-1-secret")
	publish(t, p1, prefix+"/pump-1/readings", fmt.Sprintf(`{"ts":%d,"metrics":{"own":1}}`, ts))
	eventually(t, 30*time.Second, "pump-1's own reading stored", func() bool {
		return len(readAll(t, stk.st, "acme", []string{"pump-1"}, ts, ts+1)) == 1
	})
	if got := readAll(t, stk.st, "acme", []string{"pump-2"}, ts, ts+1); len(got) != 0 {
		t.Errorf("pump-1 wrote into pump-2's topic: %v", got)
	}

	sub := p1.Subscribe(prefix+"/#", 1, func(mqtt.Client, mqtt.Message) {})
	if sub.WaitTimeout(10*time.Second) && sub.Error() == nil {
		if res := sub.(*mqtt.SubscribeToken).Result(); res[prefix+"/#"] != 0x80 {
			t.Errorf("a device account was allowed to subscribe (granted QoS %d)", res[prefix+"/#"])
		}
	}

	for _, creds := range [][2]string{{"", ""}, {"pump-1", "wrong-password"}, {"nobody", "guess-1234"}} {
		o := mqtt.NewClientOptions().AddBroker("tcp://" + b.Addr()).SetClientID(prefix + "-bad").SetUsername(creds[0]).SetPassword(creds[1])
		c := mqtt.NewClient(o)
		if tok := c.Connect(); tok.WaitTimeout(10*time.Second) && tok.Error() == nil {
			c.Disconnect(0)
			t.Errorf("broker accepted username %q with a bad password", creds[0])
		}
	}
}

// fakeMessage is a QoS 1 message as paho hands it to the handler.
type fakeMessage struct {
	topic   string
	payload []byte
	acked   atomic.Int32
}

func (m *fakeMessage) Duplicate() bool   { return false }
func (m *fakeMessage) Qos() byte         { return 1 }
func (m *fakeMessage) Retained() bool    { return false }
func (m *fakeMessage) Topic() string     { return m.topic }
func (m *fakeMessage) MessageID() uint16 { return 1 }
func (m *fakeMessage) Payload() []byte   { return m.payload }
func (m *fakeMessage) Ack()              { m.acked.Add(1) }

// The in-flight gauge counts messages received and not yet acknowledged:
// once the ingester stopped, it is back at zero, and messages paho hands
// over after the stop are neither counted nor acknowledged (the broker
// keeps them). Needs no broker: the client never connects.
func TestInflightGaugeAfterStop(t *testing.T) {
	cfg := testConfig("127.0.0.1:1", "sluicetest/"+uniq(t))
	stk := newStack(t, buckets.DefaultConfig())
	in, err := New(cfg, stk.sk, decode.DefaultLimits(), time.Now, testLogger(t), prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	if err := in.Start(); err != nil {
		t.Fatal(err)
	}
	msg := func() *fakeMessage {
		return &fakeMessage{topic: strings.TrimSuffix(cfg.Topics[0].Filter, "/+/readings") + "/dev-1/readings",
			payload: []byte(`{"ts":1700000000000,"metrics":{"t":1}}`)}
	}
	before := msg()
	in.handle(nil, before)
	eventually(t, 30*time.Second, "the message before the stop acknowledged", func() bool { return before.acked.Load() == 1 })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := in.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	var after []*fakeMessage
	for range 20 {
		m := msg()
		after = append(after, m)
		in.handle(nil, m)
	}
	if v := testutil.ToFloat64(in.m.inflight); v != 0 {
		t.Errorf("in-flight gauge %v after the stop, want 0", v)
	}
	for i, m := range after {
		if m.acked.Load() != 0 {
			t.Errorf("message %d handed over after the stop was acknowledged", i)
		}
	}
}

// At most mqtt.max_inflight messages are received and not yet acknowledged:
// with the writes stalled, handle blocks (so paho stops reading) once that
// many are held, the acker's included, and the gauge says so.
func TestInflightBound(t *testing.T) {
	const bound = 3
	cfg := testConfig("127.0.0.1:1", "sluicetest/"+uniq(t))
	cfg.MaxInflight = bound
	stk := newStack(t, buckets.DefaultConfig())
	in, err := New(cfg, &hangingWriter{w: stk.sk, stalled: make(chan struct{})}, decode.DefaultLimits(), time.Now, testLogger(t), prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	if err := in.Start(); err != nil {
		t.Fatal(err)
	}
	topic := strings.TrimSuffix(cfg.Topics[0].Filter, "/+/readings") + "/dev-1/readings"
	var handed atomic.Int32
	go func() { // paho's router: one message at a time
		for range 2 * bound {
			in.handle(nil, &fakeMessage{topic: topic, payload: []byte(`{"ts":1700000000000,"metrics":{"t":1}}`)})
			handed.Add(1)
		}
	}()
	eventually(t, 30*time.Second, "the bound reached", func() bool { return testutil.ToFloat64(in.m.inflight) == bound })
	time.Sleep(200 * time.Millisecond) // room for a message past the bound, were there any
	if v := testutil.ToFloat64(in.m.inflight); v != bound {
		t.Errorf("in-flight gauge %v with the writes stalled, want %d", v, bound)
	}
	if n := handed.Load(); n != bound {
		t.Errorf("handle returned for %d messages with the writes stalled, want %d (then it blocks)", n, bound)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if err := in.Stop(ctx); err != nil {
		t.Log(err) // the stalled writes are cancelled when ctx ends
	}
	if v := testutil.ToFloat64(in.m.inflight); v != 0 {
		t.Errorf("in-flight gauge %v after the stop, want 0", v)
	}
}
