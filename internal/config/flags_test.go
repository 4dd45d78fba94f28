package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/spf13/pflag"

	"github.com/sluicehq/sluice/internal/retention"
)

// parseFlags registers the setting flags on a fresh flag set and parses args.
func parseFlags(t *testing.T, args ...string) (*Flags, error) {
	t.Helper()
	fs := pflag.NewFlagSet("test", pflag.ContinueOnError)
	fs.SetOutput(new(strings.Builder))
	f := AddFlags(fs)
	return f, fs.Parse(args)
}

func writeFile(t *testing.T, body string) string {
	t.Helper()
	file := filepath.Join(t.TempDir(), "ingest.yaml")
	if err := os.WriteFile(file, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return file
}

// TestPrecedence: flag > environment > file > default, key by key, and the
// origin of each value is reported.
func TestPrecedence(t *testing.T) {
	t.Chdir(t.TempDir())
	file := writeFile(t, "http:\n  addr: 127.0.0.1:1001\n  read_timeout: 11s\nsink:\n  linger: 1ms\nbuckets:\n  max_rows: 1001\n")
	tests := []struct {
		name       string
		file       string
		env, flags []string
		addr       string
		origin     string
	}{
		{"default", "", nil, nil, "127.0.0.1:8080", ""},
		{"file over default", file, nil, nil, "127.0.0.1:1001", "file"},
		{"env over file", file, []string{"SLUICE_HTTP_ADDR=127.0.0.1:1002"}, nil, "127.0.0.1:1002", "env SLUICE_HTTP_ADDR"},
		{"flag over env", file, []string{"SLUICE_HTTP_ADDR=127.0.0.1:1002"}, []string{"--http.addr", "127.0.0.1:1003"}, "127.0.0.1:1003", "flag --http.addr"},
		{"flag over file", file, nil, []string{"--http.addr=127.0.0.1:1004"}, "127.0.0.1:1004", "flag --http.addr"},
		{"flag over default", "", nil, []string{"--http.addr=127.0.0.1:1005"}, "127.0.0.1:1005", "flag --http.addr"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f, err := parseFlags(t, tt.flags...)
			if err != nil {
				t.Fatal(err)
			}
			c, l, err := LoadSources(Sources{File: tt.file, Env: tt.env, Flags: f})
			if err != nil {
				t.Fatal(err)
			}
			if c.HTTP.Addr != tt.addr || l.Origin["http.addr"] != tt.origin {
				t.Fatalf("http.addr = %q from %q, want %q from %q", c.HTTP.Addr, l.Origin["http.addr"], tt.addr, tt.origin)
			}
		})
	}
}

// TestFlagsOfEveryType sets one setting of each kind by flag.
func TestFlagsOfEveryType(t *testing.T) {
	t.Chdir(t.TempDir())
	f, err := parseFlags(t,
		"--data_dir", "/srv/sluice",
		"--buckets.max_rows=5000",
		"--sink.linger", "5ms",
		"--mqtt.enabled",
		"--rollups.enabled=false",
		"--store.cassandra.hosts", "10.0.0.1:9042, 10.0.0.2",
		"--auth.tokens", "token-one-1=tenantA,token-two-2=tenantB",
		"--mqtt.topics", "tenants/+/devices/+/readings:1",
		"--mqtt.topic_template", "tenants/{tenant}/devices/{device_id}/readings",
		"--retention.readings", "90d",
	)
	if err != nil {
		t.Fatal(err)
	}
	got, l, err := LoadSources(Sources{Flags: f})
	if err != nil {
		t.Fatal(err)
	}
	want := Default()
	want.DataDir = "/srv/sluice"
	want.Buckets.MaxRows = 5000
	want.Sink.Linger = 5 * time.Millisecond
	want.MQTT.Enabled = true
	want.Rollups.Enabled = false
	want.Store.Cassandra.Hosts = []string{"10.0.0.1:9042", "10.0.0.2"}
	want.Auth.Tokens = []Token{{"token-one-1", "tenantA"}, {"token-two-2", "tenantB"}}
	want.MQTT.Topics[0].Filter = "tenants/+/devices/+/readings"
	want.MQTT.TopicTemplate = "tenants/{tenant}/devices/{device_id}/readings"
	want.Retention.Readings = retention.Duration(90 * 24 * time.Hour)
	// Rollups off: their databases' memory goes to the Go heap.
	p := want.Plan()
	want.Buckets.MaxSeriesDays, want.Buckets.MaxSettled, want.Rollups.MaxPending = p.SeriesDays, p.Settled, p.MaxPending
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
	if o := l.Origin["mqtt.enabled"]; o != "flag --mqtt.enabled" {
		t.Errorf("origin of mqtt.enabled = %q", o)
	}
}

