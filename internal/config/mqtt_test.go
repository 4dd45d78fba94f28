package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/sluicehq/sluice/internal/broker"
	"github.com/sluicehq/sluice/internal/mqttingest"
)

func TestMQTTFromEnvironment(t *testing.T) {
	t.Chdir(t.TempDir())
	got, _, err := Load("", []string{
		"SLUICE_MQTT_ENABLED=true",
		"SLUICE_MQTT_BROKERS=tcp://127.0.0.1:1883, ssl://broker.example:8883",
		"SLUICE_MQTT_TOPICS=tenants/+/devices/+/readings:1",
		"SLUICE_MQTT_TOPIC_TEMPLATE=tenants/{tenant}/devices/{device_id}/readings",
		"SLUICE_MQTT_TENANTS=acme,globex",
		"SLUICE_MQTT_SHARED_GROUP=ingest",
	})
	if err != nil {
		t.Fatal(err)
	}
	want := Default().MQTT
	want.Enabled = true
	want.Brokers = []string{"tcp://127.0.0.1:1883", "ssl://broker.example:8883"}
	want.Topics = []mqttingest.Topic{{Filter: "tenants/+/devices/+/readings", QoS: 1, PayloadFormat: "json"}}
	want.TopicTemplate = "tenants/{tenant}/devices/{device_id}/readings"
	want.Tenants = []string{"acme", "globex"}
	want.SharedGroup = "ingest"
	if diff := cmp.Diff(want, got.MQTT); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}

func TestMQTTFromFile(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "c.yaml")
	yaml := `mqtt:
  topics:
    - filter: a/+/b
      qos: 0
    - filter: c/#
      qos: 1
  embedded:
    enabled: true
    users:
      - username: pump-17
        password: secret-secret
        device_id: pump-17
`
	if err := os.WriteFile(file, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	got, _, err := Load(file, []string{"SLUICE_MQTT_EMBEDDED_LISTEN=127.0.0.1:11883"})
	if err != nil {
		t.Fatal(err)
	}
	want := Default().MQTT
	want.Topics = []mqttingest.Topic{{Filter: "a/+/b", QoS: 0}, {Filter: "c/#", QoS: 1}}
	want.Embedded.Enabled = true
	want.Embedded.Listen = "127.0.0.1:11883"
	want.Embedded.Users = []broker.User{{Username: "pump-17", Password: "secret-secret", DeviceID: "pump-17"}}
	if diff := cmp.Diff(want, got.MQTT); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}

func TestMQTTBadSettings(t *testing.T) {
	tests := []struct {
		name string
		env  []string
		want []string
	}{
		{"bad broker", []string{"SLUICE_MQTT_ENABLED=true", "SLUICE_MQTT_BROKERS=localhost"}, []string{`mqtt.brokers[0]: "localhost" is not a broker URL`}},
		{"no device level", []string{"SLUICE_MQTT_ENABLED=true", "SLUICE_MQTT_TOPIC_TEMPLATE=devices/readings"}, []string{"mqtt.topic_template", "no {device_id}"}},
		{"bad qos", []string{"SLUICE_MQTT_ENABLED=true", "SLUICE_MQTT_TOPICS=devices/+/readings:3"}, []string{"mqtt.topics[0].qos: must be 0, 1 or 2, got 3"}},
		{"share in filter", []string{"SLUICE_MQTT_ENABLED=true", "SLUICE_MQTT_TOPICS=$share/g/devices/+"}, []string{"mqtt.topics[0].filter", "set mqtt.shared_group instead"}},
		{"inflight", []string{"SLUICE_MQTT_ENABLED=true", "SLUICE_MQTT_MAX_INFLIGHT=0"}, []string{"mqtt.max_inflight: must be 1..65535, got 0"}},
		{"embedded without accounts", []string{"SLUICE_MQTT_EMBEDDED_ENABLED=true"}, []string{"mqtt.embedded.users: no device could publish"}},
		{"bad tenant", []string{"SLUICE_MQTT_ENABLED=true", "SLUICE_MQTT_TENANT=a/b"}, []string{`mqtt.tenant: "a/b"`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Chdir(t.TempDir())
			_, _, err := Load("", tt.env)
			if err == nil {
				t.Fatal("Load accepted a bad setting")
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
		})
	}
}

// The subscriber's settings are not checked when the embedded broker
// receives the messages: it has no subscription.
func TestMQTTEmbeddedIgnoresSubscriberSettings(t *testing.T) {
	t.Chdir(t.TempDir())
	_, _, err := Load("", []string{"SLUICE_MQTT_EMBEDDED_ENABLED=true", "SLUICE_MQTT_EMBEDDED_ALLOW_ANONYMOUS=true",
		"SLUICE_MQTT_MAX_INFLIGHT=0", "SLUICE_MQTT_TOPICS=$share/g/devices/+", "SLUICE_MQTT_KEEP_ALIVE=0s"})
	if err != nil {
		t.Errorf("Load with the embedded broker rejected subscriber settings: %v", err)
	}
}
