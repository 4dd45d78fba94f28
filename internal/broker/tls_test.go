package broker

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mochi-mqtt/server/v2/packets"

	"github.com/sluicehq/sluice/internal/tlsconf"
	"github.com/sluicehq/sluice/internal/tlsconf/tlstest"
)

// tlsBroker runs a broker with only a TLS listener that requires a client
// certificate of ca, and returns it with what it stored.
func tlsBroker(t *testing.T, ca *tlstest.CA, timeout time.Duration) (*Broker, func() []string) {
	t.Helper()
	dir := t.TempDir()
	certFile, keyFile := ca.Server(t, "broker").Write(t, dir, "broker")
	cfg := Config{Enabled: true, TLSListen: "127.0.0.1:0", AllowAnonymous: true, TLS: tlsconf.Config{
		CertFile: certFile, KeyFile: keyFile, ClientCAFile: ca.WriteCA(t, dir, "ca.pem"),
		ClientAuth: tlsconf.ClientAuthRequire, ReloadInterval: time.Second,
	}}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	src, err := tlsconf.NewReloader(certFile, keyFile, time.Second, testLogger(), nil)
	if err != nil {
		t.Fatal(err)
	}
	tc, err := cfg.TLS.ServerConfig(src)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var got []string
	b, err := Start(cfg, Options{
		Dir: dir, TLS: tc, ConnectTimeout: timeout,
		TopicOf:   func(u User) string { return "devices/" + u.DeviceID },
		Anonymous: func(topic string) bool { return strings.HasPrefix(topic, "devices/") },
		Receive: func(_ context.Context, topic string, payload []byte) error {
			mu.Lock()
			defer mu.Unlock()
			got = append(got, topic+" "+string(payload))
			return nil
		},
	}, testLogger())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	return b, func() []string {
		mu.Lock()
		defer mu.Unlock()
		return append([]string(nil), got...)
	}
}

func TestTLSListener(t *testing.T) {
	ca := tlstest.NewCA(t, "test CA")
	b, stored := tlsBroker(t, ca, 0)
	if b.Addr() != "" || b.TLSAddr() == "" {
		t.Fatalf("Addr %q, TLSAddr %q: want a TLS listener only", b.Addr(), b.TLSAddr())
	}
	dial := func(cert *tls.Certificate) (net.Conn, error) {
		cc := &tls.Config{RootCAs: ca.Pool(), ServerName: "127.0.0.1"}
		if cert != nil {
			cc.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return cert, nil }
		}
		return tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", b.TLSAddr(), cc)
	}

	device := ca.Client(t, "dev-1").TLS(t)
	conn, err := dial(&device)
	if err != nil {
		t.Fatal(err)
	}
	c := connectRaw(t, conn, 4, "dev-1")
	c.publish(t, "devices/dev-1", "over tls", 1)
	if typ, body, err := c.read(); err != nil || typ != packets.Puback {
		t.Fatalf("after PUBLISH: packet type %d %x, err %v; want PUBACK", typ, body, err)
	}
	if got := stored(); len(got) != 1 || got[0] != "devices/dev-1 over tls" {
		t.Fatalf("stored %q", got)
	}

	// No client certificate, or one of another CA: no MQTT session.
	foreign := tlstest.NewCA(t, "other CA").Client(t, "intruder").TLS(t)
	for name, cert := range map[string]*tls.Certificate{"no certificate": nil, "certificate of another CA": &foreign} {
		t.Run(name, func(t *testing.T) {
			conn, err := dial(cert)
			if err != nil {
				return // refused in the handshake
			}
			defer conn.Close()
			c := &rawClient{conn: conn, version: 4}
			c.r = newReader(conn)
			_, _ = conn.Write(connectPacket(t, "intruder"))
			if typ, _, err := c.read(); err == nil {
				t.Fatalf("the broker answered packet type %d", typ)
			}
		})
	}
	// Plain MQTT on the TLS port gets nothing.
	plain, err := net.DialTimeout("tcp", b.TLSAddr(), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	c = &rawClient{conn: plain, r: newReader(plain), version: 4}
	_, _ = plain.Write(connectPacket(t, "plain"))
	if typ, _, err := c.read(); err == nil {
		t.Fatalf("plain MQTT on the TLS port: the broker answered packet type %d", typ)
	}
	if got := stored(); len(got) != 1 {
		t.Fatalf("stored %q after refused clients", got)
	}
}