func TestFlagErrors(t *testing.T) {
	tests := []struct {
		args []string
		want string // in the parse or load error
	}{
		{[]string{"--http.adr", "x"}, "unknown flag: --http.adr"},
		{[]string{"--retention.tenants", "x"}, "unknown flag: --retention.tenants"},
		{[]string{"--http.read_timeout", "forever"}, `http.read_timeout (from --http.read_timeout): "forever" is not a duration`},
		{[]string{"--buckets.max_rows", "many"}, `buckets.max_rows (from --buckets.max_rows): "many" is not a whole number`},
		{[]string{"--mqtt.enabled=perhaps"}, `mqtt.enabled (from --mqtt.enabled): "perhaps" is not true or false`},
		{[]string{"--buckets.max_rows", "0"}, "buckets.max_rows: must be at least 1, got 0"},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			t.Chdir(t.TempDir())
			f, err := parseFlags(t, tt.args...)
			if err == nil {
				_, _, err = LoadSources(Sources{Flags: f})
			}
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("error = %v, want %q", err, tt.want)
			}
		})
	}
}

// TestEveryKeyHasAFlag: each setting but the file-only ones can be given
// as a flag.
func TestEveryKeyHasAFlag(t *testing.T) {
	fs := pflag.NewFlagSet("test", pflag.ContinueOnError)
	AddFlags(fs)
	v := 0
	for _, k := range knownKeys() {
		if fs.Lookup(k) == nil && k != "mqtt.embedded.users" && k != "retention.tenants" {
			t.Errorf("no flag --%s", k)
		}
		v++
	}
	if v < 100 {
		t.Fatalf("only %d keys", v)
	}
}

// TestEffective: secrets are redacted, the origin of each value is shown,
// and the output, secrets aside, loads back to the same configuration.
func TestEffective(t *testing.T) {
	t.Chdir(t.TempDir())
	file := writeFile(t, `auth:
  tokens:
    - token: file-token-secret-1
      tenant: acme
store:
  cassandra:
    password: cass-password-secret
mqtt:
  embedded:
    users:
      - username: pump-17
        password: mqtt-user-secret
        device_id: pump-17
retention:
  tenants:
    acme:
      readings: 90d
`)
	env := []string{"SLUICE_ROLLUPS_CLICKHOUSE_PASSWORD=ch-password-secret", "SLUICE_SINK_LINGER=5ms"}
	f, err := parseFlags(t, "--mqtt.password", "mqtt-password-secret", "--http.addr", "127.0.0.1:9999")
	if err != nil {
		t.Fatal(err)
	}
	c, l, err := LoadSources(Sources{File: file, Env: env, Flags: f})
	if err != nil {
		t.Fatal(err)
	}
	out := Effective(c, l)
	for _, secret := range []string{"file-token-secret-1", "cass-password-secret", "mqtt-user-secret", "ch-password-secret", "mqtt-password-secret"} {
		if strings.Contains(out, secret) {
			t.Errorf("secret %q in the output:\n%s", secret, out)
		}
	}
	for _, line := range []string{
		`  addr: "127.0.0.1:9999"  # flag --http.addr`,
		`  linger: 5ms  # env SLUICE_SINK_LINGER`,
		`  tokens:  # file`,
		`    - token: "<redacted>"`,
		`    password: "<redacted>"  # file`,
		`    password: "<redacted>"  # env SLUICE_ROLLUPS_CLICKHOUSE_PASSWORD`,
		`  password: "<redacted>"  # flag --mqtt.password`,
		`    username: ""  # default`,
		`  tenants:  # file`,
		`      readings: "90d"`,
		`  max_rows: 100000  # default`,
	} {
		if !strings.Contains(out, line+"\n") {
			t.Errorf("output lacks %q:\n%s", line, out)
		}
	}
	// Loaded back (with the redacted secrets), it is the same configuration
	// but for the secrets.
	back, _, err := Load(writeFile(t, out), nil)
	if err != nil {
		t.Fatalf("output does not load: %v\n%s", err, out)
	}
	back.Auth.Tokens[0].Token = c.Auth.Tokens[0].Token
	back.Store.Cassandra.Password = c.Store.Cassandra.Password
	back.MQTT.Embedded.Users[0].Password = c.MQTT.Embedded.Users[0].Password
	back.Rollups.ClickHouse.Password = c.Rollups.ClickHouse.Password
	back.MQTT.Password = c.MQTT.Password
	if diff := cmp.Diff(c, back); diff != "" {
		t.Errorf("output loads differently (-want +got):\n%s", diff)
	}
}
