package tlsconf

import (
	"crypto/tls"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Reloader serves a certificate and key from files and follows them as they
// are replaced: on a handshake, at most once per interval, it looks at the
// files' size and modification time, and when either changed it loads the
// pair again. A pair that does not load (a file half written, a key that
// does not match, a file gone) is logged and counted, and the last good
// pair is served on; the files are tried again once they change again.
type Reloader struct {
	certFile, keyFile string
	interval          time.Duration
	now               func() time.Time
	logger            *slog.Logger
	metrics           *Metrics

	cert      atomic.Pointer[tls.Certificate]
	nextCheck atomic.Int64 // unix nanoseconds; a handshake after it looks at the files

	mu   sync.Mutex // one look at the files at a time
	seen [2]fileStamp
}

// fileStamp is what tells that a file changed.
type fileStamp struct {
	size    int64
	modTime time.Time
	ok      bool // the file could be read at all
}

func stamp(file string) fileStamp {
	fi, err := os.Stat(file)
	if err != nil {
		return fileStamp{}
	}
	return fileStamp{size: fi.Size(), modTime: fi.ModTime(), ok: true}
}

// NewReloader loads the pair; it fails when the pair does not load now.
// interval bounds how often the files are looked at (0 means on every
// handshake, for tests); m may be nil.
func NewReloader(certFile, keyFile string, interval time.Duration, logger *slog.Logger, m *Metrics) (*Reloader, error) {
	r := &Reloader{certFile: certFile, keyFile: keyFile, interval: interval, now: time.Now, logger: logger, metrics: m}
	r.seen = [2]fileStamp{stamp(certFile), stamp(keyFile)}
	cert, err := loadPair(certFile, keyFile)
	if err != nil {
		return nil, fmt.Errorf("load certificate %s and key %s: %w", certFile, keyFile, err)
	}
	r.cert.Store(cert)
	r.nextCheck.Store(r.now().Add(interval).UnixNano())
	m.loaded(certFile, "ok", cert)
	logger.Info("tls certificate loaded", "cert_file", certFile, "subject", cert.Leaf.Subject.String(),
		"not_after", cert.Leaf.NotAfter.UTC().Format(time.RFC3339))
	return r, nil
}

// GetCertificate is tls.Config.GetCertificate: the current pair, looked
// up again first when the interval has passed.
func (r *Reloader) GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	r.maybeReload()
	return r.cert.Load(), nil
}

// Certificate returns the pair being served.
func (r *Reloader) Certificate() *tls.Certificate { return r.cert.Load() }

// maybeReload loads the pair again if the interval has passed and a file
// changed. Handshakes that arrive while another one looks at the files do
// not wait: they get the current pair.
func (r *Reloader) maybeReload() {
	now := r.now()
	next := r.nextCheck.Load()
	if now.UnixNano() < next || !r.nextCheck.CompareAndSwap(next, now.Add(r.interval).UnixNano()) {
		return
	}
	if !r.mu.TryLock() {
		return
	}
	defer r.mu.Unlock()
	cur := [2]fileStamp{stamp(r.certFile), stamp(r.keyFile)}
	if cur == r.seen {
		return
	}
	r.seen = cur
	cert, err := loadPair(r.certFile, r.keyFile)
	if err != nil {
		r.metrics.loaded(r.certFile, "error", nil)
		old := r.cert.Load()
		r.logger.Error("tls certificate changed on disk but does not load: still serving the previous one; it is tried again when the files change",
			"cert_file", r.certFile, "key_file", r.keyFile, "err", err,
			"serving_not_after", old.Leaf.NotAfter.UTC().Format(time.RFC3339))
		return
	}
	r.cert.Store(cert)
	r.metrics.loaded(r.certFile, "ok", cert)
	r.logger.Info("tls certificate reloaded", "cert_file", r.certFile, "subject", cert.Leaf.Subject.String(),
		"not_after", cert.Leaf.NotAfter.UTC().Format(time.RFC3339))
}

// Metrics count the certificate loads and expose the served certificate's
// expiry, labelled by certificate file. One Metrics serves every Reloader
// of a process.
type Metrics struct {
	loads    *prometheus.CounterVec
	notAfter *prometheus.GaugeVec
}

// NewMetrics registers the metrics on reg, which may be nil.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		loads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_tls_certificate_loads_total",
			Help: "TLS certificate and key loads (at start and after the files changed), by certificate file and result (ok, error: the previous pair is still served).",
		}, []string{"cert_file", "result"}),
		notAfter: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "sluice_tls_certificate_not_after_seconds",
			Help: "Expiry (Unix seconds) of the TLS certificate being served, by certificate file.",
		}, []string{"cert_file"}),
	}
	if reg != nil {
		reg.MustRegister(m.loads, m.notAfter)
	}
	return m
}

func (m *Metrics) loaded(file, result string, cert *tls.Certificate) {
	if m == nil {
		return
	}
	m.loads.WithLabelValues(file, result).Inc()
	if cert != nil && cert.Leaf != nil {
		m.notAfter.WithLabelValues(file).Set(float64(cert.Leaf.NotAfter.Unix()))
	}
}
