// Package broker runs an MQTT broker inside the gateway (mochi-mqtt), so that
// a single binary accepts MQTT without an external broker. It decides who
// may connect and what each client may do: a device account may publish to
// its own topic only and subscribe to nothing; the gateway's own subscriber
// account may subscribe and never publish. Sessions and queued QoS 1
// messages are kept in a bbolt file, so a restart of the gateway does not
// lose what the broker already acknowledged to a device.
//
// It never reads message payloads: storing them is the job of mqttingest,
// which subscribes to this broker like to any other.
package broker

import (
	"crypto/subtle"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	mqtt "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/hooks/storage"
	"github.com/mochi-mqtt/server/v2/hooks/storage/bolt"
	"github.com/mochi-mqtt/server/v2/listeners"
	"github.com/mochi-mqtt/server/v2/packets"
	"go.etcd.io/bbolt"
)

// Config is mqtt.embedded.* in the gateway configuration.
type Config struct {
	// Enabled starts the embedded broker; the gateway then subscribes to it
	// instead of mqtt.brokers.
	Enabled bool `mapstructure:"enabled"`
	// Listen is the TCP address devices connect to.
	Listen string `mapstructure:"listen"`
	// AllowAnonymous lets clients without credentials publish to any topic
	// that matches mqtt.topic_template. For development only.
	AllowAnonymous bool `mapstructure:"allow_anonymous"`
	// Users are the device accounts.
	Users []User `mapstructure:"users"`
}

// User is one device account: it may publish to the topic that
// mqtt.topic_template gives for its device (and tenant), and nothing else.
type User struct {
	Username string `mapstructure:"username"`
	Password string `mapstructure:"password"`
	DeviceID string `mapstructure:"device_id"`
	// Tenant fills {tenant} of the topic template; it may be empty when the
	// template has no {tenant}.
	Tenant string `mapstructure:"tenant"`
}

// DefaultConfig returns the defaults: disabled, loopback port 1883, no
// accounts.
func DefaultConfig() Config {
	return Config{Listen: "127.0.0.1:1883", Users: []User{}}
}

// SubscriberUsername is the account the gateway's own subscriber uses.
const SubscriberUsername = "sluice-gateway"

// Validate reports every bad setting.
func (c Config) Validate() error {
	if !c.Enabled {
		return nil
	}
	var errs []error
	if _, _, err := net.SplitHostPort(c.Listen); err != nil {
		errs = append(errs, fmt.Errorf("mqtt.embedded.listen: %q is not host:port", c.Listen))
	}
	seen := map[string]bool{}
	for i, u := range c.Users {
		switch {
		case u.Username == "":
			errs = append(errs, fmt.Errorf("mqtt.embedded.users[%d].username: must not be empty", i))
		case u.Username == SubscriberUsername:
			errs = append(errs, fmt.Errorf("mqtt.embedded.users[%d].username: %q is reserved for the gateway", i, u.Username))
		case seen[u.Username]:
			errs = append(errs, fmt.Errorf("mqtt.embedded.users[%d].username: %q is listed twice", i, u.Username))
		}
		seen[u.Username] = true
		if len(u.Password) < 8 {
			errs = append(errs, fmt.Errorf("mqtt.embedded.users[%d].password: must be at least 8 characters", i))
		}
		if u.DeviceID == "" {
			errs = append(errs, fmt.Errorf("mqtt.embedded.users[%d].device_id: must not be empty", i))
		}
	}
	if len(c.Users) == 0 && !c.AllowAnonymous {
		errs = append(errs, errors.New("mqtt.embedded.users: no device could publish: list device accounts, or set mqtt.embedded.allow_anonymous: true for development"))
	}
	return errors.Join(errs...)
}

// Options are what the gateway derives for the broker from the rest of its
// configuration.
type Options struct {
	// Dir holds the broker's session store (created if missing).
	Dir string
	// SubscriberPassword is the password of SubscriberUsername.
	SubscriberPassword string
	// TopicOf returns the one topic a user may publish to.
	TopicOf func(User) string
	// Anonymous reports whether an anonymous client may publish to topic
	// (used only with AllowAnonymous).
	Anonymous func(topic string) bool
}

// Broker is a running embedded broker.
type Broker struct {
	srv  *mqtt.Server
	addr net.Addr
}

