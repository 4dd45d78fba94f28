package mqttingest

import (
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/decode"
)

func TestTemplate(t *testing.T) {
	tests := []struct {
		tmpl, topic         string
		tenant, device, err string
		filter              string
	}{
		{tmpl: "devices/{device_id}/readings", topic: "devices/pump-17/readings", device: "pump-17", filter: "devices/+/readings"},
		{tmpl: "tenants/{tenant}/devices/{device_id}/readings", topic: "tenants/acme/devices/p1/readings", tenant: "acme", device: "p1", filter: "tenants/+/devices/+/readings"},
		{tmpl: "{device_id}", topic: "p1", device: "p1", filter: "+"},
		{tmpl: "{tenant}/{device_id}", topic: "acme/p1", tenant: "acme", device: "p1", filter: "+/+"},
		{tmpl: "devices/{device_id}/readings", topic: "devices/p1/readings/extra", err: "more levels"},
		{tmpl: "devices/{device_id}/readings", topic: "devices/p1", err: "fewer levels"},
		{tmpl: "devices/{device_id}/readings", topic: "device/p1/readings", err: `level 0 is "device"`},
		{tmpl: "devices/{device_id}/readings", topic: "devices//readings", err: "device_id level is empty"},
		{tmpl: "t/{tenant}/{device_id}", topic: "t//p1", err: "tenant level is empty"},
	}
	for _, tt := range tests {
		t.Run(tt.tmpl+" "+tt.topic, func(t *testing.T) {
			tm, err := ParseTemplate(tt.tmpl)
			if err != nil {
				t.Fatal(err)
			}
			if got := tm.Filter(); got != tt.filter && tt.filter != "" {
				t.Errorf("Filter() = %q, want %q", got, tt.filter)
			}
			tenant, device, err := tm.Match(tt.topic)
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("Match(%q) error = %v, want one containing %q", tt.topic, err, tt.err)
				}
				return
			}
			if err != nil || tenant != tt.tenant || device != tt.device {
				t.Fatalf("Match(%q) = %q, %q, %v; want %q, %q", tt.topic, tenant, device, err, tt.tenant, tt.device)
			}
			if got := tm.Render(tenant, device); got != tt.topic {
				t.Errorf("Render = %q, want %q", got, tt.topic)
			}
		})
	}
}

func TestParseTemplateErrors(t *testing.T) {
	for tmpl, want := range map[string]string{
		"":                              "is empty",
		"devices/readings":              "no {device_id}",
		"{device_id}/{device_id}":       "twice",
		"{tenant}/{tenant}/{device_id}": "twice",
		"d/{device}/r":                  "must be a literal",
		"d/x{device_id}/r":              "must be a literal",
		"d/+/{device_id}":               "wildcard",
		"d/#/{device_id}":               "wildcard",
		"$SYS/{device_id}":              "reserved",
	} {
		if _, err := ParseTemplate(tmpl); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("ParseTemplate(%q) error = %v, want one containing %q", tmpl, err, want)
		}
	}
}

func TestDeadLetterReason(t *testing.T) {
	now := time.Now()
	lim := decode.DefaultLimits()
	lim.MaxRows = 2
	tests := []struct {
		payload, device, want string
	}{
		{`{"ts":1,`, "d1", "invalid_json"},
		{`nope`, "d1", "invalid_json"},
		{`{"ts":1,"metrics":{"v":null}}`, "d1", "invalid_field"},
		{`{"ts":1,"metrics":{"v":1},"x":1}`, "d1", "invalid_field"},
		{`{"device_id":"d2","ts":1,"metrics":{"v":1}}`, "d1", "device_mismatch"},
		{`{"ts":1,"metrics":{"v":1}}`, "bad device!", "bad_topic"},
		{`[{"ts":1,"metrics":{"v":1}},{"ts":2,"metrics":{"v":1}},{"ts":3,"metrics":{"v":1}}]`, "d1", "too_many_rows"},
	}
	for _, tt := range tests {
		_, err := decode.Readings([]byte(tt.payload), decode.FormatJSON, now, lim, decode.Options{Device: tt.device})
		if err == nil {
			t.Fatalf("%s: decoded without error", tt.payload)
		}
		if got := deadLetterReason(err, []byte(tt.payload)); got != tt.want {
			t.Errorf("%s: reason %q (error %v), want %q", tt.payload, got, err, tt.want)
		}
	}
}

func TestFilters(t *testing.T) {
	c := DefaultConfig()
	c.Topics = []Topic{{Filter: "a/+/b", QoS: 1}, {Filter: "c/#", QoS: 0}}
	c.SharedGroup = "ingest"
	got := c.Filters()
	if len(got) != 2 || got["$share/ingest/a/+/b"] != 1 || got["$share/ingest/c/#"] != 0 {
		t.Errorf("Filters() = %v", got)
	}
}
