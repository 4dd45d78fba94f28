package mqttingest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	mqtt "github.com/eclipse/paho.mqtt.golang"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"

	"github.com/sluicehq/sluice/internal/buckets"
	"github.com/sluicehq/sluice/internal/sink"
)

// refusingWriter refuses its first busy writes as a full pipeline would,
// fails the next failing ones as a broken store would, then writes.
type refusingWriter struct {
	w             Writer
	mu            sync.Mutex
	busy, failing int
}

func (r *refusingWriter) Write(ctx context.Context, req *sink.Request) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	switch {
	case r.busy > 0:
		r.busy--
		return &sink.BusyError{RetryAfter: 10 * time.Millisecond, Reason: "queue full"}
	case r.failing > 0:
		r.failing--
		return errors.New("disk full")
	}
	return r.w.Write(ctx, req)
}

// TestSubscriberMetrics checks that the subscriber's metrics move with
// what happens: connections made and lost, messages stored, readings
// decoded, dead letters by reason, write retries by reason, the time to
// acknowledge, and the in-flight gauge back at 0.
func TestSubscriberMetrics(t *testing.T) {
	requireServer(t, mosquittoAddr, "mosquitto")
	prefix := "sluicetest/" + uniq(t)
	stk := newStack(t, buckets.DefaultConfig())
	w := &refusingWriter{w: stk.sk, busy: 2, failing: 1}
	g := startGateway(t, testConfig(mosquittoAddr, prefix), w)
	defer g.stop(t)
	m := g.in.m
	if c, n, l := testutil.ToFloat64(m.connected), testutil.ToFloat64(m.connects), testutil.ToFloat64(m.connLost); c != 1 || n != 1 || l != 0 {
		t.Errorf("after subscribing: connected %v, connects %v, lost %v; want 1, 1, 0", c, n, l)
	}

	ts := baseTS()
	pub := publisher(t, mosquittoAddr, prefix+"-pub", "", "")
	publish(t, pub, prefix+"/pump-1/readings",
		fmt.Sprintf(`{"ts":%d,"metrics":{"a":1,"b":2}}`, ts),
		`not json`,
		fmt.Sprintf(`{"ts":%d,"metrics":{"a":3}}`, ts+1))
	eventually(t, 30*time.Second, "three messages stored", func() bool { return testutil.ToFloat64(m.messages) == 3 })
	if got := testutil.ToFloat64(m.readings); got != 2 {
		t.Errorf("readings decoded %v, want 2", got)
	}
	if got := testutil.CollectAndCount(m.deadLetters); got != 1 {
		t.Errorf("%d dead letter reasons, want 1", got)
	} else if v := testutil.ToFloat64(m.deadLetters); v != 1 {
		t.Errorf("dead letters %v, want 1", v)
	}
	if busy, failed := testutil.ToFloat64(m.retries.WithLabelValues("busy")), testutil.ToFloat64(m.retries.WithLabelValues("error")); busy != 2 || failed != 1 {
		t.Errorf("write retries busy %v, error %v; want 2, 1", busy, failed)
	}
	var ack dto.Metric
	if err := m.ackSeconds.Write(&ack); err != nil {
		t.Fatal(err)
	}
	if n := ack.GetHistogram().GetSampleCount(); n != 3 {
		t.Errorf("ack latency observed %d times, want once per message (3)", n)
	}
	eventually(t, 10*time.Second, "nothing in flight", func() bool { return testutil.ToFloat64(m.inflight) == 0 })

	// Another client takes the gateway's client id (keeping its session):
	// the broker drops the gateway, which connects again.
	o := mqtt.NewClientOptions().AddBroker("tcp://" + mosquittoAddr).SetClientID(testConfig(mosquittoAddr, prefix).ClientID).
		SetCleanSession(false).SetAutoReconnect(false).SetConnectTimeout(5 * time.Second)
	thief := mqtt.NewClient(o)
	if tok := thief.Connect(); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
		t.Fatalf("connect with the gateway's client id: %v", tok.Error())
	}
	thief.Disconnect(0)
	defer func() {
		t.Logf("lost %v connects %v connected %v", testutil.ToFloat64(m.connLost), testutil.ToFloat64(m.connects), testutil.ToFloat64(m.connected))
	}()
	eventually(t, 30*time.Second, "connection lost and made again", func() bool {
		return testutil.ToFloat64(m.connLost) == 1 && testutil.ToFloat64(m.connects) == 2 && testutil.ToFloat64(m.connected) == 1
	})
	publish(t, pub, prefix+"/pump-1/readings", fmt.Sprintf(`{"ts":%d,"metrics":{"a":4}}`, ts+2))
	eventually(t, 30*time.Second, "the message after the reconnection stored", func() bool { return testutil.ToFloat64(m.messages) == 4 })
}
