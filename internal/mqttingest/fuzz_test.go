package mqttingest

import (
	"io"
	"log/slog"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/sluicehq/sluice/internal/decode"
)

// FuzzTopicTemplate parses a template and matches a topic against it:
// never a panic, and a topic that matches renders back to itself.
func FuzzTopicTemplate(f *testing.F) {
	f.Add("devices/{device_id}/readings", "devices/p1/readings")
	f.Add("tenants/{tenant}/devices/{device_id}/readings", "tenants/acme/devices/p1/readings")
	f.Add("{tenant}/{device_id}", "a/b/c")
	f.Add("x/{device_id}", "x/")
	f.Fuzz(func(t *testing.T, tmpl, topic string) {
		tm, err := ParseTemplate(tmpl)
		if err != nil {
			return
		}
		// The filter is a topic whose placeholders are "+": it must match.
		if _, _, err := tm.Match(tm.Filter()); err != nil {
			t.Errorf("template %q does not match its own filter %q: %v", tmpl, tm.Filter(), err)
		}
		tenant, device, err := tm.Match(topic)
		if err != nil {
			return
		}
		if device == "" || (tm.HasTenant() && tenant == "") {
			t.Fatalf("Match(%q) on %q gave an empty device or tenant", topic, tmpl)
		}
		if got := tm.Render(tenant, device); got != topic {
			t.Fatalf("template %q: Render(Match(%q)) = %q", tmpl, topic, got)
		}
	})
}

// FuzzPayload runs a topic and payload through the message decoding path:
// never a panic; the outcome is either readings of a valid tenant for the
// device of the topic, or a dead letter that keeps at most the configured
// bytes of the payload.
func FuzzPayload(f *testing.F) {
	f.Add("tenants/acme/devices/p1/readings", []byte(`{"ts":1,"metrics":{"v":1}}`))
	f.Add("tenants/acme/devices/p1/readings", []byte(`[{"device_id":"p1","ts":"2026-01-01T00:00:00Z","seq":3,"metrics":{"a":1,"b":2}}]`))
	f.Add("tenants/evil/devices/p1/readings", []byte(`{"ts":1,"metrics":{"v":1}}`))
	f.Add("tenants/acme/devices/p1/readings", []byte(`{"device_id":"p2","ts":1,"metrics":{"v":1}}`))
	f.Add("tenants/acme/devices/p1", []byte(`{`))
	cfg := DefaultConfig()
	cfg.TopicTemplate = "tenants/{tenant}/devices/{device_id}/readings"
	cfg.Tenants = []string{"acme", "globex"}
	cfg.MaxPayloadBytes = 4096
	cfg.DeadLetterPayloadBytes = 64
	p, err := newParser(cfg, decode.DefaultLimits(), slog.New(slog.NewTextHandler(io.Discard, nil)), newMetrics(nil, false))
	if err != nil {
		f.Fatal(err)
	}
	now := time.Unix(1_800_000_000, 0)
	f.Fuzz(func(t *testing.T, topic string, payload []byte) {
		tenant, rs, dl := p.decode(topic, payload, now, now)
		if dl != nil {
			if rs != nil {
				t.Fatal("both readings and a dead letter")
			}
			if len(dl.Payload) > 64 || dl.Truncated != (len(payload) > 64) || dl.Reason == "" || dl.Error == "" || dl.Tenant != tenant {
				t.Fatalf("bad dead letter %+v for a payload of %d bytes", dl, len(payload))
			}
			return
		}
		if tenant != "acme" && tenant != "globex" {
			t.Fatalf("readings accepted for tenant %q, not in the allow-list", tenant)
		}
		_, device, err := p.tmpl.Match(topic)
		if err != nil {
			t.Fatalf("readings accepted from topic %q that does not match: %v", topic, err)
		}
		for _, r := range rs {
			if r.DeviceID != device || !utf8.ValidString(r.DeviceID) {
				t.Fatalf("reading of device %q from the topic of %q", r.DeviceID, device)
			}
		}
	})
}
