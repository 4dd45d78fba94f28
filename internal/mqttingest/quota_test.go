package mqttingest

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	mqtt "github.com/eclipse/paho.mqtt.golang"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice/internal/broker"
	"github.com/sluicehq/sluice/internal/buckets"
	"github.com/sluicehq/sluice/internal/decode"
	"github.com/sluicehq/sluice/internal/quota"
	"github.com/sluicehq/sluice/internal/reader"
	"github.com/sluicehq/sluice/internal/testenv"
)

// slowQuota lets tenant acme store perSecond readings a second, from a
// burst of burst.
func slowQuota(perSecond, burst int64) (*quota.Quotas, *prometheus.Registry) {
	reg := prometheus.NewRegistry()
	return quota.New(quota.Config{Tenants: []quota.Override{{Tenant: "acme", RowsPerSecond: &perSecond, RowBurst: &burst}}},
		[]string{"acme"}, time.Now, reg), reg
}

func quotaWaits(t *testing.T, reg *prometheus.Registry) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var sum float64
	for _, mf := range mfs {
		if mf.GetName() == "sluice_quota_waits_total" {
			for _, m := range mf.GetMetric() {
				sum += m.GetCounter().GetValue()
			}
		}
	}
	return sum
}

// durable reports whether the reading of device at ts is in the store.
func durable(t *testing.T, st reader.Store, device string, ts int64) bool {
	t.Helper()
	rs, _, err := reader.Readings(context.Background(), st, reader.Query{Tenant: "acme", Series: device, From: ts, To: ts + 1, Limit: 10})
	if err != nil {
		t.Error(err)
		return false
	}
	return len(rs) == 1
}

// A tenant over its quota on the subscriber is slowed, not dropped: every
// message is stored and acknowledged, each only once its rows are durable,
// and the writes waited for the quota. Needs no broker: paho's handler is
// called directly, as its router would.
func TestSubscriberQuotaSlowsTenant(t *testing.T) {
	const n = 30
	cfg := testConfig("127.0.0.1:1", "sluicetest/"+uniq(t))
	stk := newStack(t, buckets.DefaultConfig())
	q, reg := slowQuota(40, 5) // 25 readings over the burst: about 0.6 s
	in, err := New(cfg, stk.sk, decode.DefaultLimits(), time.Now, testLogger(t), prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	in.SetLimiter(q)
	if err := in.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = in.Stop(ctx)
	}()
	topic := strings.TrimSuffix(cfg.Topics[0].Filter, "/+/readings") + "/dev-1/readings"
	base := baseTS()
	var acked, early atomic.Int32
	msgs := make([]*ackCheck, n)
	for i := range n {
		msgs[i] = &ackCheck{fakeMessage: fakeMessage{topic: topic, payload: fmt.Appendf(nil, `{"ts":%d,"metrics":{"v":%d}}`, base+int64(i), i)}}
		ts := base + int64(i)
		msgs[i].onAck = func() {
			if !durable(t, stk.st, "dev-1", ts) {
				early.Add(1)
			}
			acked.Add(1)
		}
	}
	go func() {
		for _, m := range msgs {
			in.handle(nil, m)
		}
	}()
	eventually(t, 30*time.Second, "every message acknowledged", func() bool { return acked.Load() == n })
	if e := early.Load(); e > 0 {
		t.Errorf("%d messages acknowledged before their rows were durable", e)
	}
	for i := range n {
		if !durable(t, stk.st, "dev-1", base+int64(i)) {
			t.Errorf("message %d not stored", i)
		}
	}
	if w := quotaWaits(t, reg); w == 0 {
		t.Error("no write waited for the quota")
	}
}

// ackCheck is a fake message that runs onAck when acknowledged.
type ackCheck struct {
	fakeMessage
	onAck func()
}

func (m *ackCheck) Ack() {
	m.onAck()
	m.fakeMessage.Ack()
}

