package mqttingest

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/sluicehq/sluice/internal/broker"
	"github.com/sluicehq/sluice/internal/model"
)

// Config is mqtt.* in the gateway configuration.
type Config struct {
	// Enabled subscribes to Brokers. With the embedded broker
	// (Embedded.Enabled) the gateway subscribes to nothing: a Receiver
	// stores what devices publish to it.
	Enabled bool `mapstructure:"enabled"`
	// Brokers are tried in turn: tcp://host:1883, ssl://host:8883, ws://…
	Brokers []string `mapstructure:"brokers"`
	// ClientID must be stable across restarts (the broker keeps the
	// session, and the messages not yet acknowledged, under it) and unique
	// per gateway. Empty means "sluice-<hostname>".
	ClientID string `mapstructure:"client_id"`
	Username string `mapstructure:"username"`
	Password string `mapstructure:"password"`
	TLS      TLS    `mapstructure:"tls"`
	// Topics are the subscription filters.
	Topics []Topic `mapstructure:"topics"`
	// TopicTemplate says where the device (and the tenant) are in a topic.
	TopicTemplate string `mapstructure:"topic_template"`
	// Tenant is the tenant of every message when the template has no
	// {tenant}, and the tenant that dead letters without a valid tenant are
	// filed under.
	Tenant string `mapstructure:"tenant"`
	// Tenants, when not empty, is the allow-list of {tenant} values.
	Tenants []string `mapstructure:"tenants"`
	// SharedGroup, when set, subscribes with $share/<group>/<filter> so
	// that the gateways of one group split the stream.
	SharedGroup string `mapstructure:"shared_group"`
	// MaxInflight bounds the messages received and not yet acknowledged;
	// at the bound the gateway stops reading from the broker.
	MaxInflight int `mapstructure:"max_inflight"`
	// MaxPayloadBytes: a larger message becomes a dead letter.
	MaxPayloadBytes int `mapstructure:"max_payload_bytes"`
	// DeadLetterPayloadBytes: how much of a dead letter's payload is kept.
	DeadLetterPayloadBytes int           `mapstructure:"dead_letter_payload_bytes"`
	KeepAlive              time.Duration `mapstructure:"keep_alive"`
	ConnectTimeout         time.Duration `mapstructure:"connect_timeout"`
	// ConnectRetryInterval is the wait between attempts of the first
	// connection; reconnections after a loss back off from 1s to
	// MaxReconnectInterval.
	ConnectRetryInterval time.Duration `mapstructure:"connect_retry_interval"`
	MaxReconnectInterval time.Duration `mapstructure:"max_reconnect_interval"`
	Embedded             broker.Config `mapstructure:"embedded"`
}

// TLS configures the connection to ssl:// (or wss://) brokers.
type TLS struct {
	CAFile             string `mapstructure:"ca_file"`
	CertFile           string `mapstructure:"cert_file"`
	KeyFile            string `mapstructure:"key_file"`
	InsecureSkipVerify bool   `mapstructure:"insecure_skip_verify"`
}

// Topic is one subscription filter, its QoS and the format of the payloads
// published on the topics it matches.
type Topic struct {
	Filter string `mapstructure:"filter"`
	QoS    int    `mapstructure:"qos"`
	// PayloadFormat is json, influx (line protocol) or auto (JSON when the
	// payload starts with '{' or '[' after blanks, else line protocol).
	// Empty means json.
	PayloadFormat string `mapstructure:"payload_format"`
}

// The payload formats of Topic.PayloadFormat.
const (
	FormatJSON   = "json"
	FormatInflux = "influx"
	FormatAuto   = "auto"
)

// UnmarshalText reads "filter", "filter:qos" or "filter:qos:format" (the
// environment form: SLUICE_MQTT_TOPICS="tenants/+/devices/+/readings:1,
// telegraf/+/metrics:1:influx").
func (t *Topic) UnmarshalText(b []byte) error {
	s := strings.TrimSpace(string(b))
	t.Filter, t.QoS, t.PayloadFormat = s, 1, FormatJSON
	if i := strings.LastIndexByte(s, ':'); i >= 0 {
		switch f := s[i+1:]; f {
		case FormatJSON, FormatInflux, FormatAuto:
			t.PayloadFormat, s = f, s[:i]
			t.Filter = s
		}
	}
	if i := strings.LastIndexByte(s, ':'); i >= 0 {
		if q, err := strconv.Atoi(s[i+1:]); err == nil {
			t.Filter, t.QoS = s[:i], q
		}
	}
	return nil
}

