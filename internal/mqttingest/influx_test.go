package mqttingest

import (
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/sluicehq/sluice/internal/decode"
	"github.com/sluicehq/sluice/internal/model"
)

func TestMatchFilter(t *testing.T) {
	for _, tt := range []struct {
		filter, topic string
		want          bool
	}{
		{"a/+/c", "a/b/c", true}, {"a/+/c", "a/b/d", false}, {"a/+", "a/b/c", false},
		{"a/#", "a", true}, {"a/#", "a/b/c", true}, {"#", "x/y", true}, {"+/+", "x/y", true},
		{"a/b", "a/b", true}, {"a/b", "a/b/c", false}, {"a/b/c", "a/b", false},
		{"#", "$SYS/x", false}, {"+/x", "$SYS/x", false}, {"$SYS/#", "$SYS/x", true},
		{"a/+/c", "a//c", true},
	} {
		if got := matchFilter(tt.filter, tt.topic); got != tt.want {
			t.Errorf("matchFilter(%q, %q) = %v, want %v", tt.filter, tt.topic, got, tt.want)
		}
	}
}

func TestTopicUnmarshalText(t *testing.T) {
	for in, want := range map[string]Topic{
		"a/+/b":          {Filter: "a/+/b", QoS: 1, PayloadFormat: "json"},
		"a/+/b:0":        {Filter: "a/+/b", QoS: 0, PayloadFormat: "json"},
		"a/+/b:1:influx": {Filter: "a/+/b", QoS: 1, PayloadFormat: "influx"},
		"a/+/b:auto":     {Filter: "a/+/b", QoS: 1, PayloadFormat: "auto"},
		"a:b/+:2":        {Filter: "a:b/+", QoS: 2, PayloadFormat: "json"},
	} {
		var got Topic
		if err := got.UnmarshalText([]byte(in)); err != nil {
			t.Fatal(err)
		}
		if got != want {
			t.Errorf("UnmarshalText(%q) = %+v, want %+v", in, got, want)
		}
	}
}

// TestLineProtocolPayloads runs payloads through the message decoding path
// with a per-topic payload format: line protocol where the topic's filter
// says influx (or auto and the payload is not JSON), the device of the
// topic for lines without a device tag, and dead letters with their
// reasons.
func TestLineProtocolPayloads(t *testing.T) {
	cfg := DefaultConfig()
	cfg.TopicTemplate = "tenants/{tenant}/devices/{device_id}/readings"
	cfg.Topics = []Topic{
		{Filter: "tenants/+/devices/+/readings", QoS: 1, PayloadFormat: FormatAuto},
	}
	now := time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)
	p, err := newParser(cfg, decode.DefaultLimits(), slog.New(slog.NewTextHandler(io.Discard, nil)), newMetrics(nil, false))
	if err != nil {
		t.Fatal(err)
	}
	const topic = "tenants/acme/devices/p1/readings"
	tests := []struct {
		name    string
		format  string
		payload string
		want    []model.Reading
		reason  string
	}{
		{name: "auto: line protocol", format: FormatAuto, payload: "cpu,host=p1,cpu=cpu0 usage=5 1795780800000000000\nmem used=7i 1795780800000000000",
			want: []model.Reading{{DeviceID: "p1", TS: 1795780800000, Metrics: []model.Metric{{Name: "cpu.usage:cpu.cpu0", Value: 5}, model.IntMetric("mem.used", 7)}}}},
		{name: "auto: JSON", format: FormatAuto, payload: ` {"ts":1795780800000,"metrics":{"v":1}}`,
			want: []model.Reading{{DeviceID: "p1", TS: 1795780800000, Metrics: []model.Metric{{Name: "v", Value: 1}}}}},
		{name: "influx: JSON is a syntax error", format: FormatInflux, payload: `{"ts":1795780800000,"metrics":{"v":1}}`, reason: "invalid_line_protocol"},
		{name: "json: line protocol is invalid JSON", format: FormatJSON, payload: "m v=1", reason: "invalid_json"},
		{name: "device tag of another device", format: FormatInflux, payload: "m,host=p2 v=1", reason: "device_mismatch"},
		{name: "bad value", format: FormatInflux, payload: "m v=18446744073709551615u", reason: "invalid_field"},
		{name: "syntax", format: FormatInflux, payload: "m v=1\nm v=", reason: "invalid_line_protocol"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p.cfg.Topics[0].PayloadFormat = tt.format
			tenant, rs, dl := p.decode(topic, []byte(tt.payload), now, now)
			if tenant != "acme" {
				t.Fatalf("tenant %q", tenant)
			}
			if tt.reason != "" {
				if dl == nil || dl.Reason != tt.reason {
					t.Fatalf("dead letter %+v, want reason %q", dl, tt.reason)
				}
				return
			}
			if dl != nil {
				t.Fatalf("dead letter %+v", dl)
			}
			if d := cmp.Diff(tt.want, rs); d != "" {
				t.Fatalf("readings (-want +got):\n%s", d)
			}
		})
	}
}
