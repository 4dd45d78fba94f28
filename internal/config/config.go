// Package config loads the gateway's configuration: defaults from code, then
// a YAML file, then SLUICE_* environment variables, and validates the result
// completely before anything starts. It is the only package that touches
// viper.
package config

import (
	"cmp"
	"errors"
	"fmt"
	"net"
	"os"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/go-viper/mapstructure/v2"
	"github.com/spf13/viper"

	"github.com/sluicehq/sluice/internal/audit/auditlog"
	"github.com/sluicehq/sluice/internal/buckets"
	"github.com/sluicehq/sluice/internal/decode"
	"github.com/sluicehq/sluice/internal/httpingest"
	"github.com/sluicehq/sluice/internal/lineproto"
	"github.com/sluicehq/sluice/internal/membudget"
	"github.com/sluicehq/sluice/internal/model"
	"github.com/sluicehq/sluice/internal/mqttingest"
	"github.com/sluicehq/sluice/internal/quota"
	"github.com/sluicehq/sluice/internal/readapi"
	"github.com/sluicehq/sluice/internal/retention"
	"github.com/sluicehq/sluice/internal/rollupfeed"
	"github.com/sluicehq/sluice/internal/sink"
	"github.com/sluicehq/sluice/internal/store/cqlstore"
	"github.com/sluicehq/sluice/internal/tlsconf"
)

// Config is the whole gateway configuration.
type Config struct {
	DataDir string            `mapstructure:"data_dir"`
	Memory  Memory            `mapstructure:"memory"`
	HTTP    HTTP              `mapstructure:"http"`
	Read    readapi.Config    `mapstructure:"read"`
	Auth    Auth              `mapstructure:"auth"`
	Limits  Limits            `mapstructure:"limits"`
	Buckets buckets.Config    `mapstructure:"buckets"`
	Sink    sink.Config       `mapstructure:"sink"`
	Store   Store             `mapstructure:"store"`
	Log     Log               `mapstructure:"log"`
	Rollups rollupfeed.Config `mapstructure:"rollups"`
	MQTT    mqttingest.Config `mapstructure:"mqtt"`
	Influx  lineproto.Config  `mapstructure:"influx"`

	Retention retention.Config `mapstructure:"retention"`
	Quotas    quota.Config     `mapstructure:"quotas"`
	Audit     auditlog.Config  `mapstructure:"audit"`
}

// Memory is the gateway's memory budget (package membudget divides it).
type Memory struct {
	// BudgetBytes is the peak resident memory the gateway aims at. Settings
	// left at 0 that hold memory (buckets.max_series_days,
	// rollups.max_pending, store.pebble.cache_bytes) take their share of it,
	// and so do the embedded stores' memtables and the Go heap's soft limit.
	BudgetBytes int64 `mapstructure:"budget_bytes"`
	// GCPercent is the Go collector's GOGC for the gateway (unless GOGC is
	// set in the environment): it collects when the heap has grown by this
	// percentage over what the last collection left live, and at the Go
	// heap's soft limit at the latest. Go's default is 100.
	GCPercent int `mapstructure:"gc_percent"`
}

// DefaultGCPercent is memory.gc_percent's default. Against Go's 100 it
// collects half as often, which saved the fleet benchmark 12–13% of its CPU
// with rollups off for about 20 MiB more peak RSS with rollups on
// (docs/benchmarks.md); the soft limit still holds the heap to its share of
// the budget.
const DefaultGCPercent = 200

// Plan is the division of the memory budget among what the configuration
// opens.
func (c Config) Plan() membudget.Plan {
	return membudget.For(c.Memory.BudgetBytes, membudget.Opens{
		RawStore:    c.Store.Backend == "pebble",
		Rollups:     c.Rollups.Enabled,
		RollupStore: c.Rollups.Enabled && c.Rollups.ClickHouse.Addr == "",
	})
}