// DefaultConfig returns the defaults: disabled; when enabled, a local
// broker, devices/{device_id}/readings at QoS 1 for tenant "dev".
func DefaultConfig() Config {
	return Config{
		Brokers:                []string{"tcp://127.0.0.1:1883"},
		Topics:                 []Topic{{Filter: "devices/+/readings", QoS: 1, PayloadFormat: FormatJSON}},
		TopicTemplate:          "devices/{device_id}/readings",
		Tenant:                 "dev",
		Tenants:                []string{},
		MaxInflight:            1000,
		MaxPayloadBytes:        1 << 20,
		DeadLetterPayloadBytes: 4096,
		KeepAlive:              30 * time.Second,
		ConnectTimeout:         10 * time.Second,
		ConnectRetryInterval:   time.Second,
		MaxReconnectInterval:   30 * time.Second,
		Embedded:               broker.DefaultConfig(),
	}
}

// Active reports whether the gateway subscribes at all.
func (c Config) Active() bool { return c.Enabled || c.Embedded.Enabled }

// Validate reports every bad setting. Nothing is checked while MQTT is off.
func (c Config) Validate() error {
	if !c.Active() {
		return nil
	}
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	// The subscriber's settings; the embedded broker has none of them.
	if !c.Embedded.Enabled {
		if len(c.Brokers) == 0 {
			bad("mqtt.brokers: at least one broker URL is required (e.g. tcp://127.0.0.1:1883)")
		}
		for i, b := range c.Brokers {
			u, err := url.Parse(b)
			if err != nil || u.Host == "" || !slices.Contains([]string{"tcp", "ssl", "tls", "mqtt", "mqtts", "ws", "wss"}, u.Scheme) {
				bad("mqtt.brokers[%d]: %q is not a broker URL (scheme://host:port, scheme one of tcp, ssl, tls, mqtt, mqtts, ws, wss)", i, b)
			}
		}
		if strings.ContainsAny(c.ClientID, "+#/") {
			bad("mqtt.client_id: %q must not contain + # /", c.ClientID)
		}
		if (c.TLS.CertFile == "") != (c.TLS.KeyFile == "") {
			bad("mqtt.tls.cert_file and mqtt.tls.key_file: set both or neither")
		}
		if len(c.Topics) == 0 {
			bad("mqtt.topics: at least one filter is required (e.g. %s)", DefaultConfig().Topics[0].Filter)
		}
		for i, t := range c.Topics {
			if err := checkFilter(t.Filter); err != nil {
				bad("mqtt.topics[%d].filter: %q %v", i, t.Filter, err)
			}
			if t.QoS < 0 || t.QoS > 2 {
				bad("mqtt.topics[%d].qos: must be 0, 1 or 2, got %d", i, t.QoS)
			}
		}
		if c.SharedGroup != "" && strings.ContainsAny(c.SharedGroup, "+#/") {
			bad("mqtt.shared_group: %q must not contain + # /", c.SharedGroup)
		}
		if c.MaxInflight < 1 || c.MaxInflight > 65535 {
			bad("mqtt.max_inflight: must be 1..65535, got %d", c.MaxInflight)
		}
		for _, d := range []struct {
			key string
			v   time.Duration
		}{{"mqtt.keep_alive", c.KeepAlive}, {"mqtt.connect_timeout", c.ConnectTimeout}, {"mqtt.connect_retry_interval", c.ConnectRetryInterval}} {
			if d.v < time.Second {
				bad("%s: must be at least 1s, got %s", d.key, d.v)
			}
		}
		if c.MaxReconnectInterval < time.Second {
			bad("mqtt.max_reconnect_interval: must be at least 1s, got %s", c.MaxReconnectInterval)
		}
	}
	// The embedded broker subscribes to nothing, but the filters still
	// pick the payload format of the topics they match.
	for i, t := range c.Topics {
		switch t.PayloadFormat {
		case "", FormatJSON, FormatInflux, FormatAuto:
		default:
			bad("mqtt.topics[%d].payload_format: must be json, influx or auto, got %q", i, t.PayloadFormat)
		}
		if c.Embedded.Enabled && t.PayloadFormat != "" && t.PayloadFormat != FormatJSON {
			if err := checkFilter(t.Filter); err != nil {
				bad("mqtt.topics[%d].filter: %q %v", i, t.Filter, err)
			}
		}
	}
	tmpl, err := ParseTemplate(c.TopicTemplate)
	if err != nil {
		bad("mqtt.topic_template: %v", err)
	}
	if !model.ValidTenant(c.Tenant) {
		bad("mqtt.tenant: %q must be "+model.TenantRule, c.Tenant)
	}
	for i, t := range c.Tenants {
		if !model.ValidTenant(t) {
			bad("mqtt.tenants[%d]: %q must be "+model.TenantRule, i, t)
		}
	}
	if c.MaxPayloadBytes < 1024 || c.MaxPayloadBytes > 256<<20 {
		bad("mqtt.max_payload_bytes: must be 1024..268435456, got %d", c.MaxPayloadBytes)
	}
	if c.DeadLetterPayloadBytes < 0 || c.DeadLetterPayloadBytes > c.MaxPayloadBytes {
		bad("mqtt.dead_letter_payload_bytes: must be 0..mqtt.max_payload_bytes (%d), got %d", c.MaxPayloadBytes, c.DeadLetterPayloadBytes)
	}
	if err := c.Embedded.Validate(); err != nil {
		errs = append(errs, err)
	}
	if c.Embedded.Enabled && tmpl != nil {
		for i, u := range c.Embedded.Users {
			if tmpl.HasTenant() && !model.ValidTenant(u.Tenant) {
				bad("mqtt.embedded.users[%d].tenant: %q must be set (the topic template has {tenant}) to "+model.TenantRule, i, u.Tenant)
			}
			if strings.ContainsAny(u.DeviceID, "+#/") {
				bad("mqtt.embedded.users[%d].device_id: %q must not contain + # /", i, u.DeviceID)
			}
		}
	}
	return errors.Join(errs...)
}

