package mqttingest

import (
	"context"
	"fmt"
	"os"
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
	return d
}

// countingWriter reports when a number of readings has been made durable.
type countingWriter struct {
	w    Writer
	want int64
	got  atomic.Int64
	done chan struct{}
}

func (c *countingWriter) Write(ctx context.Context, r *sink.Request) error {
	if err := c.w.Write(ctx, r); err != nil {
		return err
	}
	if c.got.Add(int64(len(r.Readings))) == c.want {
		close(c.done)
	}
	return nil
}

// sluiceDrain measures the gateway: the same backlog, drained through the
// ingester into the durable store (Pebble with fsync), acknowledged after
// each commit.
func sluiceDrain(b *testing.B, prefix string, topics, payloads []string) time.Duration {
	cfg := testConfig(mosquittoAddr, prefix)
	cfg.ClientID = prefix + "-sluice"
	scfg := sink.DefaultConfig()
	if d, err := time.ParseDuration(os.Getenv("SLUICE_BENCH_LINGER")); err == nil {
		scfg.Linger = d
	}
	stk := newStackSink(b, buckets.DefaultConfig(), scfg)
	cw := &countingWriter{w: stk.sk, want: int64(len(topics) * benchReadingsPerMessage), done: make(chan struct{})}
	g := startGateway(b, cfg, cw)
	g.stop(b)
	queue(b, topics, payloads, prefix+"-pub-sluice")
	start := time.Now()
	g = startGatewayWait(b, cfg, cw, false)
	select {
	case <-cw.done:
	case <-time.After(5 * time.Minute):
		b.Fatalf("gateway stored %d of %d readings", cw.got.Load(), cw.want)
	}
	d := time.Since(start)
	g.stop(b)
	return d
}

// BenchmarkMQTTToStore compares, in one run, the readings/s that Mosquitto
// delivers at QoS 1 to a subscriber that does nothing (the limit) with the
// readings/s the gateway makes durable from the same backlog.
//
//	bash scripts/servers.sh up mosquitto
//	go test -run '^$' -bench MQTTToStore -benchtime 3x ./internal/mqttingest
func BenchmarkMQTTToStore(b *testing.B) {
	requireServer(b, mosquittoAddr, "mosquitto")
	readings := float64(benchMessages * benchReadingsPerMessage)
	var limit, gw time.Duration
	n := 0
	for b.Loop() {
		prefix := "sluicebench/" + uniq(b)
		topics, payloads := benchPayloads(prefix, time.Now().Add(-time.Hour).UnixMilli())
		limit += noopDrain(b, prefix, topics, payloads)
		gw += sluiceDrain(b, prefix, topics, payloads)
		n++
	}
	limitRate := readings * float64(n) / limit.Seconds()
	gwRate := readings * float64(n) / gw.Seconds()
	b.ReportMetric(0, "ns/op")
	b.ReportMetric(limitRate, "limit_readings/s")
	b.ReportMetric(gwRate, "readings/s")
	b.ReportMetric(100*gwRate/limitRate, "%_of_limit")
}
