package mqttingest

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/broker"
	"github.com/sluicehq/sluice/internal/buckets"
	"github.com/sluicehq/sluice/internal/model"
)

// A reading older than the tenant's retention horizon becomes a dead letter
// naming the horizon; one inside it is stored.
func TestRetentionHorizon(t *testing.T) {
	prefix := "sluicetest/" + uniq(t)
	stk := newStack(t, buckets.DefaultConfig())
	b, rc := startEmbedded(t, prefix, testConfig("", prefix), broker.Config{Enabled: true, Listen: "127.0.0.1:0", AllowAnonymous: true}, stk.sk)
	var mu sync.Mutex
	var asked []string
	rc.SetHorizon(func(k model.Kind, tenant string, now time.Time) time.Time {
		mu.Lock()
		asked = append(asked, k.String()+"/"+tenant)
		mu.Unlock()
		return now.Add(-7 * 24 * time.Hour)
	})
	pub := publisher(t, b.Addr(), prefix+"-pub", "", "")
	fresh, old := time.Now().Add(-time.Hour).UnixMilli(), time.Now().Add(-8*24*time.Hour).UnixMilli()
	publish(t, pub, prefix+"/dev-old/readings", fmt.Sprintf(`{"ts":%d,"metrics":{"v":1}}`, old))
	publish(t, pub, prefix+"/dev-new/readings", fmt.Sprintf(`{"ts":%d,"metrics":{"v":2}}`, fresh))
	// Acknowledged means durable: no waiting.
	if got := len(readAll(t, stk.st, "acme", []string{"dev-new"}, fresh, fresh+1)); got != 1 {
		t.Fatalf("%d fresh readings stored once acknowledged, want 1", got)
	}
	dls := deadLetters(t, stk.st, "acme")
	if len(dls) != 1 {
		t.Fatalf("%d dead letters stored once acknowledged, want 1", len(dls))
	}
	if dls[0].Reason != "invalid_field" || !strings.Contains(dls[0].Error, "older than the retention horizon") {
		t.Errorf("dead letter %q: %q, want invalid_field naming the retention horizon", dls[0].Reason, dls[0].Error)
	}
	if len(readAll(t, stk.st, "acme", []string{"dev-old"}, old, old+1)) != 0 {
		t.Error("the reading older than the horizon was stored")
	}
	mu.Lock()
	defer mu.Unlock()
	if len(asked) == 0 || asked[0] != "readings/acme" {
		t.Errorf("horizon asked for %v, want readings/acme", asked)
	}
}
