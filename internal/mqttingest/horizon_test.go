package mqttingest

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice/internal/broker"
	"github.com/sluicehq/sluice/internal/buckets"
	"github.com/sluicehq/sluice/internal/decode"
	"github.com/sluicehq/sluice/internal/model"
)

// A reading older than the tenant's retention horizon becomes a dead letter
// naming the horizon; one inside it is stored.
func TestRetentionHorizon(t *testing.T) {
	prefix := "sluicetest/" + uniq(t)
	b := startEmbedded(t, prefix, broker.Config{Enabled: true, Listen: "127.0.0.1:0", AllowAnonymous: true})
	cfg := testConfig(b.Addr(), prefix)
	cfg.Username, cfg.Password = broker.SubscriberUsername, embeddedGatewayPassword
	stk := newStack(t, buckets.DefaultConfig())
	in, err := New(cfg, stk.sk, decode.DefaultLimits(), time.Now, testLogger(t), prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	var asked []string
	in.SetHorizon(func(k model.Kind, tenant string, now time.Time) time.Time {
		asked = append(asked, k.String()+"/"+tenant)
		return now.Add(-7 * 24 * time.Hour)
	})
	if err := in.Start(); err != nil {
		t.Fatal(err)
	}
	g := &gateway{in: in}
	select {
	case <-in.Subscribed():
	case <-time.After(30 * time.Second):
		t.Fatal("gateway did not subscribe within 30s")
	}
	pub := publisher(t, b.Addr(), prefix+"-pub", "", "")
	fresh, old := time.Now().Add(-time.Hour).UnixMilli(), time.Now().Add(-8*24*time.Hour).UnixMilli()
	publish(t, pub, prefix+"/dev-old/readings", fmt.Sprintf(`{"ts":%d,"metrics":{"v":1}}`, old))
	publish(t, pub, prefix+"/dev-new/readings", fmt.Sprintf(`{"ts":%d,"metrics":{"v":2}}`, fresh))
	eventually(t, time.Minute, "fresh reading and dead letter stored", func() bool {
		return len(readAll(t, stk.st, "acme", []string{"dev-new"}, fresh, fresh+1)) == 1 && len(deadLetters(t, stk.st, "acme")) == 1
	})
	g.stop(t)
	dl := deadLetters(t, stk.st, "acme")[0]
	if dl.Reason != "invalid_field" || !strings.Contains(dl.Error, "older than the retention horizon") {
		t.Errorf("dead letter %q: %q, want invalid_field naming the retention horizon", dl.Reason, dl.Error)
	}
	if len(readAll(t, stk.st, "acme", []string{"dev-old"}, old, old+1)) != 0 {
		t.Error("the reading older than the horizon was stored")
	}
	if len(asked) == 0 || asked[0] != "readings/acme" {
		t.Errorf("horizon asked for %v, want readings/acme", asked)
	}
}