// A connection that never completes its handshake, or never sends CONNECT,
// is closed after the connect timeout.
func TestSilentConnectionsClosed(t *testing.T) {
	ca := tlstest.NewCA(t, "test CA")
	tb, _ := tlsBroker(t, ca, 200*time.Millisecond)
	pb, err := Start(Config{Enabled: true, Listen: "127.0.0.1:0", AllowAnonymous: true}, Options{
		Dir: t.TempDir(), ConnectTimeout: 200 * time.Millisecond,
		TopicOf: func(User) string { return "" }, Anonymous: func(string) bool { return true },
		Receive: func(context.Context, string, []byte) error { return nil },
	}, testLogger())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = pb.Close() })
	for name, addr := range map[string]string{"tls": tb.TLSAddr(), "plain": pb.Addr()} {
		t.Run(name, func(t *testing.T) {
			conn, err := net.DialTimeout("tcp", addr, 5*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			// Say nothing; the broker must hang up well before our own
			// deadline (generous: the bound is 200ms).
			_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
			_, err = conn.Read(make([]byte, 1))
			if isTimeout(err) {
				t.Fatal("the broker kept a silent connection open for 5s")
			}
		})
	}
}

func newReader(c net.Conn) *bufio.Reader { return bufio.NewReader(c) }

// connectPacket is an MQTT 3.1.1 CONNECT of client id.
func connectPacket(t *testing.T, id string) []byte {
	t.Helper()
	pk := packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Connect}, ProtocolVersion: 4,
		Connect: packets.ConnectParams{ProtocolName: []byte("MQTT"), Clean: true, Keepalive: 60, ClientIdentifier: id}}
	var buf bytes.Buffer
	if err := pk.ConnectEncode(&buf); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func TestValidateTLSListener(t *testing.T) {
	dir := t.TempDir()
	certFile, keyFile := tlstest.NewCA(t, "test CA").Server(t, "broker").Write(t, dir, "broker")
	files := tlsconf.Config{CertFile: certFile, KeyFile: keyFile, ClientAuth: tlsconf.ClientAuthNone, ReloadInterval: time.Second}
	base := func(f func(*Config)) Config {
		c := DefaultConfig()
		c.Enabled, c.AllowAnonymous = true, true
		f(&c)
		return c
	}
	tests := []struct {
		name string
		cfg  Config
		want string // substring of the error; "" for valid
	}{
		{"plain only", base(func(*Config) {}), ""},
		{"plain and tls", base(func(c *Config) { c.TLSListen, c.TLS = "0.0.0.0:8883", files }), ""},
		{"tls only", base(func(c *Config) { c.Listen, c.TLSListen, c.TLS = "", "0.0.0.0:8883", files }), ""},
		{"no listener", base(func(c *Config) { c.Listen = "" }), "mqtt.embedded.listen: must be set (host:port) unless mqtt.embedded.tls_listen is"},
		{"tls_listen without files", base(func(c *Config) { c.TLSListen = "0.0.0.0:8883" }), "mqtt.embedded.tls.cert_file: must be set (with key_file) when mqtt.embedded.tls_listen is"},
		{"files without tls_listen", base(func(c *Config) { c.TLS = files }), "mqtt.embedded.tls_listen: must be set"},
		{"same address", base(func(c *Config) { c.TLSListen, c.TLS = c.Listen, files }), `mqtt.embedded.tls_listen: "127.0.0.1:1883" is also mqtt.embedded.listen`},
		{"bad address", base(func(c *Config) { c.TLSListen, c.TLS = "8883", files }), `mqtt.embedded.tls_listen: "8883" is not host:port`},
		{"key missing", base(func(c *Config) { c.TLSListen, c.TLS = "0.0.0.0:8883", files; c.TLS.KeyFile = "" }), "mqtt.embedded.tls.key_file: must be set with cert_file"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.cfg.Validate()
			switch {
			case tt.want == "" && err != nil:
				t.Fatalf("unexpected error: %v", err)
			case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
				t.Fatalf("error %v, want one containing %q", err, tt.want)
			}
		})
	}
}

// Close does not wait on a connection that never sent CONNECT, not even
// for its connect timeout (mochi waits for every connection it was handed,
// and one that says nothing used to hold Close for ever, then until its
// deadline, which would hold the gateway's shutdown past its bound).
func TestCloseWithSilentConnection(t *testing.T) {
	b, err := Start(Config{Enabled: true, Listen: "127.0.0.1:0", AllowAnonymous: true}, Options{
		Dir: t.TempDir(), ConnectTimeout: time.Minute,
		TopicOf: func(User) string { return "" }, Anonymous: func(string) bool { return true },
		Receive: func(context.Context, string, []byte) error { return nil },
	}, testLogger())
	if err != nil {
		t.Fatal(err)
	}
	conn, err := net.DialTimeout("tcp", b.Addr(), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	time.Sleep(100 * time.Millisecond) // let the broker accept it
	closed := make(chan error, 1)
	go func() { closed <- b.Close() }()
	select {
	case err := <-closed:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second): // generous: Close ends it at once
		t.Fatal("Close still waiting on a silent connection after 10s (its connect timeout is 1m)")
	}
}
