package config

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/sluicehq/sluice/internal/membudget"
	"github.com/sluicehq/sluice/internal/retention"
	"github.com/sluicehq/sluice/internal/rollupfeed"
	"github.com/sluicehq/sluice/internal/tlsconf/tlstest"
)

func TestDefaultsAreValid(t *testing.T) {
	if err := Default().Validate(); err != nil {
		t.Fatalf("defaults do not validate: %v", err)
	}
}

// The shipped file must state exactly the defaults in code.
func TestShippedFileEqualsDefaults(t *testing.T) {
	got, _, err := Load(filepath.Join("..", "..", "configs", "ingest.yaml"), nil)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(Default(), got); diff != "" {
		t.Errorf("configs/ingest.yaml differs from Default() (-code +file):\n%s", diff)
	}
}

func TestNoFileMeansDefaults(t *testing.T) {
	t.Chdir(t.TempDir())
	got, file, err := Load("", nil)
	if err != nil {
		t.Fatal(err)
	}
	if file != "" {
		t.Errorf("file = %q, want none", file)
	}
	if diff := cmp.Diff(Default(), got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}

func TestEnvironmentOverrides(t *testing.T) {
	t.Chdir(t.TempDir())
	env := []string{
		"SLUICE_HTTP_ADDR=127.0.0.1:9999",
		"SLUICE_DATA_DIR=/var/lib/sluice",
		"SLUICE_AUTH_TOKENS=token-one-1=tenantA, token-two-2=tenantB",
		"SLUICE_BUCKETS_MAX_ROWS=5000",
		"SLUICE_SINK_LINGER=5ms",
		"SLUICE_STORE_PEBBLE_CACHE_BYTES=2097152",
		"SLUICE_URL=http://ignored", // belongs to the query tool
		"HOME=/root",
	}
	got, _, err := Load("", env)
	if err != nil {
		t.Fatal(err)
	}
	want := Default()
	want.HTTP.Addr = "127.0.0.1:9999"
	want.DataDir = "/var/lib/sluice"
	want.Auth.Tokens = []Token{{"token-one-1", "tenantA"}, {"token-two-2", "tenantB"}}
	want.Buckets.MaxRows = 5000
	want.Sink.Linger = 5 * time.Millisecond
	want.Store.Pebble.CacheBytes = 2 << 20
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}

func TestCassandraFromEnvironment(t *testing.T) {
	t.Chdir(t.TempDir())
	got, _, err := Load("", []string{
		"SLUICE_STORE_BACKEND=cassandra",
		"SLUICE_STORE_CASSANDRA_HOSTS=127.0.0.1:9042, 10.0.0.2 ,",
		"SLUICE_STORE_CASSANDRA_WRITE_CONSISTENCY=QUORUM",
		"SLUICE_STORE_CASSANDRA_REPLICATION_FACTOR=1",
		"SLUICE_STORE_CASSANDRA_TLS_ENABLED=true",
	})
	if err != nil {
		t.Fatal(err)
	}
	want := Default()
	want.Store.Backend = "cassandra"
	want.Store.Cassandra.Hosts = []string{"127.0.0.1:9042", "10.0.0.2"}
	want.Store.Cassandra.WriteConsistency = "QUORUM"
	want.Store.Cassandra.ReplicationFactor = 1
	want.Store.Cassandra.TLS.Enabled = true
	// Nothing is summed from commits: minutes long past share reads.
	want.Rollups.PastRollDelay = rollupfeed.DefaultConfig().PastRollDelay
	// Without the embedded store its memory goes to the Go heap.
	p := want.Plan()
	want.Buckets.MaxSeriesDays, want.Buckets.MaxSettled, want.Rollups.MaxPending = p.SeriesDays, p.Settled, p.MaxPending
	if p.SeriesDays <= Default().Buckets.MaxSeriesDays {
		t.Errorf("cassandra: %d series-days, no more than with the embedded store", p.SeriesDays)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
	_, _, err = Load("", []string{"SLUICE_STORE_BACKEND=cassandra", "SLUICE_STORE_CASSANDRA_HOSTS= , "})
	if err == nil || !strings.Contains(err.Error(), "store.cassandra.hosts: at least one") {
		t.Errorf("empty host list: err = %v", err)
	}
}

func TestFileOverridesAndEnvWins(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "c.yaml")
	yaml := "http:\n  addr: 0.0.0.0:8081\nauth:\n  tokens:\n    - token: abcdefgh-1\n      tenant: acme\nsink:\n  batch_rows: 500\n"
	if err := os.WriteFile(file, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	got, _, err := Load(file, []string{"SLUICE_SINK_BATCH_ROWS=700"})
	if err != nil {
		t.Fatal(err)
	}
	if got.HTTP.Addr != "0.0.0.0:8081" || got.Sink.BatchRows != 700 || len(got.Auth.Tokens) != 1 || got.Auth.Tokens[0].Tenant != "acme" {
		t.Errorf("got addr %q batch_rows %d tokens %+v", got.HTTP.Addr, got.Sink.BatchRows, got.Auth.Tokens)
	}
	if got.UsesDevToken() {
		t.Error("file replaced the token list, yet the dev token is still accepted")
	}
}

func TestBadSettings(t *testing.T) {
	tests := []struct {
		name string
		yaml string
		env  []string
		want []string // substrings of the error
	}{
		{name: "unknown key", yaml: "http:\n  adr: x\n", want: []string{"http.adr: unknown setting"}},
		{name: "bad addr", env: []string{"SLUICE_HTTP_ADDR=nonsense"}, want: []string{`http.addr: "nonsense" is not host:port`}},
		{name: "not a number", env: []string{"SLUICE_SINK_BATCH_ROWS=lots"}, want: []string{"sink.batch_rows", "lots"}},
		{name: "zero bound", env: []string{"SLUICE_BUCKETS_MAX_ROWS=0"}, want: []string{"buckets.max_rows: must be at least 1, got 0"}},
		{name: "bad duration", env: []string{"SLUICE_SINK_LINGER=soon"}, want: []string{"sink.linger", "soon"}},
		{name: "bad backend", env: []string{"SLUICE_STORE_BACKEND=mysql"}, want: []string{`store.backend: "mysql" is not supported`}},
		{name: "bad tenant", env: []string{"SLUICE_AUTH_TOKENS=abcdefghij=bad/tenant"}, want: []string{"auth.tokens[0].tenant", "bad/tenant"}},
		{name: "short token", env: []string{"SLUICE_AUTH_TOKENS=abc=t1"}, want: []string{"auth.tokens[0].token: must be at least 8 characters"}},
		{name: "token without tenant", env: []string{"SLUICE_AUTH_TOKENS=secretvalue"}, want: []string{"is not token=tenant"}},
		{name: "log level", env: []string{"SLUICE_LOG_LEVEL=loud"}, want: []string{`log.level: "loud"`}},
		{name: "body budget below one body", env: []string{"SLUICE_HTTP_MAX_INFLIGHT_BODY_BYTES=67108864"}, want: []string{"http.max_inflight_body_bytes: must be at least 1.5 × http.max_decompressed_bytes + 64 KiB (100728833), got 67108864"}},
		{name: "body admission timeout", env: []string{"SLUICE_HTTP_BODY_ADMISSION_TIMEOUT=-1s"}, want: []string{"http.body_admission_timeout: must be between 0s and 1m, got -1s"}},
		{name: "bound below metrics", env: []string{"SLUICE_BUCKETS_MAX_ROWS=10"}, want: []string{"buckets.max_rows: must be at least limits.max_metrics"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			t.Chdir(dir)
			file := ""
			if tt.yaml != "" {
				file = filepath.Join(dir, "c.yaml")
				if err := os.WriteFile(file, []byte(tt.yaml), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			_, _, err := Load(file, tt.env)
			if err == nil {
				t.Fatal("Load accepted a bad setting")
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
			if strings.Contains(err.Error(), "secretvalue") {
				t.Errorf("error %q leaks a token", err)
			}
		})
	}
}

func TestRetentionFromFileAndEnvironment(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "ingest.yaml")
	yaml := "retention:\n  audit: 2y\n  tenants:\n    acme:\n      readings: 90d\n    beta:\n      audit: 1000d\n      dead_letters: 7d\n"
	if err := os.WriteFile(file, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	got, _, err := Load(file, []string{"SLUICE_RETENTION_READINGS=45d", "SLUICE_RETENTION_INTERVAL=90m", "SLUICE_RETENTION_ROLLUPS=3y"})
	if err != nil {
		t.Fatal(err)
	}
	want := Default().Retention
	want.Readings = retention.Duration(45 * retention.Day)
	want.Audit = retention.Duration(2 * retention.Year)
	want.Rollups = retention.Duration(3 * retention.Year)
	want.Interval = retention.Duration(90 * time.Minute)
	want.Tenants = map[string]retention.Policy{
		"acme": {Readings: retention.Duration(90 * retention.Day)},
		"beta": {Audit: retention.Duration(1000 * retention.Day), DeadLetters: retention.Duration(7 * retention.Day)},
	}
	if diff := cmp.Diff(want, got.Retention); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}

func TestRetentionRefusals(t *testing.T) {
	for _, tc := range []struct {
		name string
		env  []string
		yaml string
		want string
	}{
		{name: "zero", env: []string{"SLUICE_RETENTION_READINGS=0"}, want: "retention.readings: must be a positive duration"},
		{name: "not a duration", env: []string{"SLUICE_RETENTION_AUDIT=forever"}, want: `"forever" is not a duration`},
		{name: "under a day", env: []string{"SLUICE_RETENTION_READINGS=12h"}, want: "retention.readings: must be at least 1d"},
		{name: "audit under floor", env: []string{"SLUICE_RETENTION_AUDIT=30d"}, want: "retention.audit: must be at least retention.audit_floor (90d), got 30d"},
		{name: "max_future", env: []string{"SLUICE_LIMITS_MAX_FUTURE=800h"}, want: "retention.readings: must be longer than limits.max_future"},
		{name: "tenant audit under floor", yaml: "retention:\n  tenants:\n    acme:\n      audit: 10d\n", want: "retention.tenants.acme.audit: must be at least retention.audit_floor"},
		{name: "unknown kind in override", yaml: "retention:\n  tenants:\n    acme:\n      metrics: 10d\n", want: "metrics"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Chdir(t.TempDir())
			file := ""
			if tc.yaml != "" {
				file = "x.yaml"
				if err := os.WriteFile(file, []byte(tc.yaml), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			_, _, err := Load(file, tc.env)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want it to contain %q", err, tc.want)
			}
		})
	}
}

func TestTLSSettings(t *testing.T) {
	t.Chdir(t.TempDir())
	dir := t.TempDir()
	ca := tlstest.NewCA(t, "test CA")
	certFile, keyFile := ca.Server(t, "gateway").Write(t, dir, "gateway")
	caFile := ca.WriteCA(t, dir, "ca.pem")
	got, _, err := Load("", []string{
		"SLUICE_HTTP_TLS_CERT_FILE=" + certFile, "SLUICE_HTTP_TLS_KEY_FILE=" + keyFile,
		"SLUICE_HTTP_TLS_CLIENT_AUTH=require", "SLUICE_HTTP_TLS_CLIENT_CA_FILE=" + caFile,
		"SLUICE_HTTP_TLS_RELOAD_INTERVAL=2s",
		"SLUICE_MQTT_EMBEDDED_ENABLED=true", "SLUICE_MQTT_EMBEDDED_ALLOW_ANONYMOUS=true",
		"SLUICE_MQTT_EMBEDDED_LISTEN=", "SLUICE_MQTT_EMBEDDED_TLS_LISTEN=0.0.0.0:8883",
		"SLUICE_MQTT_EMBEDDED_TLS_CERT_FILE=" + certFile, "SLUICE_MQTT_EMBEDDED_TLS_KEY_FILE=" + keyFile,
	})
	if err != nil {
		t.Fatal(err)
	}
	want := Default()
	want.HTTP.TLS.CertFile, want.HTTP.TLS.KeyFile = certFile, keyFile
	want.HTTP.TLS.ClientAuth, want.HTTP.TLS.ClientCAFile, want.HTTP.TLS.ReloadInterval = "require", caFile, 2*time.Second
	want.MQTT.Embedded.Enabled, want.MQTT.Embedded.AllowAnonymous = true, true
	want.MQTT.Embedded.Listen, want.MQTT.Embedded.TLSListen = "", "0.0.0.0:8883"
	want.MQTT.Embedded.TLS.CertFile, want.MQTT.Embedded.TLS.KeyFile = certFile, keyFile
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}

	for _, tt := range []struct {
		env  []string
		want string
	}{
		{[]string{"SLUICE_HTTP_TLS_CERT_FILE=" + certFile}, "http.tls.key_file: must be set with cert_file"},
		{[]string{"SLUICE_HTTP_TLS_CERT_FILE=" + certFile, "SLUICE_HTTP_TLS_KEY_FILE=" + caFile}, "http.tls.cert_file, key_file: "},
		{[]string{"SLUICE_HTTP_TLS_CLIENT_AUTH=always"}, `http.tls.client_auth: "always" is not one of none, request, require`},
	} {
		if _, _, err := Load("", tt.env); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%v: error %v, want one containing %q", tt.env, err, tt.want)
		}
	}
}

// Settings of earlier versions that no longer have an effect are accepted
// from the file and the environment, ignored, and reported as retired, so
// that an upgrade with an old configuration still starts; a misspelt
// setting is still refused.
func TestRetiredSettings(t *testing.T) {
	file := filepath.Join(t.TempDir(), "ingest.yaml")
	yaml := "rollups:\n  allowed_lateness: 2m\n  keep_closed: 10m\n  max_windows: 1000\n  roll_delay: 5s\n"
	if err := os.WriteFile(file, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	c, l, err := LoadSources(Sources{File: file, Env: []string{"SLUICE_ROLLUPS_QUEUE_BATCHES=64"}})
	if err != nil {
		t.Fatalf("a file with retired settings: %v", err)
	}
	if c.Rollups.RollDelay != 5*time.Second {
		t.Errorf("rollups.roll_delay = %s, want the file's 5s", c.Rollups.RollDelay)
	}
	want := []string{"rollups.allowed_lateness (file)", "rollups.keep_closed (file)", "rollups.max_windows (file)", "rollups.queue_batches (env SLUICE_ROLLUPS_QUEUE_BATCHES)"}
	var got []string
	for _, r := range l.Retired {
		name, _, _ := strings.Cut(r, ": ")
		got = append(got, name)
	}
	slices.Sort(got)
	if !slices.Equal(got, want) {
		t.Errorf("retired settings reported: %q, want %q", got, want)
	}
	if err := os.WriteFile(file, []byte("rollups:\n  allowed_latenes: 2m\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, _, err := LoadSources(Sources{File: file}); err == nil || !strings.Contains(err.Error(), "rollups.allowed_latenes: unknown setting") {
		t.Errorf("a misspelt setting: %v, want it refused", err)
	}
}

// Settings left at 0 take their share of memory.budget_bytes; settings given
// keep their value.
func TestMemoryBudgetSizesWhatIsNotSet(t *testing.T) {
	t.Chdir(t.TempDir())
	got, l, err := LoadSources(Sources{Env: []string{"SLUICE_MEMORY_BUDGET_BYTES=2147483648", "SLUICE_ROLLUPS_MAX_PENDING=5000"}})
	if err != nil {
		t.Fatal(err)
	}
	// check-config says where a sized value came from.
	if o := l.Origin["buckets.max_series_days"]; o != "default: 0, sized by memory.budget_bytes" {
		t.Errorf("origin of buckets.max_series_days = %q", o)
	}
	if o := l.Origin["rollups.max_pending"]; o != "env SLUICE_ROLLUPS_MAX_PENDING" {
		t.Errorf("origin of rollups.max_pending = %q", o)
	}
	p := membudget.For(2<<30, membudget.All)
	if got.Buckets.MaxSeriesDays != p.SeriesDays || got.Store.Pebble.CacheBytes != p.StoreCache {
		t.Errorf("2 GiB budget: max_series_days %d, cache_bytes %d; want %d, %d", got.Buckets.MaxSeriesDays, got.Store.Pebble.CacheBytes, p.SeriesDays, p.StoreCache)
	}
	if def := Default(); got.Buckets.MaxSeriesDays <= def.Buckets.MaxSeriesDays {
		t.Errorf("2 GiB budget gives %d series-days, the default budget %d", got.Buckets.MaxSeriesDays, def.Buckets.MaxSeriesDays)
	}
	if got.Rollups.MaxPending != 5000 {
		t.Errorf("rollups.max_pending = %d, want the 5000 given", got.Rollups.MaxPending)
	}
	for _, bad := range []string{"SLUICE_MEMORY_BUDGET_BYTES=1048576", "SLUICE_MEMORY_BUDGET_BYTES=-1"} {
		if _, _, err := Load("", []string{bad}); err == nil || !strings.Contains(err.Error(), "memory.budget_bytes") {
			t.Errorf("%s: err = %v, want one naming memory.budget_bytes", bad, err)
		}
	}
}

// memory.gc_percent defaults to DefaultGCPercent and is refused outside
// 25..1000.
func TestGCPercent(t *testing.T) {
	t.Chdir(t.TempDir())
	for _, c := range []struct {
		env  string
		want int // 0: refused
	}{
		{"", DefaultGCPercent},
		{"SLUICE_MEMORY_GC_PERCENT=100", 100},
		{"SLUICE_MEMORY_GC_PERCENT=25", 25},
		{"SLUICE_MEMORY_GC_PERCENT=1000", 1000},
		{"SLUICE_MEMORY_GC_PERCENT=24", 0},
		{"SLUICE_MEMORY_GC_PERCENT=1001", 0},
		{"SLUICE_MEMORY_GC_PERCENT=-1", 0},
	} {
		var env []string
		if c.env != "" {
			env = []string{c.env}
		}
		got, _, err := Load("", env)
		switch {
		case c.want == 0 && (err == nil || !strings.Contains(err.Error(), "memory.gc_percent: must be 25..1000")):
			t.Errorf("%s: err = %v, want memory.gc_percent refused", c.env, err)
		case c.want != 0 && err != nil:
			t.Errorf("%s: %v", c.env, err)
		case c.want != 0 && got.Memory.GCPercent != c.want:
			t.Errorf("%s: gc_percent %d, want %d", c.env, got.Memory.GCPercent, c.want)
		}
	}
}

// TestPastRollDelayByBackend checks rollups.past_roll_delay's default on
// each raw store, and that a value given anywhere wins over it.
func TestPastRollDelayByBackend(t *testing.T) {
	cassandra := []string{"SLUICE_STORE_BACKEND=cassandra", "SLUICE_STORE_CASSANDRA_HOSTS=127.0.0.1"}
	file := filepath.Join(t.TempDir(), "ingest.yaml")
	if err := os.WriteFile(file, []byte("rollups:\n  past_roll_delay: 3s\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	flags, err := parseFlags(t, "--rollups.past_roll_delay=2s")
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name   string
		src    Sources
		want   time.Duration
		origin string
	}{
		{"embedded store", Sources{}, time.Second, "default: 1s on the embedded store"},
		{"cassandra", Sources{Env: cassandra}, 5 * time.Second, ""},
		{"embedded store, set in the environment", Sources{Env: []string{"SLUICE_ROLLUPS_PAST_ROLL_DELAY=5s"}}, 5 * time.Second, "env SLUICE_ROLLUPS_PAST_ROLL_DELAY"},
		{"embedded store, set to 0 in the environment", Sources{Env: []string{"SLUICE_ROLLUPS_PAST_ROLL_DELAY=0s"}}, 0, "env SLUICE_ROLLUPS_PAST_ROLL_DELAY"},
		{"embedded store, set in the file", Sources{File: file}, 3 * time.Second, "file"},
		{"cassandra, set in the file", Sources{File: file, Env: cassandra}, 3 * time.Second, "file"},
		{"embedded store, set by a flag", Sources{File: file, Flags: flags}, 2 * time.Second, "flag --rollups.past_roll_delay"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c, l, err := LoadSources(tt.src)
			if err != nil {
				t.Fatal(err)
			}
			if c.Rollups.PastRollDelay != tt.want || l.Origin["rollups.past_roll_delay"] != tt.origin {
				t.Errorf("past_roll_delay %s from %q, want %s from %q", c.Rollups.PastRollDelay, l.Origin["rollups.past_roll_delay"], tt.want, tt.origin)
			}
		})
	}
}
