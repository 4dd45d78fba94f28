package e2e

import (
	"bufio"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	mqtt "github.com/eclipse/paho.mqtt.golang"

	"github.com/sluicehq/sluice/internal/testenv"
)

// Secrets of TestNoSecretsInLogs: none may appear in a log line.
const (
	secretToken      = "e2e-secret-bearer-token-7f3a"
	secretCassandra  = "e2e-secret-cassandra-pw-91c2"
	secretClickHouse = "e2e-secret-clickhouse-pw-5d0e"
	secretDevice     = "e2e-secret-device-pw-c4b8"
	secretCursorKey  = "e2e-secret-cursor-key-0123456789abcdef0123456789abcdef"
)

// TestNoSecretsInLogs runs the gateway with JSON logs at debug level and
// every kind of secret configured, makes it fail in many ways (bad tokens,
// the token in a query string, bad bodies and parameters, unknown paths, a
// device with a wrong password), and checks that no secret reaches the
// log, that every line is JSON, and that every request's line and error
// body carry its request id.
func TestNoSecretsInLogs(t *testing.T) {
	dir := t.TempDir()
	keyFile := filepath.Join(dir, "cursor.key")
	if err := os.WriteFile(keyFile, []byte(secretCursorKey+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	brokerAddr := testenv.FreeAddr(t)
	cfg := `store:
  cassandra:
    username: sluice
    password: ` + secretCassandra + `
rollups:
  clickhouse:
    password: ` + secretClickHouse + `
mqtt:
  tenant: acme
  embedded:
    enabled: true
    listen: "` + brokerAddr + `"
    users:
      - username: pump-9
        password: ` + secretDevice + `
        device_id: pump-9
`
	file := filepath.Join(dir, "ingest.yaml")
	if err := os.WriteFile(file, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	g := startGateway(t, t.TempDir(), "SLUICE_CONFIG="+file, "SLUICE_LOG_FORMAT=json", "SLUICE_LOG_LEVEL=debug",
		"SLUICE_AUTH_TOKENS="+secretToken+"=acme", "SLUICE_READ_CURSOR_KEY_FILE="+keyFile)

	type call struct {
		method, path, auth, body string
		status                   int
	}
	good := "Bearer " + secretToken
	calls := []call{
		{"POST", "/v1/readings", "Bearer " + secretToken + "x", "{}", 401},
		{"POST", "/v1/readings", secretToken, "{}", 401},
		{"GET", "/v1/readings?device=pump-9&token=" + secretToken, "Bearer wrong-" + secretToken, "", 401},
		{"POST", "/v1/readings", good, `{"device_id":"pump-9","ts":"nonsense","metrics":{"a":1}}`, 400},
		{"POST", "/v1/readings", good, `{"device_id":"` + secretToken + ` !","ts":"2020-01-01T00:00:00Z","metrics":{"a":1}}`, 400},
		{"GET", "/v1/readings?device=pump-9&from=yesterday", good, "", 400},
		{"GET", "/v1/readings?device=pump-9&cursor=" + secretCursorKey, good, "", 400},
		{"GET", "/nowhere/" + secretToken, good, "", 404},
	}
	hc := &http.Client{Timeout: 10 * time.Second}
	ids := map[string]bool{}
	for _, c := range calls {
		req, err := http.NewRequest(c.method, g.url+c.path, strings.NewReader(c.body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", c.auth)
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		var eb struct {
			RequestID string `json:"request_id"`
		}
		_ = json.Unmarshal(b, &eb)
		id := resp.Header.Get("X-Request-Id")
		if resp.StatusCode != c.status || id == "" || eb.RequestID != id {
			t.Errorf("%s %s: %d %s (X-Request-Id %q), want %d with the request id in the body", c.method, c.path, resp.StatusCode, b, id, c.status)
		}
		ids[id] = true
	}
	// A device with a wrong password is refused by the embedded broker.
	o := mqtt.NewClientOptions().AddBroker("tcp://" + brokerAddr).SetClientID("e2e-wrong").
		SetUsername("pump-9").SetPassword("wrong-" + secretDevice).SetAutoReconnect(false).SetConnectTimeout(5 * time.Second)
	mc := mqtt.NewClient(o)
	if tok := mc.Connect(); tok.WaitTimeout(10*time.Second) && tok.Error() == nil {
		mc.Disconnect(0)
		t.Error("the broker accepted a wrong password")
	}
	g.stop()

	logs := g.logs()
	for _, s := range []string{secretToken, secretCassandra, secretClickHouse, secretDevice, secretCursorKey} {
		if strings.Contains(logs, s) {
			t.Errorf("secret %q in the log:\n%s", s, logs)
		}
	}
	seen := map[string]bool{}
	sc := bufio.NewScanner(strings.NewReader(logs))
	for sc.Scan() {
		var rec map[string]any
		if err := json.Unmarshal(sc.Bytes(), &rec); err != nil {
			t.Errorf("log line is not JSON: %s", sc.Text())
			continue
		}
		if rec["msg"] == "http request" {
			id, _ := rec["request_id"].(string)
			if !ids[id] {
				t.Errorf("request log line without a request id of ours: %s", sc.Text())
			}
			seen[id] = true
		}
	}
	if len(seen) != len(ids) {
		t.Errorf("%d requests, %d of them logged with their id:\n%s", len(ids), len(seen), logs)
	}
}

// TestCheckConfig runs ingest check-config with a file, the environment
// and flags: it prints the effective configuration, each value's source,
// no secret; an unknown flag or key is an error.
func TestCheckConfig(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "ingest.yaml")
	if err := os.WriteFile(file, []byte("http:\n  addr: 127.0.0.1:1001\nstore:\n  cassandra:\n    password: "+secretCassandra+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	run := func(env []string, args ...string) (string, string, int) {
		cmd := exec.Command(filepath.Join(bin, "ingest"), args...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), env...)
		var out, errb strings.Builder
		cmd.Stdout, cmd.Stderr = &out, &errb
		err := cmd.Run()
		code := 0
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		return out.String(), errb.String(), code
	}
	out, errOut, code := run([]string{"SLUICE_SINK_LINGER=5ms", "SLUICE_AUTH_TOKENS=" + secretToken + "=acme"},
		"check-config", "--config", file, "--buckets.max_rows", "5000", "--log.format=json")
	if code != 0 {
		t.Fatalf("check-config: exit %d\n%s", code, errOut)
	}
	for _, want := range []string{
		"  addr: \"127.0.0.1:1001\"  # file\n",
		"  linger: 5ms  # env SLUICE_SINK_LINGER\n",
		"  max_rows: 5000  # flag --buckets.max_rows\n",
		"  format: \"json\"  # flag --log.format\n",
		"  shutdown_timeout: 30s  # default\n",
		"    password: \"<redacted>\"  # file\n",
		"  tokens:  # env SLUICE_AUTH_TOKENS\n    - token: \"<redacted>\"\n      tenant: \"acme\"\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("check-config output lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, secretCassandra) || strings.Contains(out, secretToken) {
		t.Errorf("a secret in the check-config output:\n%s", out)
	}
	if _, errOut, code := run(nil, "check-config", "--config", file, "--http.adr", "x"); code != 2 || !strings.Contains(errOut, "unknown flag: --http.adr") {
		t.Errorf("unknown flag: exit %d, %q", code, errOut)
	}
	bad := filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(bad, []byte("http:\n  adr: x\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, errOut, code := run(nil, "check-config", "--config", bad); code != 1 || !strings.Contains(errOut, "http.adr: unknown setting") {
		t.Errorf("unknown key: exit %d, %q", code, errOut)
	}
}