// resolveMemory gives the settings left at 0 their share of the budget.
// It returns the keys it sized.
func (c *Config) resolveMemory() []string {
	p := c.Plan()
	var sized []string
	if c.Buckets.MaxSeriesDays == 0 {
		c.Buckets.MaxSeriesDays = p.SeriesDays
		sized = append(sized, "buckets.max_series_days")
	}
	if c.Buckets.MaxSettled == 0 {
		c.Buckets.MaxSettled = p.Settled
		sized = append(sized, "buckets.max_settled_series_days")
	}
	if c.Rollups.MaxPending == 0 {
		c.Rollups.MaxPending = p.MaxPending
		sized = append(sized, "rollups.max_pending")
	}
	if c.Store.Pebble.CacheBytes == 0 {
		c.Store.Pebble.CacheBytes = p.StoreCache
		sized = append(sized, "store.pebble.cache_bytes")
	}
	return sized
}

// HTTP configures the HTTP listener shared by ingest, read API and metrics.
type HTTP struct {
	Addr                 string        `mapstructure:"addr"`
	MaxBodyBytes         int64         `mapstructure:"max_body_bytes"`
	MaxDecompressedBytes int64         `mapstructure:"max_decompressed_bytes"`
	MaxInflightBodyBytes int64         `mapstructure:"max_inflight_body_bytes"`
	BodyAdmissionTimeout time.Duration `mapstructure:"body_admission_timeout"`
	ReadTimeout          time.Duration `mapstructure:"read_timeout"`
	WriteTimeout         time.Duration `mapstructure:"write_timeout"`
	IdleTimeout          time.Duration `mapstructure:"idle_timeout"`
	ShutdownTimeout      time.Duration `mapstructure:"shutdown_timeout"`
	// MaxHeaderBytes bounds a request's header block (Go's default is 1 MiB,
	// which an unauthenticated client could make every connection hold).
	MaxHeaderBytes int `mapstructure:"max_header_bytes"`
	// MaxConnections bounds the connections served at once; more wait in
	// the listen backlog. 0: no bound.
	MaxConnections int `mapstructure:"max_connections"`
	// DrainDelay is how long, after SIGTERM, /readyz answers 503 while
	// requests are still served, before the listener closes; 0: none.
	DrainDelay time.Duration `mapstructure:"drain_delay"`
	// ReadySaturation is how long the write pipeline may refuse writes
	// (sink.queue_rows full) before /readyz answers 503; 0: never.
	ReadySaturation time.Duration `mapstructure:"ready_saturation"`
	// TLS, when its cert_file is set, makes the listener serve HTTPS only.
	TLS tlsconf.Config `mapstructure:"tls"`
}

// Token maps one bearer token to its tenant.
type Token struct {
	Token  string `mapstructure:"token"`
	Tenant string `mapstructure:"tenant"`
}

// Auth holds the bearer tokens.
type Auth struct {
	Tokens []Token `mapstructure:"tokens"`
}

// DevToken is the token the default configuration ships with.
const DevToken = "sluice-dev-token"

// Limits bound what one request may carry (see decode.Limits).
type Limits struct {
	MaxRows            int           `mapstructure:"max_rows"`
	MaxMetrics         int           `mapstructure:"max_metrics"`
	MaxIDLength        int           `mapstructure:"max_id_length"`
	MaxTextLength      int           `mapstructure:"max_text_length"`
	MaxStringValue     int           `mapstructure:"max_string_value"`
	MaxAttributesBytes int           `mapstructure:"max_attributes_bytes"`
	MaxFuture          time.Duration `mapstructure:"max_future"`
}

// Decode returns the decoder's view of the limits.
func (l Limits) Decode() decode.Limits {
	return decode.Limits{
		MaxRows: l.MaxRows, MaxMetrics: l.MaxMetrics, MaxIDLength: l.MaxIDLength,
		MaxTextLength: l.MaxTextLength, MaxStringValue: l.MaxStringValue, MaxAttributesBytes: l.MaxAttributesBytes,
		MaxFuture: l.MaxFuture,
	}
}

// Store selects and tunes the storage backend.
type Store struct {
	Backend   string          `mapstructure:"backend"`
	Pebble    Pebble          `mapstructure:"pebble"`
	Cassandra cqlstore.Config `mapstructure:"cassandra"`
}

// Pebble tunes the embedded store.
type Pebble struct {
	CacheBytes int64 `mapstructure:"cache_bytes"`
}

// Log configures logging.
type Log struct {
	Level  string `mapstructure:"level"`
	Format string `mapstructure:"format"`
}

// Default returns the built-in defaults, the settings left to the memory
// budget resolved; configs/ingest.yaml states the same.
func Default() Config {
	c := unresolved()
	c.resolveMemory()
	c.resolvePastRollDelay()
	return c
}

