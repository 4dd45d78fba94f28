package mqttingest

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	mqtt "github.com/eclipse/paho.mqtt.golang"

	"github.com/sluicehq/sluice/internal/buckets"
	"github.com/sluicehq/sluice/internal/sink"
)

// Benchmark sizes: messages of readingsPerMessage readings each, over
// benchDevices devices. Mosquitto must queue them all for an offline
// session (scripts/mosquitto/mosquitto.conf: max_queued_messages 100000).
const (
	benchMessages           = 20_000
	benchReadingsPerMessage = 10
	benchDevices            = 1_000
)

func benchPayloads(prefix string, base int64) (topics, payloads []string) {
	for i := range benchMessages {
		dev := fmt.Sprintf("dev-%04d", i%benchDevices)
		var b strings.Builder
		b.WriteByte('[')
		for j := range benchReadingsPerMessage {
			if j > 0 {
				b.WriteByte(',')
			}
			ts := base + int64(i/benchDevices)*benchReadingsPerMessage + int64(j)
			fmt.Fprintf(&b, `{"ts":%d,"seq":%d,"metrics":{"temp_c":%d.5,"rpm":%d}}`, ts, i, i%40, 1000+i%500)
		}
		b.WriteByte(']')
		topics = append(topics, prefix+"/"+dev+"/readings")
		payloads = append(payloads, b.String())
	}
	return topics, payloads
}

// queue publishes the messages while the subscriber identified by its
// persistent session is offline, so that both measurements start from the
// same backlog at the broker and measure delivery, not publishing.
func queue(b *testing.B, topics, payloads []string, id string) {
	pub := publisher(b, mosquittoAddr, id, "", "")
	toks := make([]mqtt.Token, len(topics))
	for i := range topics {
		toks[i] = pub.Publish(topics[i], 1, false, payloads[i])
	}
	for _, tok := range toks {
		if !tok.WaitTimeout(60*time.Second) || tok.Error() != nil {
			b.Fatalf("publish: %v", tok.Error())
		}
	}
	pub.Disconnect(100)
}

// dropSession ends the persistent session id at the broker (a clean-session
// connection discards it), so that benchmark runs leave no state behind.
func dropSession(b *testing.B, id string) {
	c := mqtt.NewClient(mqtt.NewClientOptions().AddBroker("tcp://" + mosquittoAddr).SetClientID(id).SetCleanSession(true))
	if tok := c.Connect(); !tok.WaitTimeout(30*time.Second) || tok.Error() != nil {
		b.Logf("drop session %s: %v", id, tok.Error())
		return
	}
	c.Disconnect(100)
}

// noopDrain measures the limit: a QoS 1 subscriber that acknowledges each
// message as it arrives and does nothing else.
func noopDrain(b *testing.B, prefix string, topics, payloads []string) time.Duration {
	id := prefix + "-noop"
	var got atomic.Int64
	done := make(chan struct{})
	o := mqtt.NewClientOptions().AddBroker("tcp://" + mosquittoAddr).SetClientID(id).SetCleanSession(false).
		SetOrderMatters(true).SetDefaultPublishHandler(func(mqtt.Client, mqtt.Message) {
		if got.Add(1) == int64(len(topics)) {
			close(done)
		}
	})
	c := mqtt.NewClient(o)
	if tok := c.Connect(); !tok.WaitTimeout(30*time.Second) || tok.Error() != nil {
		b.Fatalf("connect: %v", tok.Error())
	}
	if tok := c.Subscribe(prefix+"/+/readings", 1, nil); !tok.WaitTimeout(30*time.Second) || tok.Error() != nil {
		b.Fatalf("subscribe: %v", tok.Error())
	}
	c.Disconnect(100)
	queue(b, topics, payloads, prefix+"-pub-noop")
	start := time.Now()
	c = mqtt.NewClient(o)
	if tok := c.Connect(); !tok.WaitTimeout(30*time.Second) || tok.Error() != nil {
		b.Fatalf("connect: %v", tok.Error())
	}
	select {
	case <-done:
	case <-time.After(5 * time.Minute):
		b.Fatalf("no-op subscriber got %d of %d messages", got.Load(), len(topics))
	}
	d := time.Since(start)
	c.Disconnect(100)
	dropSession(b, id)
	return d
}

// countingWriter reports when a number of readings has been made durable.
// It also counts the writes and their latency.
type countingWriter struct {
	w      Writer
	want   int64
	got    atomic.Int64
	writes atomic.Int64
	nanos  atomic.Int64 // summed latency of the writes
	done   chan struct{}
}

func (c *countingWriter) Write(ctx context.Context, r *sink.Request) error {
	start := time.Now()
	if err := c.w.Write(ctx, r); err != nil {
		return err
	}
	c.writes.Add(1)
	c.nanos.Add(int64(time.Since(start)))
	if c.got.Add(int64(len(r.Readings))) == c.want {
		close(c.done)
	}
	return nil
}

