// Package broker runs an MQTT broker inside the gateway (mochi-mqtt), so that
// a single binary accepts MQTT without an external broker. It decides who
// may connect and what each client may do: a device account may publish to
// its own topic only and subscribe to nothing.
//
// # Acknowledgement
//
// The broker does not route messages: nobody subscribes to it. Each message
// a device publishes is handed to Options.Receive on the device's connection
// goroutine, before mochi writes the acknowledgement (PUBACK, or PUBREC at
// QoS 2), and the acknowledgement is sent only if Receive returned nil, which
// the caller promises to do only once the message is durable. When Receive
// fails (store busy or failing, gateway shutting down) the message is
// dropped without an acknowledgement and the device is disconnected (MQTT 5
// clients first get a DISCONNECT saying "server busy" or "server shutting
// down"): its client still holds the message and publishes it again after it
// reconnects. So the broker keeps no message of its own and there is no
// window in which a crash loses a message the device was told is stored.
//
// A device's messages are received one at a time: while one is being
// stored the broker reads nothing more from that connection, which is the
// push-back when the store is slow.
//
// It never parses payloads: that is the job of Options.Receive
// (mqttingest.Receiver in the gateway).
package broker

import (
	"context"
	"crypto/subtle"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"sync"
	"time"

	mqtt "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/packets"

	"github.com/sluicehq/sluice/internal/lograte"
	"github.com/sluicehq/sluice/internal/tlsconf"
)