// EmbeddedPastRollDelay is rollups.past_roll_delay's default on the
// embedded store (rollupfeed.DefaultConfig's, 5 s, is Cassandra's). There a
// minute one commit wrote whole is summed from that commit's rows, not read
// back, and the few minutes still read back are not worth 5 s of delay
// for the reads they would share (docs/benchmarks.md, item 28).
const EmbeddedPastRollDelay = time.Second

const pastRollDelayKey = "rollups.past_roll_delay"

// resolvePastRollDelay gives rollups.past_roll_delay its embedded store's
// default when the raw store is the embedded one; it reports whether it
// did. Called only when the setting was not given.
func (c *Config) resolvePastRollDelay() bool {
	if c.Store.Backend != "pebble" {
		return false
	}
	c.Rollups.PastRollDelay = EmbeddedPastRollDelay
	return true
}

// unresolved is Default with the settings the memory budget sizes at 0.
func unresolved() Config {
	d := decode.DefaultLimits()
	c := Config{
		DataDir: "./data",
		HTTP: HTTP{
			Addr: "127.0.0.1:8080", MaxBodyBytes: 16 << 20, MaxDecompressedBytes: 64 << 20,
			MaxInflightBodyBytes: 128 << 20, BodyAdmissionTimeout: time.Second,
			ReadTimeout: 30 * time.Second, WriteTimeout: 60 * time.Second, IdleTimeout: 120 * time.Second,
			ShutdownTimeout: 30 * time.Second, DrainDelay: 5 * time.Second, ReadySaturation: 30 * time.Second,
			MaxHeaderBytes: 64 << 10, MaxConnections: 4096,
			TLS: tlsconf.DefaultConfig(),
		},
		Read: readapi.DefaultConfig(),
		Auth: Auth{Tokens: []Token{{Token: DevToken, Tenant: "dev"}}},
		Limits: Limits{
			MaxRows: d.MaxRows, MaxMetrics: d.MaxMetrics, MaxIDLength: d.MaxIDLength,
			MaxTextLength: d.MaxTextLength, MaxStringValue: d.MaxStringValue, MaxAttributesBytes: d.MaxAttributesBytes,
			MaxFuture: d.MaxFuture,
		},
		Buckets: buckets.DefaultConfig(),
		Sink:    sink.DefaultConfig(),
		Store:   Store{Backend: "pebble", Cassandra: cqlstore.DefaultConfig()},
		Log:     Log{Level: "info", Format: "text"},
		Rollups: rollupfeed.DefaultConfig(),
		MQTT:    mqttingest.DefaultConfig(),
		Influx:  lineproto.DefaultConfig(),

		Retention: retention.DefaultConfig(),
		Quotas:    quota.DefaultConfig(),
		Audit:     auditlog.DefaultConfig(),
		Memory:    Memory{BudgetBytes: membudget.Default, GCPercent: DefaultGCPercent},
	}
	// Sized by the memory budget (resolveMemory).
	c.Buckets.MaxSeriesDays, c.Buckets.MaxSettled, c.Rollups.MaxPending = 0, 0, 0
	return c
}

// UsesDevToken reports whether the shipped development token is accepted.
func (c Config) UsesDevToken() bool {
	return slices.ContainsFunc(c.Auth.Tokens, func(t Token) bool { return t.Token == DevToken })
}

// Load reads the configuration. file may be empty: then ./configs/ingest.yaml
// is read if it exists, else only defaults and environment apply. env is the
// process environment (os.Environ() form); it is passed in so tests do not
// depend on the real one.
func Load(file string, env []string) (Config, string, error) {
	c, l, err := LoadSources(Sources{File: file, Env: env})
	return c, l.File, err
}

// Sources are where settings come from, lowest precedence first: the
// defaults, File, Env, then Flags.
type Sources struct {
	// File is the YAML file; "" reads ./configs/ingest.yaml if it exists.
	File string
	// Env is the process environment (os.Environ() form); SLUICE_* variables
	// name keys.
	Env []string
	// Flags, if set, are the command-line flags (AddFlags) after parsing.
	Flags *Flags
}