// drainStats is what one gateway drain measured.
type drainStats struct {
	d      time.Duration
	writes int64         // sink writes
	wait   time.Duration // summed latency of the writes
	// inflight is the mean number of messages received and not yet
	// acknowledged.
	inflight float64
}

// sluiceDrain measures the gateway: the same backlog, drained through the
// ingester into the durable store (Pebble with fsync), acknowledged after
// each commit. SLUICE_BENCH_LINGER, SLUICE_BENCH_COMMITS and
// SLUICE_BENCH_BATCH_ROWS override the sink defaults.
func sluiceDrain(b *testing.B, prefix string, topics, payloads []string) drainStats {
	cfg := testConfig(mosquittoAddr, prefix)
	cfg.ClientID = prefix + "-sluice"
	scfg := sink.DefaultConfig()
	if d, err := time.ParseDuration(os.Getenv("SLUICE_BENCH_LINGER")); err == nil {
		scfg.Linger = d
	}
	if n, err := strconv.Atoi(os.Getenv("SLUICE_BENCH_COMMITS")); err == nil {
		scfg.Commits = n
	}
	if n, err := strconv.Atoi(os.Getenv("SLUICE_BENCH_BATCH_ROWS")); err == nil {
		scfg.BatchRows = n
	}
	stk := newStackSink(b, buckets.DefaultConfig(), scfg)
	cw := &countingWriter{w: stk.sk, want: int64(len(topics) * benchReadingsPerMessage), done: make(chan struct{})}
	g := startGateway(b, cfg, cw)
	g.stop(b)
	queue(b, topics, payloads, prefix+"-pub-sluice")
	w0, n0 := cw.writes.Load(), cw.nanos.Load()
	start := time.Now()
	g = startGatewayWait(b, cfg, cw, false)
	// Sample the messages in flight (received, not yet acknowledged).
	var samples, sum int64
	tick := time.NewTicker(time.Millisecond)
wait:
	for {
		select {
		case <-cw.done:
			break wait
		case <-tick.C:
			samples++
			sum += int64(len(g.in.inflight))
		case <-time.After(5 * time.Minute):
			b.Fatalf("gateway stored %d of %d readings", cw.got.Load(), cw.want)
		}
	}
	tick.Stop()
	st := drainStats{d: time.Since(start), writes: cw.writes.Load() - w0, wait: time.Duration(cw.nanos.Load() - n0),
		inflight: float64(sum) / float64(max(samples, 1))}
	g.stop(b)
	dropSession(b, cfg.ClientID)
	return st
}

// BenchmarkMQTTToStore compares, in one run, the readings/s that Mosquitto
// delivers at QoS 1 to a subscriber that does nothing (the limit) with the
// readings/s the gateway makes durable from the same backlog. Each
// iteration drains the limit and the gateway in turn. SLUICE_MQTT_PORT
// points it at another Mosquitto (e.g. one with a larger
// max_inflight_messages).
//
//	bash scripts/servers.sh up mosquitto
//	go test -run '^$' -bench MQTTToStore -benchtime 2x -count 3 ./internal/mqttingest
func BenchmarkMQTTToStore(b *testing.B) {
	requireServer(b, mosquittoAddr, "mosquitto")
	readings := float64(benchMessages * benchReadingsPerMessage)
	var limit time.Duration
	var gw drainStats
	n := 0
	for b.Loop() {
		prefix := "sluicebench/" + uniq(b)
		topics, payloads := benchPayloads(prefix, time.Now().Add(-time.Hour).UnixMilli())
		limit += noopDrain(b, prefix, topics, payloads)
		st := sluiceDrain(b, prefix, topics, payloads)
		gw.d += st.d
		gw.writes += st.writes
		gw.wait += st.wait
		gw.inflight += st.inflight
		n++
	}
	limitRate := readings * float64(n) / limit.Seconds()
	gwRate := readings * float64(n) / gw.d.Seconds()
	b.ReportMetric(0, "ns/op")
	b.ReportMetric(limitRate, "limit_readings/s")
	b.ReportMetric(gwRate, "readings/s")
	b.ReportMetric(100*gwRate/limitRate, "%_of_limit")
	b.ReportMetric(float64(gw.writes)/gw.d.Seconds(), "writes/s")
	b.ReportMetric(float64(benchMessages*n)/float64(max(gw.writes, 1)), "msgs/write")
	b.ReportMetric(gw.wait.Seconds()*1000/float64(max(gw.writes, 1)), "ms/write")
	b.ReportMetric(gw.inflight/float64(n), "msgs_inflight")
}
