package main

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"io"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/config"
)

// healthServer answers /healthz with 200 and /readyz with the status held
// in ready.
func healthServer(ready *atomic.Int32) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		_, _ = io.WriteString(w, `{"status":"ok"}`)
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		code := int(ready.Load())
		w.WriteHeader(code)
		if code == http.StatusOK {
			_, _ = io.WriteString(w, `{"status":"ready"}`)
			return
		}
		_, _ = io.WriteString(w, `{"error":"store: cassandra does not answer"}`)
	})
	return mux
}

// runHealthcheck runs `ingest healthcheck ARGS` with the environment env
// (no configuration file) and returns its error and output.
func runHealthcheck(env []string, args ...string) (string, error) {
	var out strings.Builder
	err := run(context.Background(), append([]string{"healthcheck", "--config", ""}, args...), env, &out, &out)
	return out.String(), err
}

// The listener is at 0.0.0.0:PORT in the configuration, as in a container;
// the probe reaches it on loopback, answers 0 for ready and an error naming
// the reason for unready.
func TestHealthcheck(t *testing.T) {
	var ready atomic.Int32
	ready.Store(http.StatusOK)
	srv := httptest.NewServer(healthServer(&ready))
	defer srv.Close()
	_, port, _ := net.SplitHostPort(srv.Listener.Addr().String())
	env := []string{"SLUICE_HTTP_ADDR=0.0.0.0:" + port, "SLUICE_DATA_DIR=" + t.TempDir()}

	if out, err := runHealthcheck(env); err != nil || !strings.Contains(out, `"ready"`) {
		t.Fatalf("ready gateway: err %v, output %q", err, out)
	}
	ready.Store(http.StatusServiceUnavailable)
	_, err := runHealthcheck(env)
	if err == nil || !strings.Contains(err.Error(), "503") || !strings.Contains(err.Error(), "cassandra does not answer") {
		t.Fatalf("unready gateway: err %v, want the 503 and its reason", err)
	}
	// --live asks /healthz, which answers 200 while /readyz says 503.
	if out, err := runHealthcheck(env, "--live"); err != nil || !strings.Contains(out, "/healthz") {
		t.Fatalf("--live on an unready gateway: err %v, output %q", err, out)
	}
	srv.Close()
	if _, err := runHealthcheck(env, "--live"); err == nil || !strings.Contains(err.Error(), "connect") {
		t.Fatalf("no gateway listening: err %v, want a connection error", err)
	}
	// A bad configuration is reported as such, not as an unhealthy gateway.
	if _, err := runHealthcheck(append(env, "SLUICE_HTTP_ADDR=nonsense")); err == nil || !strings.Contains(err.Error(), "http.addr") {
		t.Fatalf("bad http.addr: err %v", err)
	}
}

// With http.tls set the probe speaks HTTPS to the listener without
// verifying its certificate.
func TestHealthcheckTLS(t *testing.T) {
	dir := t.TempDir()
	certFile, keyFile := writeSelfSigned(t, dir)
	pair, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		t.Fatal(err)
	}
	var ready atomic.Int32
	ready.Store(http.StatusOK)
	srv := httptest.NewUnstartedServer(healthServer(&ready))
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{pair}}
	srv.StartTLS()
	defer srv.Close()
	env := []string{"SLUICE_HTTP_ADDR=" + srv.Listener.Addr().String(), "SLUICE_DATA_DIR=" + dir,
		"SLUICE_HTTP_TLS_CERT_FILE=" + certFile, "SLUICE_HTTP_TLS_KEY_FILE=" + keyFile}
	if out, err := runHealthcheck(env); err != nil || !strings.HasPrefix(out, "https://") {
		t.Fatalf("TLS gateway: err %v, output %q", err, out)
	}
	// Plain HTTP to the TLS listener fails: the scheme follows http.tls.
	if _, err := runHealthcheck(env[:2]); err == nil {
		t.Fatal("plain HTTP probe of a TLS listener succeeded")
	}
}

func TestProbeURL(t *testing.T) {
	tests := []struct{ addr, want string }{
		{"0.0.0.0:8080", "http://127.0.0.1:8080/readyz"},
		{":8080", "http://127.0.0.1:8080/readyz"},
		{"[::]:8080", "http://[::1]:8080/readyz"},
		{"10.1.2.3:9000", "http://10.1.2.3:9000/readyz"},
		{"localhost:80", "http://localhost:80/readyz"},
	}
	for _, tt := range tests {
		got, err := probeURL(config.HTTP{Addr: tt.addr}, "/readyz")
		if err != nil || got != tt.want {
			t.Errorf("probeURL(%q) = %q, %v; want %q", tt.addr, got, err, tt.want)
		}
	}
	if _, err := probeURL(config.HTTP{Addr: "8080"}, "/readyz"); err == nil {
		t.Error("probeURL accepted an address without a port")
	}
}

// writeSelfSigned writes a certificate for 127.0.0.1 and its key.
func writeSelfSigned(t *testing.T, dir string) (certFile, keyFile string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1),
		Subject:      pkix.Name{CommonName: "sluice healthcheck test"},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1)},
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}), 0o600); err != nil {
		t.Fatal(err)
	}
	return certFile, keyFile
}
