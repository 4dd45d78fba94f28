package mqttingest

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/url"
	"os"
	"sync"
	"testing"
	"time"

	mqtt "github.com/eclipse/paho.mqtt.golang"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice/internal/buckets"
	"github.com/sluicehq/sluice/internal/decode"
	"github.com/sluicehq/sluice/internal/model"
	"github.com/sluicehq/sluice/internal/reader"
	"github.com/sluicehq/sluice/internal/sink"
	"github.com/sluicehq/sluice/internal/store"
	"github.com/sluicehq/sluice/internal/store/pebblestore"
	"github.com/sluicehq/sluice/internal/testenv"
)

// mosquittoAddr is where scripts/servers.sh runs Mosquitto
// (SLUICE_MQTT_PORT moves it).
var mosquittoAddr = "127.0.0.1:" + cmp.Or(os.Getenv("SLUICE_MQTT_PORT"), "1883")

// requireServer skips the test when nothing listens on addr (fails it
// under CI=true).
func requireServer(t testing.TB, addr, name string) {
	t.Helper()
	testenv.Require(t, name, addr)
}

func testLogger(t testing.TB) *slog.Logger {
	if testing.Verbose() {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

// stack is a real store and sink in a temporary directory.
type stack struct {
	st *pebblestore.Store
	sk *sink.Sink
}

func newStack(t testing.TB, bcfg buckets.Config) *stack {
	t.Helper()
	return newStackSink(t, bcfg, sink.DefaultConfig())
}

func newStackSink(t testing.TB, bcfg buckets.Config, scfg sink.Config) *stack {
	t.Helper()
	st, err := pebblestore.Open(t.TempDir(), pebblestore.Options{}, testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	sk := sink.New(scfg, bcfg, st, testLogger(t), prometheus.NewRegistry())
	t.Cleanup(func() {
		if err := sk.Close(context.Background()); err != nil {
			t.Error(err)
		}
		if err := st.Close(); err != nil {
			t.Error(err)
		}
	})
	return &stack{st: st, sk: sk}
}

// uniq returns a name no other test run uses, for client ids and topics.
func uniq(t testing.TB) string {
	return fmt.Sprintf("t%d", time.Now().UnixNano())
}

// testConfig subscribes to prefix/+/readings with template
// prefix/{device_id}/readings.
func testConfig(broker, prefix string) Config {
	c := DefaultConfig()
	c.Enabled = true
	c.Brokers = []string{"tcp://" + broker}
	c.ClientID = prefix + "-gw"
	c.Topics = []Topic{{Filter: prefix + "/+/readings", QoS: 1}}
	c.TopicTemplate = prefix + "/{device_id}/readings"
	c.Tenant = "acme"
	c.ConnectRetryInterval = time.Second
	c.MaxReconnectInterval = time.Second
	return c
}

// gateway is an ingester whose connection the test can cut.
type gateway struct {
	in   *Ingester
	mu   sync.Mutex
	conn net.Conn
}

// startGateway starts an ingester and waits until it subscribed. A gateway
// that resumes a session with a backlog may take long to see its SUBACK
// (the broker sends the backlog first): wait is then false.
func startGateway(t testing.TB, cfg Config, w Writer) *gateway {
	return startGatewayWait(t, cfg, w, true)
}

func startGatewayWait(t testing.TB, cfg Config, w Writer, wait bool) *gateway {
	t.Helper()
	in, err := New(cfg, w, decode.DefaultLimits(), time.Now, testLogger(t).With("gateway", cfg.ClientID), prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	g := &gateway{in: in}
	in.openConn = func(u *url.URL, _ mqtt.ClientOptions) (net.Conn, error) {
		c, err := net.DialTimeout("tcp", u.Host, 5*time.Second)
		if err == nil {
			g.mu.Lock()
			g.conn = c
			g.mu.Unlock()
		}
		return c, err
	}
	if err := in.Start(); err != nil {
		t.Fatal(err)
	}
	if !wait {
		return g
	}
	select {
	case <-in.Subscribed():
	case <-time.After(30 * time.Second):
		t.Fatal("gateway did not subscribe within 30s")
	}
	return g
}

// kill drops the connection without DISCONNECT and without acknowledging
// anything more, as a crash would.
func (g *gateway) kill() {
	g.mu.Lock()
	c := g.conn
	g.mu.Unlock()
	g.in.kill(c)
}

func (g *gateway) stop(t testing.TB) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := g.in.Stop(ctx); err != nil {
		t.Error(err)
	}
}

// publisher is a plain QoS 1 MQTT client.
func publisher(t testing.TB, broker, id, user, pass string) mqtt.Client {
	t.Helper()
	o := mqtt.NewClientOptions().AddBroker("tcp://" + broker).SetClientID(id).SetUsername(user).SetPassword(pass).
		SetCleanSession(true).SetAutoReconnect(true).SetConnectRetry(true).SetConnectRetryInterval(200 * time.Millisecond)
	c := mqtt.NewClient(o)
	tok := c.Connect()
	if !tok.WaitTimeout(30*time.Second) || tok.Error() != nil {
		t.Fatalf("connect publisher: %v", tok.Error())
	}
	t.Cleanup(func() { c.Disconnect(100) })
	return c
}

// persistentPublisher is a QoS 1 client that keeps its session: after a
// lost connection it reconnects and sends again every message not yet
// acknowledged, as a device that must not lose readings does.
func persistentPublisher(t testing.TB, broker, id string) mqtt.Client {
	t.Helper()
	o := mqtt.NewClientOptions().AddBroker("tcp://" + broker).SetClientID(id).
		SetCleanSession(false).SetAutoReconnect(true).SetMaxReconnectInterval(500 * time.Millisecond).
		SetConnectRetry(true).SetConnectRetryInterval(200 * time.Millisecond)
	c := mqtt.NewClient(o)
	tok := c.Connect()
	if !tok.WaitTimeout(30*time.Second) || tok.Error() != nil {
		t.Fatalf("connect publisher: %v", tok.Error())
	}
	t.Cleanup(func() { c.Disconnect(100) })
	return c
}

func publish(t testing.TB, c mqtt.Client, topic string, payloads ...string) {
	t.Helper()
	toks := make([]mqtt.Token, 0, len(payloads))
	for _, p := range payloads {
		toks = append(toks, c.Publish(topic, 1, false, p))
	}
	for _, tok := range toks {
		if !tok.WaitTimeout(60*time.Second) || tok.Error() != nil {
			t.Fatalf("publish to %s: %v", topic, tok.Error())
		}
	}
}

// cell is one stored reading row, by key and value.
type cell struct {
	device, metric string
	ts             int64
	value          float64
}

// readAll returns every row of the devices in [from, to), and how many
// times each key was returned.
func readAll(t testing.TB, st reader.Store, tenant string, devices []string, from, to int64) map[cell]int {
	t.Helper()
	out := make(map[cell]int)
	for _, d := range devices {
		cursor := ""
		for {
			rs, next, err := reader.Readings(context.Background(), st, reader.Query{Tenant: tenant, Series: d, From: from, To: to, Limit: reader.MaxLimit, Cursor: cursor})
			if err != nil {
				t.Fatal(err)
			}
			for _, r := range rs {
				for _, m := range r.Metrics {
					out[cell{device: d, metric: m.Name, ts: r.TS, value: m.Value}]++
				}
			}
			if next == "" {
				break
			}
			cursor = next
		}
	}
	return out
}

// deadLetters returns the tenant's dead letters of the days around now.
func deadLetters(t testing.TB, st *pebblestore.Store, tenant string) []model.DeadLetter {
	t.Helper()
	var out []model.DeadLetter
	today := model.DayOf(time.Now().UnixMilli())
	for d := today - 1; d <= today+1; d++ {
		dls, err := st.ScanDeadLetters(context.Background(), tenant, d, store.Range{From: d.Start(), To: d.End()}, 1_000_000)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, dls...)
	}
	return out
}

// eventually polls cond until it holds, failing the test after limit.
func eventually(t testing.TB, limit time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("gave up after %s waiting for %s", limit, what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// hangingWriter passes writes to the sink until it has let through
// `after` messages' worth of writes, then blocks every write until its
// context ends: a gateway that stores part of the stream and then stalls.
type hangingWriter struct {
	w       Writer
	mu      sync.Mutex
	left    int
	stalled chan struct{}
	once    sync.Once
}

func (h *hangingWriter) Write(ctx context.Context, r *sink.Request) error {
	h.mu.Lock()
	pass := h.left > 0
	h.left -= len(r.Readings) + len(r.DeadLetters)
	h.mu.Unlock()
	if pass {
		return h.w.Write(ctx, r)
	}
	h.once.Do(func() { close(h.stalled) })
	<-ctx.Done()
	return ctx.Err()
}

// slowWriter delays every write.
type slowWriter struct {
	w     Writer
	delay time.Duration
}

func (s slowWriter) Write(ctx context.Context, r *sink.Request) error {
	time.Sleep(s.delay)
	return s.w.Write(ctx, r)
}
