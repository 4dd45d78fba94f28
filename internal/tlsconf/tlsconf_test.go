package tlsconf

import (
	"bytes"
	"crypto/tls"
	"io"
	"log/slog"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/sluicehq/sluice/internal/tlsconf/tlstest"
)

// serve runs a TLS listener with tc that answers "ok" on every connection
// whose handshake succeeded, and returns its address.
func serve(t *testing.T, tc *tls.Config) string {
	t.Helper()
	ln, err := tls.Listen("tcp", "127.0.0.1:0", tc)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				_ = c.SetDeadline(time.Now().Add(10 * time.Second))
				if c.(*tls.Conn).Handshake() == nil {
					_, _ = c.Write([]byte("ok"))
				}
			}()
		}
	}()
	return ln.Addr().String()
}

// dial connects with the client config cc and returns the serial of the
// server's certificate, or the error of the handshake or of the first read
// (a TLS 1.3 server refuses a client certificate after the client finished
// its side of the handshake).
func dial(addr string, cc *tls.Config) (*big.Int, error) {
	c, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", addr, cc)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	b := make([]byte, 2)
	if _, err := io.ReadFull(c, b); err != nil {
		return nil, err
	}
	return c.ConnectionState().PeerCertificates[0].SerialNumber, nil
}

// replace writes data to file and moves its modification time forward, so
// that the change is seen whatever the file system's time resolution.
func replace(t *testing.T, file string, data []byte, mtime time.Time) {
	t.Helper()
	if err := os.WriteFile(file, data, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(file, mtime, mtime); err != nil {
		t.Fatal(err)
	}
}

func discard() *slog.Logger { return slog.New(slog.DiscardHandler) }

func TestReloadFollowsTheFilesAndKeepsTheLastGoodPair(t *testing.T) {
	dir := t.TempDir()
	ca := tlstest.NewCA(t, "test CA")
	first := ca.Server(t, "first")
	certFile, keyFile := first.Write(t, dir, "server")
	var logs bytes.Buffer
	reg := prometheus.NewRegistry()
	m := NewMetrics(reg)
	r, err := NewReloader(certFile, keyFile, 0, slog.New(slog.NewTextHandler(&logs, nil)), m)
	if err != nil {
		t.Fatal(err)
	}
	tc, err := (Config{CertFile: certFile, KeyFile: keyFile, ClientAuth: ClientAuthNone}).ServerConfig(r)
	if err != nil {
		t.Fatal(err)
	}
	addr := serve(t, tc)
	client := &tls.Config{RootCAs: ca.Pool(), ServerName: "127.0.0.1"}
	mtime := time.Now()
	step := func() time.Time { mtime = mtime.Add(time.Minute); return mtime }
	want := func(what string, p tlstest.Pair) {
		t.Helper()
		got, err := dial(addr, client)
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if got.Cmp(p.Serial) != 0 {
			t.Fatalf("%s: served certificate %v, want %v", what, got, p.Serial)
		}
	}
	want("at start", first)

	second := ca.Server(t, "second")
	replace(t, certFile, second.CertPEM, step())
	replace(t, keyFile, second.KeyPEM, step())
	want("after both files were replaced", second)

	// A certificate that is not PEM: the last good pair stays.
	replace(t, certFile, []byte("-----BEGIN CERTIFICATE-----\nbroken\n"), step())
	want("after a broken certificate file", second)
	// A certificate whose key is not (yet) the one on disk: a rotation
	// caught half way.
	third := ca.Server(t, "third")
	replace(t, certFile, third.CertPEM, step())
	want("after the certificate alone was replaced", second)
	// A key file gone.
	if err := os.Remove(keyFile); err != nil {
		t.Fatal(err)
	}
	want("after the key file was removed", second)
	// The rotation completes.
	replace(t, keyFile, third.KeyPEM, step())
	want("after the key was replaced too", third)

	if got := testutil.ToFloat64(m.loads.WithLabelValues(certFile, "ok")); got != 3 {
		t.Errorf("loads ok = %v, want 3 (start and two reloads)", got)
	}
	if got := testutil.ToFloat64(m.loads.WithLabelValues(certFile, "error")); got != 3 {
		t.Errorf("loads error = %v, want 3", got)
	}
	if got, want := testutil.ToFloat64(m.notAfter.WithLabelValues(certFile)), float64(r.Certificate().Leaf.NotAfter.Unix()); got != want {
		t.Errorf("not_after = %v, want %v", got, want)
	}
	for _, line := range []string{"tls certificate reloaded", "does not load: still serving the previous one"} {
		if !strings.Contains(logs.String(), line) {
			t.Errorf("log lacks %q:\n%s", line, logs.String())
		}
	}
}

func TestReloadLooksAtTheFilesAtMostOncePerInterval(t *testing.T) {
	dir := t.TempDir()
	ca := tlstest.NewCA(t, "test CA")
	first, second := ca.Server(t, "first"), ca.Server(t, "second")
	certFile, keyFile := first.Write(t, dir, "server")
	r, err := NewReloader(certFile, keyFile, time.Minute, discard(), nil)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	r.now = func() time.Time { return now }
	r.nextCheck.Store(now.Add(time.Minute).UnixNano())
	mtime := time.Now().Add(time.Hour)
	replace(t, certFile, second.CertPEM, mtime)
	replace(t, keyFile, second.KeyPEM, mtime)
	serial := func() *big.Int {
		c, err := r.GetCertificate(nil)
		if err != nil {
			t.Fatal(err)
		}
		return c.Leaf.SerialNumber
	}
	if got := serial(); got.Cmp(first.Serial) != 0 {
		t.Fatalf("within the interval: serving %v, want the first certificate %v", got, first.Serial)
	}
	now = now.Add(time.Minute)
	if got := serial(); got.Cmp(second.Serial) != 0 {
		t.Fatalf("after the interval: serving %v, want the second certificate %v", got, second.Serial)
	}
}

func TestNewReloaderRefusesAPairThatDoesNotLoad(t *testing.T) {
	dir := t.TempDir()
	ca := tlstest.NewCA(t, "test CA")
	a, b := ca.Server(t, "a"), ca.Server(t, "b")
	certFile, _ := a.Write(t, dir, "a")
	_, keyFile := b.Write(t, dir, "b")
	if _, err := NewReloader(certFile, keyFile, time.Second, discard(), nil); err == nil {
		t.Fatal("a certificate with another certificate's key was accepted")
	}
}

func TestClientCertificates(t *testing.T) {
	dir := t.TempDir()
	ca, other := tlstest.NewCA(t, "test CA"), tlstest.NewCA(t, "other CA")
	certFile, keyFile := ca.Server(t, "server").Write(t, dir, "server")
	caFile := ca.WriteCA(t, dir, "ca.pem")
	good, foreign := ca.Client(t, "device"), other.Client(t, "intruder")
	r, err := NewReloader(certFile, keyFile, time.Second, discard(), nil)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		auth   string
		client *tlstest.Pair
		ok     bool
	}{
		{ClientAuthNone, nil, true},
		{ClientAuthNone, &good, true},
		{ClientAuthRequest, nil, true},
		{ClientAuthRequest, &good, true},
		{ClientAuthRequest, &foreign, false},
		{ClientAuthRequire, nil, false},
		{ClientAuthRequire, &good, true},
		{ClientAuthRequire, &foreign, false},
	}
	for _, tt := range tests {
		name := tt.auth + "/no certificate"
		switch tt.client {
		case &good:
			name = tt.auth + "/certificate of the CA"
		case &foreign:
			name = tt.auth + "/certificate of another CA"
		}
		t.Run(name, func(t *testing.T) {
			cfg := Config{CertFile: certFile, KeyFile: keyFile, ClientAuth: tt.auth, ReloadInterval: time.Second}
			if tt.auth != ClientAuthNone {
				cfg.ClientCAFile = caFile
			}
			if err := cfg.Validate("http.tls"); err != nil {
				t.Fatal(err)
			}
			tc, err := cfg.ServerConfig(r)
			if err != nil {
				t.Fatal(err)
			}
			addr := serve(t, tc)
			cc := &tls.Config{RootCAs: ca.Pool(), ServerName: "localhost"}
			if tt.client != nil {
				// Sent whatever CAs the server names (a Go client
				// otherwise leaves out a certificate of another CA).
				cert := tt.client.TLS(t)
				cc.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return &cert, nil }
			}
			_, err = dial(addr, cc)
			if tt.ok && err != nil {
				t.Fatalf("refused: %v", err)
			}
			if !tt.ok && err == nil {
				t.Fatal("handshake accepted")
			}
		})
	}
}