// Start starts the broker and returns once it accepts connections.
func Start(cfg Config, opts Options, logger *slog.Logger) (*Broker, error) {
	if err := os.MkdirAll(opts.Dir, 0o700); err != nil {
		return nil, fmt.Errorf("create broker directory: %w", err)
	}
	caps := mqtt.NewDefaultServerCapabilities()
	caps.MaximumClientWritesPending = 8192
	srv := mqtt.New(&mqtt.Options{Capabilities: caps, Logger: logger, InlineClient: false})
	acl := &aclHook{users: make(map[string]User, len(cfg.Users)), topics: make(map[string]string, len(cfg.Users)),
		subPassword: opts.SubscriberPassword, anonymous: cfg.AllowAnonymous, anonTopic: opts.Anonymous, logger: logger}
	for _, u := range cfg.Users {
		acl.users[u.Username] = u
		acl.topics[u.Username] = opts.TopicOf(u)
	}
	if err := srv.AddHook(acl, nil); err != nil {
		return nil, fmt.Errorf("add broker auth hook: %w", err)
	}
	err := srv.AddHook(new(boltStore), &bolt.Options{
		Path: filepath.Join(opts.Dir, "sessions.bolt"), Bucket: "sluice",
		Options: &bbolt.Options{Timeout: 2 * time.Second},
	})
	if err != nil {
		return nil, fmt.Errorf("open broker session store in %s: %w", opts.Dir, err)
	}
	// Bind first, so that a busy port is reported now and port 0 works.
	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		_ = srv.Close()
		return nil, fmt.Errorf("listen on %s (mqtt.embedded.listen): %w", cfg.Listen, err)
	}
	addr := ln.Addr()
	_ = ln.Close()
	tcp := listeners.NewTCP(listeners.Config{Type: "tcp", ID: "sluice-tcp", Address: addr.String()})
	if err := srv.AddListener(tcp); err != nil {
		_ = srv.Close()
		return nil, fmt.Errorf("listen on %s (mqtt.embedded.listen): %w", addr, err)
	}
	if err := srv.Serve(); err != nil {
		_ = srv.Close()
		return nil, fmt.Errorf("start embedded broker: %w", err)
	}
	return &Broker{srv: srv, addr: addr}, nil
}

// Addr returns the address the broker listens on.
func (b *Broker) Addr() string { return b.addr.String() }

// Close disconnects every client and closes the session store.
func (b *Broker) Close() error {
	if err := b.srv.Close(); err != nil {
		return fmt.Errorf("close embedded broker: %w", err)
	}
	return nil
}

// boltStore is mochi's bbolt storage hook with one repair. mochi v2.7.9's
// bolt hook stores a QoS 1 message in flight to a client without its packet
// id (the id is only part of the record's key), so after a restart every
// reloaded message has packet id 0: the broker then fails to resend it
// ("missing packet id"), drops the subscriber's connection, and does so again
// on every reconnection, so the messages it acknowledged to devices before
// the restart would never be delivered. StoredInflightMessages restores the
// id from the key.
type boltStore struct {
	bolt.Hook
}

// StoredInflightMessages returns the messages in flight kept in the store,
// with their packet ids.
func (h *boltStore) StoredInflightMessages() ([]storage.Message, error) {
	msgs, err := h.Hook.StoredInflightMessages()
	if err != nil {
		return nil, err
	}
	kept := msgs[:0]
	for _, m := range msgs {
		if m.PacketID == 0 {
			id, ok := packetIDFromKey(m.ID)
			if !ok {
				h.Log.Warn("embedded broker: dropping a stored in-flight message without a packet id", "key", m.ID)
				continue
			}
			m.PacketID = id
		}
		kept = append(kept, m)
	}
	return kept, nil
}

// packetIDFromKey reads the packet id at the end of an in-flight record's
// key ("IFM_<client id>:<packet id>").
func packetIDFromKey(key string) (uint16, bool) {
	i := strings.LastIndexByte(key, ':')
	if i < 0 {
		return 0, false
	}
	n, err := strconv.ParseUint(key[i+1:], 10, 16)
	if err != nil || n == 0 {
		return 0, false
	}
	return uint16(n), true
}

// aclHook authenticates clients and restricts what each may do.
type aclHook struct {
	mqtt.HookBase
	users       map[string]User
	topics      map[string]string // username -> the topic it may publish to
	subPassword string
	anonymous   bool
	anonTopic   func(string) bool
	logger      *slog.Logger
}

func (h *aclHook) ID() string { return "sluice-acl" }

func (h *aclHook) Provides(b byte) bool {
	return b == mqtt.OnConnectAuthenticate || b == mqtt.OnACLCheck
}

func (h *aclHook) OnConnectAuthenticate(cl *mqtt.Client, pk packets.Packet) bool {
	name := string(pk.Connect.Username)
	pass := pk.Connect.Password
	switch {
	case name == SubscriberUsername:
		return subtle.ConstantTimeCompare(pass, []byte(h.subPassword)) == 1
	case name == "":
		if !h.anonymous {
			h.logger.Warn("refused anonymous MQTT client", "client_id", cl.ID, "remote", cl.Net.Remote)
		}
		return h.anonymous
	}
	u, ok := h.users[name]
	if !ok || subtle.ConstantTimeCompare(pass, []byte(u.Password)) != 1 {
		h.logger.Warn("refused MQTT client: bad username or password", "client_id", cl.ID, "username", name, "remote", cl.Net.Remote)
		return false
	}
	return true
}

func (h *aclHook) OnACLCheck(cl *mqtt.Client, topic string, write bool) bool {
	name := string(cl.Properties.Username)
	switch {
	case name == SubscriberUsername:
		return !write
	case name == "":
		return write && h.anonymous && h.anonTopic != nil && h.anonTopic(topic)
	}
	t, ok := h.topics[name]
	return ok && write && topic == t
}