// Config is mqtt.embedded.* in the gateway configuration.
type Config struct {
	// Enabled starts the embedded broker; the gateway then stores what
	// devices publish to it instead of subscribing to mqtt.brokers.
	Enabled bool `mapstructure:"enabled"`
	// Listen is the TCP address devices connect to in plain MQTT; empty
	// for none (TLS only).
	Listen string `mapstructure:"listen"`
	// TLSListen, when set, is the TCP address of a second listener that
	// speaks MQTT over TLS with the certificate of TLS.
	TLSListen string `mapstructure:"tls_listen"`
	// TLS is the TLS listener's certificate (reloaded when its files
	// change) and client certificate verification.
	TLS tlsconf.Config `mapstructure:"tls"`
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
// TLS listener, no accounts.
func DefaultConfig() Config {
	return Config{Listen: "127.0.0.1:1883", TLS: tlsconf.DefaultConfig(), Users: []User{}}
}

// Validate reports every bad setting.
func (c Config) Validate() error {
	if !c.Enabled {
		return nil
	}
	var errs []error
	switch {
	case c.Listen == "" && c.TLSListen == "":
		errs = append(errs, errors.New("mqtt.embedded.listen: must be set (host:port) unless mqtt.embedded.tls_listen is"))
	case c.Listen != "":
		if _, _, err := net.SplitHostPort(c.Listen); err != nil {
			errs = append(errs, fmt.Errorf("mqtt.embedded.listen: %q is not host:port", c.Listen))
		}
	}
	if c.TLSListen != "" {
		if _, _, err := net.SplitHostPort(c.TLSListen); err != nil {
			errs = append(errs, fmt.Errorf("mqtt.embedded.tls_listen: %q is not host:port", c.TLSListen))
		} else if c.TLSListen == c.Listen {
			errs = append(errs, fmt.Errorf("mqtt.embedded.tls_listen: %q is also mqtt.embedded.listen", c.TLSListen))
		}
		if !c.TLS.Enabled() {
			errs = append(errs, errors.New("mqtt.embedded.tls.cert_file: must be set (with key_file) when mqtt.embedded.tls_listen is"))
		}
	} else if c.TLS.Enabled() {
		errs = append(errs, errors.New("mqtt.embedded.tls_listen: must be set (host:port, e.g. 0.0.0.0:8883) to serve mqtt.embedded.tls.cert_file"))
	}
	if err := c.TLS.Validate("mqtt.embedded.tls"); err != nil {
		errs = append(errs, err)
	}
	seen := map[string]bool{}
	for i, u := range c.Users {
		switch {
		case u.Username == "":
			errs = append(errs, fmt.Errorf("mqtt.embedded.users[%d].username: must not be empty", i))
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

// ReceiveFunc stores one published message. It must return nil only once
// the message is durable (or durably set aside, as a dead letter), and
// return early with an error when ctx ends.
type ReceiveFunc func(ctx context.Context, topic string, payload []byte) error

// Options are what the gateway derives for the broker from the rest of its
// configuration.
type Options struct {
	// Dir is the broker's directory (created if missing). Gateways before
	// the publish hook kept sessions there; Start drains what they left.
	Dir string
	// TopicOf returns the one topic a user may publish to.
	TopicOf func(User) string
	// Anonymous reports whether an anonymous client may publish to topic
	// (used only with AllowAnonymous).
	Anonymous func(topic string) bool
	// Receive stores each message before the device is acknowledged.
	Receive ReceiveFunc
	// TLS is the server configuration of the TLS listener (Config.TLSListen),
	// built by the caller from Config.TLS.
	TLS *tls.Config
	// ConnectTimeout bounds the time from accepting a connection to
	// reading its CONNECT packet, TLS handshake included (mochi then sets
	// the deadlines the client's keep-alive asks for). 0 means
	// DefaultConnectTimeout.
	ConnectTimeout time.Duration
}

// DefaultConnectTimeout is the default of Options.ConnectTimeout.
const DefaultConnectTimeout = 10 * time.Second

// Broker is a running embedded broker.
type Broker struct {
	srv    *mqtt.Server
	addr   net.Addr // nil without a plain listener
	tlsAdr net.Addr // nil without a TLS listener
	cancel context.CancelFunc
	once   sync.Once
}

// Start starts the broker and returns once it accepts connections.
func Start(cfg Config, opts Options, logger *slog.Logger) (*Broker, error) {
	if opts.Receive == nil {
		return nil, errors.New("start embedded broker: no Receive function")
	}
	if err := os.MkdirAll(opts.Dir, 0o700); err != nil {
		return nil, fmt.Errorf("create broker directory: %w", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	if err := drainLegacySessions(ctx, opts.Dir, opts.Receive, logger); err != nil {
		cancel()
		return nil, err
	}
	caps := mqtt.NewDefaultServerCapabilities()
	caps.MaximumClientWritesPending = 8192
	srv := mqtt.New(&mqtt.Options{Capabilities: caps, Logger: logger, InlineClient: false})
	acl := &aclHook{users: make(map[string]User, len(cfg.Users)), topics: make(map[string]string, len(cfg.Users)),
		anonymous: cfg.AllowAnonymous, anonTopic: opts.Anonymous, logger: logger}
	for _, u := range cfg.Users {
		acl.users[u.Username] = u
		acl.topics[u.Username] = opts.TopicOf(u)
	}
	fail := func(err error) (*Broker, error) {
		cancel()
		_ = srv.Close()
		return nil, err
	}
	if err := srv.AddHook(acl, nil); err != nil {
		return fail(fmt.Errorf("add broker auth hook: %w", err))
	}
	st := &storeHook{ctx: ctx, receive: opts.Receive, srv: srv, logger: logger, errLog: &lograte.Limiter{Every: time.Second}}
	if err := srv.AddHook(st, nil); err != nil {
		return fail(fmt.Errorf("add broker publish hook: %w", err))
	}
	// Bind here, so that a busy port is reported now and port 0 works.
	b := &Broker{srv: srv, cancel: cancel}
	timeout := opts.ConnectTimeout
	if timeout <= 0 {
		timeout = DefaultConnectTimeout
	}
	if cfg.Listen != "" {
		ln, err := net.Listen("tcp", cfg.Listen)
		if err != nil {
			return fail(fmt.Errorf("listen on %s (mqtt.embedded.listen): %w", cfg.Listen, err))
		}
		b.addr = ln.Addr()
		if err := srv.AddListener(&listener{id: "sluice-tcp", ln: ln, timeout: timeout, disconnect: disconnectAll(srv)}); err != nil {
			_ = ln.Close()
			return fail(fmt.Errorf("listen on %s (mqtt.embedded.listen): %w", b.addr, err))
		}
	}
	if cfg.TLSListen != "" {
		if opts.TLS == nil {
			return fail(errors.New("start embedded broker: mqtt.embedded.tls_listen is set and no TLS configuration was given"))
		}
		ln, err := net.Listen("tcp", cfg.TLSListen)
		if err != nil {
			return fail(fmt.Errorf("listen on %s (mqtt.embedded.tls_listen): %w", cfg.TLSListen, err))
		}
		b.tlsAdr = ln.Addr()
		if err := srv.AddListener(&listener{id: "sluice-tls", ln: ln, tls: opts.TLS, timeout: timeout, disconnect: disconnectAll(srv)}); err != nil {
			_ = ln.Close()
			return fail(fmt.Errorf("listen on %s (mqtt.embedded.tls_listen): %w", b.tlsAdr, err))
		}
	}
	if err := srv.Serve(); err != nil {
		return fail(fmt.Errorf("start embedded broker: %w", err))
	}
	return b, nil
}

// Addr returns the address of the plain listener, or "" without one.
func (b *Broker) Addr() string { return addrString(b.addr) }

// TLSAddr returns the address of the TLS listener, or "" without one.
func (b *Broker) TLSAddr() string { return addrString(b.tlsAdr) }

func addrString(a net.Addr) string {
	if a == nil {
		return ""
	}
	return a.String()
}

// Close stops the listener and disconnects every client. The messages being
// stored at that moment are not acknowledged: their Receive context is
// cancelled first, so Close does not wait for the store, and the devices
// send them again to the next broker. Call it before the store behind
// Receive closes.
func (b *Broker) Close() error {
	var err error
	b.once.Do(func() {
		b.cancel()
		if cerr := b.srv.Close(); cerr != nil {
			err = fmt.Errorf("close embedded broker: %w", cerr)
		}
	})
	return err
}

// disconnectAll returns what mochi's server does to a closing listener's
// clients (a DISCONNECT "server shutting down" to each), without its
// Clients.GetByListener, which read-locks the clients twice and so
// deadlocks against a client being removed at the same moment
// (mochi-mqtt/server#488; seen as a shutdown that never ended).
func disconnectAll(srv *mqtt.Server) func(id string) {
	return func(id string) {
		for _, cl := range srv.Clients.GetAll() {
			if cl.Net.Listener == id && !cl.Closed() {
				_ = srv.DisconnectClient(cl, packets.ErrServerShuttingDown)
			}
		}
	}
}

// storeHook hands every publish to Receive before mochi acknowledges it.
// mochi calls OnPublish on the publisher's read goroutine, after the ACL
// check and before it writes the PUBACK (or PUBREC); returning
// packets.ErrRejectPacket makes it drop the message without any answer.
type storeHook struct {
	mqtt.HookBase
	ctx     context.Context // cancelled by Close
	receive ReceiveFunc
	srv     *mqtt.Server
	logger  *slog.Logger
	errLog  *lograte.Limiter
}

func (h *storeHook) ID() string { return "sluice-store" }

func (h *storeHook) Provides(b byte) bool { return b == mqtt.OnPublish || b == mqtt.OnWill }

// OnWill keeps a device's last-will message from being retained: mochi
// publishes wills without OnPublish (so they are not stored) and without
// the ACL check, and a retained one would stay in memory on any topic.
// Nobody may subscribe, so a will reaches no one.
func (h *storeHook) OnWill(_ *mqtt.Client, will mqtt.Will) (mqtt.Will, error) {
	will.Retain = false
	return will, nil
}

func (h *storeHook) OnPublish(cl *mqtt.Client, pk packets.Packet) (packets.Packet, error) {
	err := h.receive(h.ctx, pk.TopicName, pk.Payload)
	if err == nil {
		// Stored: let mochi acknowledge, and neither route nor retain it
		// (nobody may subscribe; a retained copy would only take memory).
		pk.Ignore = true
		return pk, nil
	}
	code := packets.ErrServerBusy
	if h.ctx.Err() != nil {
		code = packets.ErrServerShuttingDown
	}
	if ok, dropped := h.errLog.Allow(time.Now()); ok {
		msg := "embedded broker: message not stored, so not acknowledged; disconnecting the client so that it sends it again"
		if pk.FixedHeader.Qos == 0 {
			msg = "embedded broker: QoS 0 message not stored, dropped"
		}
		h.logger.Warn(msg, "client_id", cl.ID, "topic", pk.TopicName, "qos", pk.FixedHeader.Qos, "err", err, "similar_messages_not_logged", dropped)
	}
	if pk.FixedHeader.Qos > 0 {
		// The client keeps the message until it is acknowledged, and
		// sends it again on its next connection. MQTT 3.1.1 has no way to
		// refuse one publish: closing the connection is the answer.
		if cl.Properties.ProtocolVersion == 5 {
			_ = h.srv.DisconnectClient(cl, code)
		} else {
			cl.Stop(code)
		}
	}
	return pk, packets.ErrRejectPacket
}

// aclHook authenticates clients and restricts what each may do.
type aclHook struct {
	mqtt.HookBase
	users     map[string]User
	topics    map[string]string // username -> the topic it may publish to
	anonymous bool
	anonTopic func(string) bool
	logger    *slog.Logger
}

func (h *aclHook) ID() string { return "sluice-acl" }

func (h *aclHook) Provides(b byte) bool {
	return b == mqtt.OnConnectAuthenticate || b == mqtt.OnACLCheck
}

func (h *aclHook) OnConnectAuthenticate(cl *mqtt.Client, pk packets.Packet) bool {
	name := string(pk.Connect.Username)
	pass := pk.Connect.Password
	if name == "" {
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

// OnACLCheck allows writes only: a device account to its own topic, an
// anonymous client (when allowed) to a topic of the template.
func (h *aclHook) OnACLCheck(cl *mqtt.Client, topic string, write bool) bool {
	if !write {
		return false
	}
	name := string(cl.Properties.Username)
	if name == "" {
		return h.anonymous && h.anonTopic != nil && h.anonTopic(topic)
	}
	t, ok := h.topics[name]
	return ok && topic == t
}