// Loaded tells where the configuration came from.
type Loaded struct {
	File string // the file read, "" for none
	// Origin maps each key to where its value came from: "default",
	// "file", "env SLUICE_..." or "flag --...". A key absent from it is
	// at its default.
	Origin map[string]string
	// Retired lists settings the file or environment still gives that no
	// longer have an effect, each with what replaced it; serve logs them.
	Retired []string
}

// retired are settings of earlier versions that are accepted and ignored,
// with what replaced them.
var retired = map[string]string{
	"rollups.allowed_lateness": "rollups are recomputed from the raw store; see rollups.roll_delay",
	"rollups.keep_closed":      "rollups are recomputed from the raw store; see rollups.roll_delay",
	"rollups.max_windows":      "no windows are held in memory; see rollups.max_pending",
	"rollups.queue_batches":    "no batches are queued for the rollups; see rollups.max_pending",
}

// LoadSources reads and validates the configuration. Precedence: flag >
// environment > file > default.
func LoadSources(src Sources) (Config, Loaded, error) {
	file, env := src.File, src.Env
	l := Loaded{Origin: map[string]string{}}
	v := viper.New()
	def := unresolved()
	var flat map[string]any
	if err := mapstructure.Decode(def, &flat); err != nil {
		return Config{}, l, fmt.Errorf("flatten defaults: %w", err)
	}
	for k, val := range flatten("", flat) {
		v.SetDefault(k, val)
	}
	if file == "" {
		if _, err := os.Stat("configs/ingest.yaml"); err == nil {
			file = "configs/ingest.yaml"
		}
	}
	l.File = file
	if file != "" {
		v.SetConfigFile(file)
		v.SetConfigType("yaml")
		if err := v.ReadInConfig(); err != nil {
			return Config{}, l, fmt.Errorf("read config %s: %w", file, err)
		}
		if err := checkUnknown(v, def, &l); err != nil {
			return Config{}, l, fmt.Errorf("config %s: %w", file, err)
		}
		for _, k := range v.AllKeys() {
			if v.InConfig(k) {
				l.Origin[originKey(k)] = "file"
			}
		}
	}
	// Environment: SLUICE_HTTP_ADDR overrides http.addr, and so on for every key.
	for _, kv := range env {
		name, val, ok := strings.Cut(kv, "=")
		if !ok || !strings.HasPrefix(name, "SLUICE_") {
			continue
		}
		if k, ok := retiredEnv(name); ok {
			l.Retired = append(l.Retired, fmt.Sprintf("%s (env %s): ignored: %s", k, name, retired[k]))
			continue
		}
		key, known := envKey(v, name)
		if !known {
			continue // SLUICE_URL, SLUICE_TOKEN and the like belong to other tools
		}
		typed, err := parseLike(v.Get(key), val)
		if err != nil {
			return Config{}, l, fmt.Errorf("%s (from %s): %w", key, name, err)
		}
		v.Set(key, typed)
		l.Origin[key] = "env " + name
	}
	// Flags last: they override the environment and the file.
	if src.Flags != nil {
		for _, key := range src.Flags.changed() {
			typed, err := parseLike(v.Get(key), src.Flags.vals[key].val)
			if err != nil {
				return Config{}, l, fmt.Errorf("%s (from --%s): %w", key, key, err)
			}
			v.Set(key, typed)
			l.Origin[key] = "flag --" + key
		}
	}
	var c Config
	dec, err := mapstructure.NewDecoder(&mapstructure.DecoderConfig{
		Result: &c, ErrorUnused: true, WeaklyTypedInput: true,
		DecodeHook: mapstructure.ComposeDecodeHookFunc(tokensHook, listHook, mapstructure.TextUnmarshallerHookFunc(), mapstructure.StringToTimeDurationHookFunc()),
	})
	if err == nil {
		err = dec.Decode(withoutRetired(v.AllSettings()))
	}
	if err != nil {
		return Config{}, l, fmt.Errorf("config: %w", err)
	}
	for _, k := range c.resolveMemory() {
		l.Origin[k] = cmp.Or(l.Origin[k], "default") + ": 0, sized by memory.budget_bytes"
	}
	if _, set := l.Origin[pastRollDelayKey]; !set && c.resolvePastRollDelay() {
		l.Origin[pastRollDelayKey] = "default: " + EmbeddedPastRollDelay.String() + " on the embedded store"
	}
	if err := c.Validate(); err != nil {
		return Config{}, l, err
	}
	return c, l, nil
}

