// Package tlsconf builds the server side of TLS for the gateway's listeners
// (HTTP and the embedded MQTT broker): the settings each listener takes, a
// certificate source that follows the certificate and key files as they are
// replaced on disk, and the optional verification of client certificates.
package tlsconf

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"slices"
	"time"
)

// Client authentication modes (Config.ClientAuth).
const (
	ClientAuthNone    = "none"    // no client certificate is asked for
	ClientAuthRequest = "request" // asked for; verified against the CA when one is sent
	ClientAuthRequire = "require" // required and verified against the CA
)

// Config is the TLS of one listener, e.g. http.tls.* in the gateway
// configuration. TLS is on when CertFile is set.
type Config struct {
	// CertFile is a PEM file: the server certificate, then any
	// intermediates.
	CertFile string `mapstructure:"cert_file"`
	// KeyFile is the PEM private key of CertFile.
	KeyFile string `mapstructure:"key_file"`
	// ClientCAFile is a PEM file of the CA certificates that client
	// certificates must chain to. It is read once, at start.
	ClientCAFile string `mapstructure:"client_ca_file"`
	// ClientAuth is none, request or require.
	ClientAuth string `mapstructure:"client_auth"`
	// ReloadInterval is how often, at most, the files are looked at for
	// a change (on a handshake, not in the background).
	ReloadInterval time.Duration `mapstructure:"reload_interval"`
}

// DefaultConfig returns the defaults: TLS off, no client certificates,
// files checked at most every 5s once TLS is on.
func DefaultConfig() Config {
	return Config{ClientAuth: ClientAuthNone, ReloadInterval: 5 * time.Second}
}

// Enabled reports whether the listener serves TLS.
func (c Config) Enabled() bool { return c.CertFile != "" || c.KeyFile != "" }

// Validate reports every bad setting; prefix is the settings' key (e.g.
// "http.tls") and starts each message. It reads the files: the pair must
// load and the client CA file must hold a certificate.
func (c Config) Validate(prefix string) error {
	var errs []error
	bad := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf(prefix+"."+format, args...))
	}
	if !slices.Contains([]string{ClientAuthNone, ClientAuthRequest, ClientAuthRequire}, c.ClientAuth) {
		bad("client_auth: %q is not one of none, request, require", c.ClientAuth)
	}
	if c.ReloadInterval < time.Second || c.ReloadInterval > time.Hour {
		bad("reload_interval: must be 1s..1h, got %s", c.ReloadInterval)
	}
	if !c.Enabled() {
		if c.ClientCAFile != "" || c.ClientAuth == ClientAuthRequest || c.ClientAuth == ClientAuthRequire {
			bad("cert_file: client certificates (client_ca_file, client_auth) need TLS: set cert_file and key_file")
		}
		return errors.Join(errs...)
	}
	switch {
	case c.CertFile == "":
		bad("cert_file: must be set with key_file (%q)", c.KeyFile)
	case c.KeyFile == "":
		bad("key_file: must be set with cert_file (%q)", c.CertFile)
	default:
		if _, err := loadPair(c.CertFile, c.KeyFile); err != nil {
			bad("cert_file, key_file: %v", err)
		}
	}
	if c.ClientCAFile != "" {
		if _, err := loadPool(c.ClientCAFile); err != nil {
			bad("client_ca_file: %v", err)
		}
	}
	if c.ClientAuth == ClientAuthRequire && c.ClientCAFile == "" {
		bad("client_ca_file: must be set when client_auth is require")
	}
	if c.ClientAuth == ClientAuthRequest && c.ClientCAFile == "" {
		bad("client_ca_file: must be set when client_auth is request (certificates are verified against it)")
	}
	return errors.Join(errs...)
}

// ServerConfig returns the TLS configuration of a listener that serves the
// certificates of src: TLS 1.2 at least, and the client certificate
// verification of c. It reads c.ClientCAFile.
func (c Config) ServerConfig(src *Reloader) (*tls.Config, error) {
	tc := &tls.Config{MinVersion: tls.VersionTLS12, GetCertificate: src.GetCertificate}
	switch c.ClientAuth {
	case ClientAuthNone, "":
		return tc, nil
	case ClientAuthRequest:
		tc.ClientAuth = tls.VerifyClientCertIfGiven
	case ClientAuthRequire:
		tc.ClientAuth = tls.RequireAndVerifyClientCert
	default:
		return nil, fmt.Errorf("client_auth: %q is not one of none, request, require", c.ClientAuth)
	}
	pool, err := loadPool(c.ClientCAFile)
	if err != nil {
		return nil, fmt.Errorf("client_ca_file: %w", err)
	}
	tc.ClientCAs = pool
	return tc, nil
}

// loadPool reads a PEM file of CA certificates.
func loadPool(file string) (*x509.CertPool, error) {
	pem, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("read: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("%s holds no PEM certificate", file)
	}
	return pool, nil
}

// loadPair reads a certificate and its key, and parses the leaf (for its
// expiry).
func loadPair(certFile, keyFile string) (*tls.Certificate, error) {
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, err
	}
	if cert.Leaf == nil {
		leaf, err := x509.ParseCertificate(cert.Certificate[0])
		if err != nil {
			return nil, fmt.Errorf("parse certificate of %s: %w", certFile, err)
		}
		cert.Leaf = leaf
	}
	return &cert, nil
}