// Stopping the subscriber ends the waits for a quota at once: the messages
// that waited are not acknowledged (the broker keeps them), and the stop
// does not wait out the quota.
func TestSubscriberQuotaWaitEndsAtStop(t *testing.T) {
	cfg := testConfig("127.0.0.1:1", "sluicetest/"+uniq(t))
	stk := newStack(t, buckets.DefaultConfig())
	q, reg := slowQuota(1, 1) // the second message would wait a second, the tenth ten
	in, err := New(cfg, stk.sk, decode.DefaultLimits(), time.Now, testLogger(t), prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	in.SetLimiter(q)
	if err := in.Start(); err != nil {
		t.Fatal(err)
	}
	topic := strings.TrimSuffix(cfg.Topics[0].Filter, "/+/readings") + "/dev-1/readings"
	base := baseTS()
	msgs := make([]*fakeMessage, 10)
	for i := range msgs {
		msgs[i] = &fakeMessage{topic: topic, payload: fmt.Appendf(nil, `{"ts":%d,"metrics":{"v":%d}}`, base+int64(i), i)}
		in.handle(nil, msgs[i]) // one at a time: the processor takes each as it comes
		time.Sleep(5 * time.Millisecond)
	}
	eventually(t, 30*time.Second, "a write waiting for the quota", func() bool { return quotaWaits(t, reg) > 0 })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	start := time.Now()
	if err := in.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d > 5*time.Second { // the quota would hold them ~9 s
		t.Errorf("Stop took %s: it waited out the quota", d)
	}
	for i, m := range msgs {
		stored := durable(t, stk.st, "dev-1", base+int64(i))
		if m.acked.Load() > 0 && !stored {
			t.Errorf("message %d acknowledged and not stored", i)
		}
	}
	if msgs[len(msgs)-1].acked.Load() > 0 {
		t.Error("the last message was acknowledged: it cannot have passed the quota")
	}
}

// On the embedded broker, a device of a tenant over its quota is slowed:
// each of its messages is acknowledged once its rows are durable, none is
// dropped, and another tenant's device is not held back meanwhile.
func TestEmbeddedQuotaSlowsTenant(t *testing.T) {
	prefix := "sluicetest/" + uniq(t)
	cfg := testConfig("", prefix)
	cfg.TopicTemplate = prefix + "/{tenant}/{device_id}/readings"
	cfg.Topics = []Topic{{Filter: prefix + "/+/+/readings", QoS: 1}}
	stk := newStack(t, buckets.DefaultConfig())
	q, reg := slowQuota(2, 5) // acme: a message of 5 readings, then one every 2.5 s
	addr := testenv.FreeAddr(t)
	rc, err := NewReceiver(cfg, stk.sk, decode.DefaultLimits(), time.Now, testLogger(t), prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	rc.SetLimiter(q)
	b, err := broker.Start(broker.Config{Enabled: true, Listen: addr, AllowAnonymous: true}, rc.BrokerOptions(t.TempDir()), testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })

	base := baseTS()
	five := func(first int64) string {
		var rs []string
		for i := range int64(5) {
			rs = append(rs, fmt.Sprintf(`{"device_id":"dev-1","ts":%d,"metrics":{"v":%d}}`, first+i, i))
		}
		return "[" + strings.Join(rs, ",") + "]"
	}
	slow := oneShotPublisher(t, addr, prefix+"-slow")
	toks := []mqtt.Token{
		slow.Publish(prefix+"/acme/dev-1/readings", 1, false, five(base)),
		slow.Publish(prefix+"/acme/dev-1/readings", 1, false, five(base+5)),
	}
	if !toks[0].WaitTimeout(30*time.Second) || toks[0].Error() != nil {
		t.Fatalf("first message (within the burst): %v", toks[0].Error())
	}
	// While acme's second message waits for its quota, another tenant's
	// device is served: it is not held behind acme.
	other := oneShotPublisher(t, addr, prefix+"-other")
	for i := range 20 {
		tok := other.Publish(prefix+"/beta/dev-2/readings", 1, false, fmt.Sprintf(`{"ts":%d,"metrics":{"v":%d}}`, base+int64(i), i))
		if !tok.WaitTimeout(30*time.Second) || tok.Error() != nil {
			t.Fatalf("other tenant's message %d: %v", i, tok.Error())
		}
	}
	select {
	case <-toks[1].Done():
		t.Error("acme's second message was acknowledged before the other tenant's 20: its quota did not hold it")
	default:
	}
	if !toks[1].WaitTimeout(30*time.Second) || toks[1].Error() != nil {
		t.Fatalf("acme's second message not acknowledged: %v", toks[1].Error())
	}
	// Acknowledged means durable: read at once.
	for i := range int64(10) {
		if !durable(t, stk.st, "dev-1", base+i) {
			t.Errorf("reading %d acknowledged and not stored", i)
		}
	}
	if w := quotaWaits(t, reg); w == 0 {
		t.Error("no message waited for the quota")
	}
}