// originKey is the key whose origin a file key sets: a list or map
// setting's entries (auth.tokens, retention.tenants.acme.readings) count
// for the setting itself.
func originKey(k string) string {
	for _, whole := range []string{"retention.tenants", "auth.tokens", "mqtt.topics", "mqtt.embedded.users"} {
		if k == whole || strings.HasPrefix(k, whole+".") {
			return whole
		}
	}
	return k
}

// envKey maps SLUICE_STORE_PEBBLE_CACHE_BYTES to store.pebble.cache_bytes by
// matching against the known keys (key names contain underscores too).
func envKey(v *viper.Viper, name string) (string, bool) {
	for _, k := range v.AllKeys() {
		if isEnvOf(name, k) {
			return k, true
		}
	}
	if isEnvOf(name, "auth.tokens") {
		return "auth.tokens", true
	}
	return "", false
}

// isEnvOf reports whether the environment variable name sets key
// (SLUICE_HTTP_ADDR sets http.addr).
func isEnvOf(name, key string) bool {
	return strings.ToLower(strings.TrimPrefix(name, "SLUICE_")) == strings.ReplaceAll(key, ".", "_")
}

// retiredEnv returns the retired setting that name sets, if any.
func retiredEnv(name string) (string, bool) {
	for k := range retired {
		if isEnvOf(name, k) {
			return k, true
		}
	}
	return "", false
}

// parseLike parses an environment value as the type of the setting's
// current value, so that a bad value is reported with the key and the value.
func parseLike(cur any, val string) (any, error) {
	switch cur.(type) {
	case int, int64:
		n, err := strconv.ParseInt(strings.TrimSpace(val), 10, 64)
		if err != nil {
			return nil, fmt.Errorf("%q is not a whole number", val)
		}
		return n, nil
	case time.Duration:
		d, err := time.ParseDuration(strings.TrimSpace(val))
		if err != nil {
			return nil, fmt.Errorf("%q is not a duration (e.g. 500ms, 30s, 5m)", val)
		}
		return d, nil
	case []string:
		// A list from the environment: comma-separated, e.g.
		// SLUICE_STORE_CASSANDRA_HOSTS=10.0.0.1:9042,10.0.0.2:9042.
		return splitList(val), nil
	case bool:
		b, err := strconv.ParseBool(strings.TrimSpace(val))
		if err != nil {
			return nil, fmt.Errorf("%q is not true or false", val)
		}
		return b, nil
	}
	return val, nil
}

func flatten(prefix string, m map[string]any) map[string]any {
	out := make(map[string]any)
	for k, val := range m {
		key := k
		if prefix != "" {
			key = prefix + "." + k
		}
		if sub, ok := val.(map[string]any); ok {
			for k2, v2 := range flatten(key, sub) {
				out[k2] = v2
			}
			continue
		}
		out[key] = val
	}
	return out
}

// withoutRetired deletes the retired settings from nested settings, which
// the decoder would refuse as unused.
func withoutRetired(settings map[string]any) map[string]any {
	for k := range retired {
		m := settings
		parts := strings.Split(k, ".")
		for _, p := range parts[:len(parts)-1] {
			next, ok := m[p].(map[string]any)
			if !ok {
				m = nil
				break
			}
			m = next
		}
		if m != nil {
			delete(m, parts[len(parts)-1])
		}
	}
	return settings
}

// checkUnknown rejects keys in the file that no setting has, and records in
// l those that are retired.
func checkUnknown(v *viper.Viper, def Config, l *Loaded) error {
	var flat map[string]any
	_ = mapstructure.Decode(def, &flat)
	known := flatten("", flat)
	var errs []error
	for _, k := range v.AllKeys() {
		if _, ok := known[k]; ok {
			continue
		}
		if why, ok := retired[k]; ok {
			l.Retired = append(l.Retired, fmt.Sprintf("%s (file): ignored: %s", k, why))
			continue
		}
		if strings.HasPrefix(k, "auth.tokens") || strings.HasPrefix(k, "retention.tenants.") {
			continue // lists and maps: their entries are checked when decoded
		}
		errs = append(errs, fmt.Errorf("%s: unknown setting", k))
	}
	return errors.Join(errs...)
}

