package main

import (
	"crypto/tls"
	"log"
	"log/slog"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice/internal/lograte"
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

// httpErrorLog is the HTTP server's error log: its lines go to logger at
// warn level, except that the TLS handshake failures, which any client can
// cause (scanners, plain HTTP on the HTTPS port, a refused client
// certificate), are counted and logged at most once a second.
func httpErrorLog(logger *slog.Logger, reg prometheus.Registerer) *log.Logger {
	w := &httpErrorWriter{logger: logger, limit: &lograte.Limiter{Every: time.Second},
		handshakes: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sluice_http_tls_handshake_errors_total",
			Help: "TLS handshakes of the HTTP listener that failed (bad or missing client certificate, plain HTTP, old TLS versions, dropped connections).",
		})}
	if reg != nil {
		reg.MustRegister(w.handshakes)
	}
	return log.New(w, "", 0)
}

type httpErrorWriter struct {
	logger     *slog.Logger
	limit      *lograte.Limiter
	handshakes prometheus.Counter
}

func (w *httpErrorWriter) Write(p []byte) (int, error) {
	msg := strings.TrimSpace(string(p))
	if !strings.Contains(msg, "TLS handshake error") {
		w.logger.Warn(msg)
		return len(p), nil
	}
	w.handshakes.Inc()
	if ok, dropped := w.limit.Allow(time.Now()); ok {
		w.logger.Warn(msg, "similar_messages_not_logged", dropped)
	}
	return len(p), nil
}
