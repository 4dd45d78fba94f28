package main

import (
	"crypto/tls"
	"log/slog"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice/internal/tlsconf"
)

// certSources hands each TLS listener its server configuration. Listeners
// that name the same certificate and key files share one reloader, so the
// files are looked at once and the metrics count each pair once.
type certSources struct {
	logger  *slog.Logger
	metrics *tlsconf.Metrics
	byPair  map[[2]string]*tlsconf.Reloader
}

func newCertSources(logger *slog.Logger, reg prometheus.Registerer) *certSources {
	return &certSources{logger: logger, metrics: tlsconf.NewMetrics(reg), byPair: map[[2]string]*tlsconf.Reloader{}}
}

// serverConfig returns the TLS configuration of a listener set up by c, or
// nil when c does not enable TLS.
func (s *certSources) serverConfig(c tlsconf.Config) (*tls.Config, error) {
	if !c.Enabled() {
		return nil, nil
	}
	pair := [2]string{c.CertFile, c.KeyFile}
	r, ok := s.byPair[pair]
	if !ok {
		var err error
		r, err = tlsconf.NewReloader(c.CertFile, c.KeyFile, c.ReloadInterval, s.logger, s.metrics)
		if err != nil {
			return nil, err
		}
		s.byPair[pair] = r
	}
	return c.ServerConfig(r)
}