// tokensHook turns "tok1=tenantA,tok2=tenantB" into a token list.
func tokensHook(from, to reflect.Type, data any) (any, error) {
	if to != reflect.TypeFor[[]Token]() || from.Kind() != reflect.String {
		return data, nil
	}
	s := strings.TrimSpace(data.(string))
	if s == "" {
		return []Token{}, nil
	}
	var out []Token
	for part := range strings.SplitSeq(s, ",") {
		tok, tenant, ok := strings.Cut(strings.TrimSpace(part), "=")
		if !ok {
			return nil, fmt.Errorf("auth.tokens: entry %q is not token=tenant", redact(part))
		}
		out = append(out, Token{Token: tok, Tenant: tenant})
	}
	return out, nil
}

// listHook turns "a, b" into a list for the list settings other than
// auth.tokens, e.g. SLUICE_MQTT_BROKERS=tcp://a:1883,tcp://b:1883.
func listHook(from, to reflect.Type, data any) (any, error) {
	if from.Kind() != reflect.String || to.Kind() != reflect.Slice || to == reflect.TypeFor[[]Token]() {
		return data, nil
	}
	return splitList(data.(string)), nil
}

// splitList splits a comma-separated list, trimming the items and
// dropping empty ones.
func splitList(s string) []string {
	out := []string{}
	for p := range strings.SplitSeq(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

// redact keeps a secret out of error messages.
func redact(s string) string {
	if _, tenant, ok := strings.Cut(s, "="); ok {
		return "…=" + tenant
	}
	return "…"
}

// Validate reports every bad setting, one line each, naming the key, the
// value and what is allowed.
func (c Config) Validate() error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	if c.DataDir == "" {
		bad("data_dir: must not be empty")
	}
	if _, _, err := net.SplitHostPort(c.HTTP.Addr); err != nil {
		bad("http.addr: %q is not host:port", c.HTTP.Addr)
	}
	if c.HTTP.MaxBodyBytes < 1024 {
		bad("http.max_body_bytes: must be at least 1024, got %d", c.HTTP.MaxBodyBytes)
	}
	if c.HTTP.MaxDecompressedBytes < c.HTTP.MaxBodyBytes {
		bad("http.max_decompressed_bytes: must be at least http.max_body_bytes (%d), got %d", c.HTTP.MaxBodyBytes, c.HTTP.MaxDecompressedBytes)
	}
	if least := httpingest.MinInflightBodyBytes(c.HTTP.MaxBodyBytes, c.HTTP.MaxDecompressedBytes); c.HTTP.MaxInflightBodyBytes < least {
		bad("http.max_inflight_body_bytes: must be at least 1.5 × http.max_decompressed_bytes + 64 KiB (%d), got %d", least, c.HTTP.MaxInflightBodyBytes)
	}
	if c.HTTP.BodyAdmissionTimeout < 0 || c.HTTP.BodyAdmissionTimeout > time.Minute {
		bad("http.body_admission_timeout: must be between 0s and 1m, got %s", c.HTTP.BodyAdmissionTimeout)
	}
	for _, d := range []struct {
		key string
		v   time.Duration
	}{{"http.read_timeout", c.HTTP.ReadTimeout}, {"http.write_timeout", c.HTTP.WriteTimeout}, {"http.idle_timeout", c.HTTP.IdleTimeout}, {"http.shutdown_timeout", c.HTTP.ShutdownTimeout}} {
		if d.v <= 0 {
			bad("%s: must be a positive duration, got %s", d.key, d.v)
		}
	}
	for _, d := range []struct {
		key string
		v   time.Duration
	}{{"http.drain_delay", c.HTTP.DrainDelay}, {"http.ready_saturation", c.HTTP.ReadySaturation}} {
		if d.v < 0 || d.v > time.Hour {
			bad("%s: must be between 0s and 1h, got %s", d.key, d.v)
		}
	}
	if c.HTTP.MaxHeaderBytes < 4<<10 || c.HTTP.MaxHeaderBytes > 1<<20 {
		bad("http.max_header_bytes: must be between 4096 and 1048576, got %d", c.HTTP.MaxHeaderBytes)
	}
	if c.HTTP.MaxConnections < 0 || c.HTTP.MaxConnections > 1<<20 {
		bad("http.max_connections: must be between 0 (no bound) and 1048576, got %d", c.HTTP.MaxConnections)
	}
	if err := c.Read.Validate(); err != nil {
		errs = append(errs, err)
	}
	if c.Read.Timeout > 0 && c.HTTP.WriteTimeout > 0 && c.Read.Timeout >= c.HTTP.WriteTimeout {
		bad("read.timeout: must be shorter than http.write_timeout (%s), got %s", c.HTTP.WriteTimeout, c.Read.Timeout)
	}
	if err := c.HTTP.TLS.Validate("http.tls"); err != nil {
		errs = append(errs, err)
	}
	if len(c.Auth.Tokens) == 0 {
		bad("auth.tokens: at least one token=tenant is required")
	}
	seen := map[string]bool{}
	for i, t := range c.Auth.Tokens {
		if len(t.Token) < 8 {
			bad("auth.tokens[%d].token: must be at least 8 characters", i)
		}
		if seen[t.Token] {
			bad("auth.tokens[%d].token: listed twice", i)
		}
		seen[t.Token] = true
		if !model.ValidTenant(t.Tenant) {
			bad("auth.tokens[%d].tenant: %q must be "+model.TenantRule, i, t.Tenant)
		}
	}
	if err := c.Limits.Decode().Validate(); err != nil {
		errs = append(errs, err)
	}
	if err := c.Influx.Validate(c.Limits.MaxIDLength); err != nil {
		errs = append(errs, err)
	}
	if err := c.Buckets.Validate(); err != nil {
		errs = append(errs, err)
	}
	if c.Buckets.MaxRows >= 1 && c.Buckets.MaxRows < int64(c.Limits.MaxMetrics) {
		bad("buckets.max_rows: must be at least limits.max_metrics (%d), got %d", c.Limits.MaxMetrics, c.Buckets.MaxRows)
	}
	if c.Buckets.MaxBytes >= 64<<10 && c.Buckets.MaxBytes < int64(c.Limits.MaxAttributesBytes)*4 {
		bad("buckets.max_bytes: must be at least 4 x limits.max_attributes_bytes (%d), got %d", c.Limits.MaxAttributesBytes*4, c.Buckets.MaxBytes)
	}
	if err := c.Sink.Validate(); err != nil {
		errs = append(errs, err)
	}
	switch c.Store.Backend {
	case "pebble":
	case "cassandra":
		if err := c.Store.Cassandra.Validate(); err != nil {
			errs = append(errs, err)
		}
	default:
		bad("store.backend: %q is not supported (allowed: pebble, cassandra)", c.Store.Backend)
	}
	if c.Store.Pebble.CacheBytes < 1<<20 {
		bad("store.pebble.cache_bytes: must be at least 1048576 (or 0: from memory.budget_bytes), got %d", c.Store.Pebble.CacheBytes)
	}
	if b := c.Memory.BudgetBytes; b < membudget.Min || b > membudget.Max {
		bad("memory.budget_bytes: must be %d..%d (256 MiB to 1 TiB), got %d", int64(membudget.Min), int64(membudget.Max), b)
	}
	if g := c.Memory.GCPercent; g < 25 || g > 1000 {
		bad("memory.gc_percent: must be 25..1000 (Go's default is 100), got %d", g)
	}
	if err := c.Rollups.Validate(); err != nil {
		errs = append(errs, err)
	}
	if err := c.Retention.Validate(retention.Bound{Key: "limits.max_future", D: c.Limits.MaxFuture},
		retention.Bound{Key: "rollups.roll_delay", D: c.Rollups.RollDelay}); err != nil {
		errs = append(errs, err)
	}
	if !slices.Contains([]string{"debug", "info", "warn", "error"}, c.Log.Level) {
		bad("log.level: %q is not one of debug, info, warn, error", c.Log.Level)
	}
	if !slices.Contains([]string{"text", "json"}, c.Log.Format) {
		bad("log.format: %q is not one of text, json", c.Log.Format)
	}
	if err := c.MQTT.Validate(); err != nil {
		errs = append(errs, err)
	}
	if err := c.Quotas.Validate(quota.Bounds{
		Rows:  quota.Bound{Key: "limits.max_rows", N: int64(c.Limits.MaxRows)},
		Bytes: quota.Bound{Key: "http.max_body_bytes", N: c.HTTP.MaxBodyBytes},
	}); err != nil {
		errs = append(errs, err)
	}
	if err := c.Audit.Validate(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}