func TestOldTLSVersionsRefused(t *testing.T) {
	dir := t.TempDir()
	ca := tlstest.NewCA(t, "test CA")
	certFile, keyFile := ca.Server(t, "server").Write(t, dir, "server")
	r, err := NewReloader(certFile, keyFile, time.Second, discard(), nil)
	if err != nil {
		t.Fatal(err)
	}
	tc, err := DefaultConfig().ServerConfig(r)
	if err != nil {
		t.Fatal(err)
	}
	addr := serve(t, tc)
	if _, err := dial(addr, &tls.Config{RootCAs: ca.Pool(), ServerName: "localhost", MaxVersion: tls.VersionTLS11}); err == nil {
		t.Error("a TLS 1.1 client was served")
	}
	if _, err := dial(addr, &tls.Config{RootCAs: ca.Pool(), ServerName: "localhost", MaxVersion: tls.VersionTLS12}); err != nil {
		t.Errorf("a TLS 1.2 client was refused: %v", err)
	}
}

func TestValidate(t *testing.T) {
	dir := t.TempDir()
	ca := tlstest.NewCA(t, "test CA")
	certFile, keyFile := ca.Server(t, "server").Write(t, dir, "server")
	_, otherKey := ca.Server(t, "other").Write(t, dir, "other")
	caFile := ca.WriteCA(t, dir, "ca.pem")
	notPEM := filepath.Join(dir, "not.pem")
	if err := os.WriteFile(notPEM, []byte("hello"), 0o600); err != nil {
		t.Fatal(err)
	}
	missing := filepath.Join(dir, "missing.pem")
	on := func(f func(*Config)) Config {
		c := DefaultConfig()
		c.CertFile, c.KeyFile = certFile, keyFile
		f(&c)
		return c
	}
	tests := []struct {
		name string
		cfg  Config
		want []string // each a substring of the error; none: valid
	}{
		{"defaults", DefaultConfig(), nil},
		{"on", on(func(*Config) {}), nil},
		{"require", on(func(c *Config) { c.ClientAuth, c.ClientCAFile = ClientAuthRequire, caFile }), nil},
		{"cert without key", on(func(c *Config) { c.KeyFile = "" }), []string{"http.tls.key_file: must be set with cert_file"}},
		{"key without cert", on(func(c *Config) { c.CertFile = "" }), []string{"http.tls.cert_file: must be set with key_file"}},
		{"missing cert", on(func(c *Config) { c.CertFile = missing }), []string{"http.tls.cert_file, key_file:", "missing.pem"}},
		{"key of another cert", on(func(c *Config) { c.KeyFile = otherKey }), []string{"http.tls.cert_file, key_file: tls: private key does not match public key"}},
		{"bad client_auth", on(func(c *Config) { c.ClientAuth = "maybe" }), []string{`http.tls.client_auth: "maybe" is not one of none, request, require`}},
		{"require without CA", on(func(c *Config) { c.ClientAuth = ClientAuthRequire }), []string{"http.tls.client_ca_file: must be set when client_auth is require"}},
		{"request without CA", on(func(c *Config) { c.ClientAuth = ClientAuthRequest }), []string{"http.tls.client_ca_file: must be set when client_auth is request"}},
		{"CA not PEM", on(func(c *Config) { c.ClientCAFile = notPEM }), []string{"http.tls.client_ca_file: ", "holds no PEM certificate"}},
		{"CA missing", on(func(c *Config) { c.ClientCAFile = missing }), []string{"http.tls.client_ca_file: read: "}},
		{"client certs without TLS", func() Config {
			c := DefaultConfig()
			c.ClientAuth, c.ClientCAFile = ClientAuthRequire, caFile
			return c
		}(), []string{"http.tls.cert_file: client certificates (client_ca_file, client_auth) need TLS"}},
		{"reload interval", on(func(c *Config) { c.ReloadInterval = 0 }), []string{"http.tls.reload_interval: must be 1s..1h, got 0s"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.cfg.Validate("http.tls")
			if len(tt.want) == 0 {
				if err != nil {
					t.Fatalf("unexpected error: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("no error, want %q", tt.want)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
		})
	}
}