// checkFilter checks an MQTT subscription filter.
func checkFilter(f string) error {
	if f == "" {
		return errors.New("is empty")
	}
	if strings.HasPrefix(f, "$share/") {
		return errors.New("must not start with $share/: set mqtt.shared_group instead")
	}
	levels := strings.Split(f, "/")
	for i, l := range levels {
		if strings.Contains(l, "#") && (l != "#" || i != len(levels)-1) {
			return errors.New("may hold # only as the whole last level")
		}
		if strings.Contains(l, "+") && l != "+" {
			return errors.New("may hold + only as a whole level")
		}
	}
	return nil
}

// PayloadFormat returns the payload format of topic: that of the first
// filter of Topics that matches it, else json.
func (c Config) PayloadFormat(topic string) string {
	for _, t := range c.Topics {
		if matchFilter(t.Filter, topic) {
			if t.PayloadFormat == "" {
				return FormatJSON
			}
			return t.PayloadFormat
		}
	}
	return FormatJSON
}

// matchFilter reports whether an MQTT subscription filter matches topic:
// '+' matches one whole level, a last '#' the rest (the parent level
// included); a topic starting with '$' is matched only by a filter that
// names its first level.
func matchFilter(filter, topic string) bool {
	if strings.HasPrefix(topic, "$") && (strings.HasPrefix(filter, "+") || strings.HasPrefix(filter, "#")) {
		return false
	}
	for {
		fl, frest, fmore := strings.Cut(filter, "/")
		if fl == "#" {
			return true
		}
		tl, trest, tmore := strings.Cut(topic, "/")
		if fl != "+" && fl != tl {
			return false
		}
		switch {
		case !fmore && !tmore:
			return true
		case !tmore:
			return frest == "#"
		case !fmore:
			return false
		}
		filter, topic = frest, trest
	}
}

// ClientIDOrDefault returns ClientID, or "sluice-<hostname>".
func (c Config) ClientIDOrDefault() string {
	if c.ClientID != "" {
		return c.ClientID
	}
	h, err := os.Hostname()
	if err != nil || h == "" {
		h = "gateway"
	}
	return "sluice-" + strings.NewReplacer("+", "-", "#", "-", "/", "-").Replace(h)
}

// Filters returns the subscriptions as sent to the broker, with the shared
// group prefix when set.
func (c Config) Filters() map[string]byte {
	out := make(map[string]byte, len(c.Topics))
	for _, t := range c.Topics {
		f := t.Filter
		if c.SharedGroup != "" {
			f = "$share/" + c.SharedGroup + "/" + f
		}
		out[f] = byte(t.QoS)
	}
	return out
}

// TLSConfig builds the client TLS configuration, or nil when nothing is
// set (the system roots then apply to ssl:// brokers).
func (c TLS) TLSConfig() (*tls.Config, error) {
	if c == (TLS{}) {
		return nil, nil
	}
	tc := &tls.Config{MinVersion: tls.VersionTLS12, InsecureSkipVerify: c.InsecureSkipVerify} //nolint:gosec // operator's explicit choice
	if c.CAFile != "" {
		pem, err := os.ReadFile(c.CAFile)
		if err != nil {
			return nil, fmt.Errorf("mqtt.tls.ca_file: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("mqtt.tls.ca_file: %s holds no PEM certificate", c.CAFile)
		}
		tc.RootCAs = pool
	}
	if c.CertFile != "" {
		cert, err := tls.LoadX509KeyPair(c.CertFile, c.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("mqtt.tls.cert_file/key_file: %w", err)
		}
		tc.Certificates = []tls.Certificate{cert}
	}
	return tc, nil
}
