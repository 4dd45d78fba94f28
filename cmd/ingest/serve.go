package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"golang.org/x/net/netutil"

	"github.com/sluicehq/sluice/internal/buckets"
	"github.com/sluicehq/sluice/internal/config"
	"github.com/sluicehq/sluice/internal/cursor"
	"github.com/sluicehq/sluice/internal/httpingest"
	"github.com/sluicehq/sluice/internal/quota"
	"github.com/sluicehq/sluice/internal/readapi"
	"github.com/sluicehq/sluice/internal/readiness"
	"github.com/sluicehq/sluice/internal/retention"
	"github.com/sluicehq/sluice/internal/server"
	"github.com/sluicehq/sluice/internal/sink"
)

// serve runs the gateway until ctx is cancelled, then shuts down in reverse
// order of start: stop taking requests and finish those in progress, drain
// the write pipeline, close the store. onListen, if set, is told the bound
// address (tests listen on port 0).
func serve(ctx context.Context, cfg config.Config, file string, logger *slog.Logger, onListen func(addr string)) error {
	start := time.Now()
	if file == "" {
		file = "(built-in defaults)"
	}
	logger.Info("starting sluice gateway", "config", file, "data_dir", cfg.DataDir, "backend", cfg.Store.Backend)
	if cfg.UsesDevToken() {
		logger.Warn("THE DEVELOPMENT TOKEN IS ACCEPTED: anyone who knows it can write and read as its tenant; set auth.tokens (SLUICE_AUTH_TOKENS) before exposing this gateway",
			"token", config.DevToken, "tenant", "dev")
	}

	defer applyMemoryBudget(cfg, logger, os.Getenv)()

	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))

	st, err := openBackend(ctx, &cfg, logger, reg)
	if err != nil {
		return err
	}
	defer func() {
		if err := st.Close(); err != nil {
			logger.Error("close store", "err", err)
		} else {
			logger.Info("store closed")
		}
	}()

	ru, err := startRollups(cfg, st, logger.With("component", "rollups"), reg)
	if err != nil {
		return err
	}
	defer ru.close() // deferred after st.Close, so it runs first
	al, err := openAudit(cfg, st, logger.With("component", "audit"), reg)
	if err != nil {
		return err
	}
	stopRetention, err := startRetention(ctx, cfg, st, ru.retentionStore(), al, logger.With("component", "retention"), reg)
	if err != nil {
		return err
	}
	defer stopRetention() // before the rollup and raw stores close
	// What depends on the configuration alone is loaded before the write
	// pipeline starts, so that a bad key or certificate stops nothing.
	keys, err := cursorKeys(cfg, logger)
	if err != nil {
		return err
	}
	certs := newCertSources(logger.With("component", "tls"), reg)
	httpTLS, err := certs.serverConfig(cfg.HTTP.TLS)
	if err != nil {
		return fmt.Errorf("http.tls: %w", err)
	}
	mqttBuckets(&cfg, logger)
	cfg.Buckets.Reserve = buckets.DefaultReserve(cfg.Buckets)
	sinkOpts := ru.sinkOptions()
	if al != nil {
		sinkOpts = append(sinkOpts, sink.WithAuditGate(al.Gate))
	}
	sk := sink.New(cfg.Sink, cfg.Buckets, st, logger.With("component", "sink"), reg, sinkOpts...)
	stopAudit := startAudit(ctx, cfg, al, logger.With("component", "audit"))
	defer stopAudit() // before the store closes
	quotas := quota.New(cfg.Quotas, configuredTenants(cfg), time.Now, reg)
	ingest := httpingest.New(httpingest.Config{
		MaxBodyBytes: cfg.HTTP.MaxBodyBytes, MaxDecompressedBytes: cfg.HTTP.MaxDecompressedBytes, Limits: cfg.Limits.Decode(),
		MaxInflightBodyBytes: cfg.HTTP.MaxInflightBodyBytes, BodyAdmissionTimeout: cfg.HTTP.BodyAdmissionTimeout,
		Horizon: horizon(cfg.Retention), Influx: cfg.Influx,
	}, quotas.Writer(sk), time.Now, logger.With("component", "http"), reg)
	readOpts := []readapi.Option{readapi.WithConfig(cfg.Read), readapi.WithCursorKeys(keys)}
	read := readapi.New(retention.Hide(st, cfg.Retention, time.Now), time.Now, logger.With("component", "read"), append(readOpts, readapi.WithSettle(sk.Settle), readapi.WithReconciles(sk.Reconciles), readapi.WithHottest(sk.Hottest), readapi.WithRecount(cfg.Buckets.MaxRows))...)
	stopMQTT, mqttReady, err := startMQTT(cfg, sk, certs, quotas, logger, reg)
	if err != nil {
		shutdownSink(sk, cfg.HTTP.ShutdownTimeout, logger)
		return err
	}

	tokens := make([]server.Token, len(cfg.Auth.Tokens))
	for i, t := range cfg.Auth.Tokens {
		tokens[i] = server.Token{Token: t.Token, Tenant: t.Tenant}
	}
	ready := readiness.New(readyChecks(cfg, st, sk, mqttReady)...)
	h := server.Handler(tokens, server.Routes{
		PostReadings: quotas.Middleware(cfg.HTTP.MaxBodyBytes, ingest.Readings),
		PostAudit:    quotas.Middleware(cfg.HTTP.MaxBodyBytes, ingest.Audit),
		InfluxV1:     quotas.Middleware(cfg.HTTP.MaxBodyBytes, ingest.InfluxV1),
		InfluxV2:     quotas.Middleware(cfg.HTTP.MaxBodyBytes, ingest.InfluxV2),
		GetReadings:  read.Readings, GetAudit: read.Audit, GetPartitions: read.Partitions,
		Metrics: promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}),
		Extra: extraRoutes(ru.routes(), auditRoutes(al, cfg.Read, logger), map[string]http.HandlerFunc{
			"GET /v1/deadletters":    read.DeadLetters(st),
			"GET /v1/partitions/top": read.TopPartitions,
		}),
		Log:   logger.With("component", "http"),
		Ready: ready.Ready,
	})

	ln, err := listen(cfg.HTTP)
	if err != nil {
		stopMQTT(cfg.HTTP.ShutdownTimeout)
		shutdownSink(sk, cfg.HTTP.ShutdownTimeout, logger)
		return fmt.Errorf("listen on %s (http.addr): %w", cfg.HTTP.Addr, err)
	}
	rq := newRequests()
	defer rq.cancel()
	srv := &http.Server{
		Handler:           rq.wrap(h),
		BaseContext:       rq.base,
		ReadTimeout:       cfg.HTTP.ReadTimeout,
		ReadHeaderTimeout: 10 * time.Second,
		MaxHeaderBytes:    cfg.HTTP.MaxHeaderBytes,
		WriteTimeout:      cfg.HTTP.WriteTimeout,
		IdleTimeout:       cfg.HTTP.IdleTimeout,
		ErrorLog:          httpErrorLog(logger, reg),
		TLSConfig:         httpTLS,
	}
	// HTTP/1.1 only, over TLS as on plain HTTP: the timeouts and limits
	// above assume one request at a time per connection, and HTTP/2 would
	// add a second protocol (many streams per connection) for a hostile
	// client to work on.
	srv.Protocols = new(http.Protocols)
	srv.Protocols.SetHTTP1(true)
	serveErr := make(chan error, 1)
	if httpTLS != nil {
		// The certificate comes from TLSConfig.GetCertificate.
		go func() { serveErr <- srv.ServeTLS(ln, "", "") }()
	} else {
		go func() { serveErr <- srv.Serve(ln) }()
	}
	logger.Info("gateway ready", "http_addr", ln.Addr().String(), "tls", httpTLS != nil, "startup", time.Since(start).Round(time.Millisecond))
	if onListen != nil {
		onListen(ln.Addr().String())
	}

	var runErr error
	select {
	case <-ctx.Done():
		runErr = drain(ready, srv, serveErr, cfg.HTTP.DrainDelay, logger)
	case err := <-serveErr:
		runErr = fmt.Errorf("http server: %w", err)
	}
	shutdown(srv, rq, stopMQTT, sk, cfg.HTTP.ShutdownTimeout, logger)
	return runErr
}

// handlerGrace is how long the requests cancelled at the end of
// http.shutdown_timeout get to return, and sinkDrainFloor the least time
// the write pipeline gets to commit what it admitted, however little of
// http.shutdown_timeout the steps before it left: a shutdown takes at
// most http.shutdown_timeout plus these two. Every handler and the sink
// stop on their context, so they need little.
const (
	handlerGrace   = time.Second
	sinkDrainFloor = time.Second
)

// shutdown stops the HTTP server, MQTT and the write pipeline, in this
// order, within one deadline, http.shutdown_timeout from now: each step
// gets what the steps before it left (the pipeline at least
// sinkDrainFloor). Requests still running when the HTTP step's time is
// up are cancelled (their context ends, their connections close), and
// shutdown waits up to handlerGrace for them to return, so that a long
// request (a rollup rebuild, a long read) does not run on while the
// stores close under it.
func shutdown(srv *http.Server, rq *requests, stopMQTT func(time.Duration), sk *sink.Sink, timeout time.Duration, logger *slog.Logger) {
	deadline := time.Now().Add(timeout)
	logger.Info("shutting down: closing the listener, finishing requests in progress", "shutdown_timeout", timeout)
	sctx, cancel := context.WithDeadline(context.Background(), deadline)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil && !errors.Is(err, http.ErrServerClosed) {
		logger.Warn("http.shutdown_timeout reached with requests in progress: cancelling them", "err", err)
		rq.cancel()
		_ = srv.Close()
		if n := rq.waitIdle(handlerGrace); n == 0 {
			logger.Info("cancelled requests returned")
		} else {
			logger.Error("cancelled requests still running; closing the stores under them", "requests", n, "waited", handlerGrace)
		}
	}
	logger.Info("http server stopped")
	stopMQTT(max(time.Until(deadline), 0))
	shutdownSink(sk, max(time.Until(deadline), sinkDrainFloor), logger)
}

// requests runs the HTTP requests under a context that shutdown cancels
// when http.shutdown_timeout ends with requests still running, and counts
// them, so that shutdown can wait for them to return before the stores
// close.
type requests struct {
	ctx     context.Context
	cancel  context.CancelFunc
	running atomic.Int64 // requests in their handler
}

func newRequests() *requests {
	rq := &requests{}
	rq.ctx, rq.cancel = context.WithCancel(context.Background())
	return rq
}

// base is the http.Server's BaseContext.
func (rq *requests) base(net.Listener) context.Context { return rq.ctx }

// wrap counts the requests h serves.
func (rq *requests) wrap(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rq.running.Add(1)
		defer rq.running.Add(-1)
		h.ServeHTTP(w, r)
	})
}

// waitIdle waits up to d for the requests in their handler to return, and
// reports how many are still running. It polls: it runs once, at the end
// of a shutdown, when no new request can start.
func (rq *requests) waitIdle(d time.Duration) int64 {
	deadline := time.Now().Add(d)
	for {
		n := rq.running.Load()
		if n == 0 || !time.Now().Before(deadline) {
			return n
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// drain is the first step of a shutdown: /readyz answers 503 from now on,
// and requests are still served for delay, so that load balancers notice
// and stop sending before the listener closes. Keep-alives are turned off,
// so that clients open their next connection (elsewhere, once the balancer
// has noticed).
func drain(ready *readiness.State, srv *http.Server, serveErr <-chan error, delay time.Duration, logger *slog.Logger) error {
	ready.Stop()
	if delay <= 0 {
		logger.Info("shutting down: /readyz answers 503 (http.drain_delay is 0: no drain)")
		return nil
	}
	srv.SetKeepAlivesEnabled(false)
	logger.Info("shutting down: /readyz answers 503; requests are still served for http.drain_delay", "drain_delay", delay)
	t := time.NewTimer(delay)
	defer t.Stop()
	select {
	case <-t.C:
		logger.Info("drain delay over")
		return nil
	case err := <-serveErr:
		return fmt.Errorf("http server: %w", err)
	}
}

// Readiness probes: a store probe answer is reused for readyProbeTTL and
// waited for at most readyProbeTimeout.
const (
	readyProbeTTL     = time.Second
	readyProbeTimeout = 2 * time.Second
)

// saturated is the write pipeline's saturation signal (sink.Sink).
type saturated interface {
	Saturated(now time.Time) time.Duration
}

// readyChecks are what /readyz checks: the store takes a write, the MQTT
// subscription is connected (mqttReady, nil without one), and the write
// pipeline has not been refusing writes for longer than
// http.ready_saturation.
func readyChecks(cfg config.Config, st any, sk saturated, mqttReady func() error) []readiness.Check {
	var checks []readiness.Check
	if p, ok := st.(interface{ Probe(context.Context) error }); ok {
		probe := readiness.NewProbe(p.Probe, readyProbeTTL, readyProbeTimeout, time.Now)
		checks = append(checks, readiness.Check{Name: "store", Check: probe.Check})
	}
	if mqttReady != nil {
		checks = append(checks, readiness.Check{Name: "mqtt", Check: mqttReady})
	}
	if limit := cfg.HTTP.ReadySaturation; limit > 0 {
		checks = append(checks, readiness.Check{Name: "pipeline", Check: func() error {
			if d := sk.Saturated(time.Now()); d > limit {
				return fmt.Errorf("refusing writes for %s (sink.queue_rows full; http.ready_saturation %s)", d.Round(time.Second), limit)
			}
			return nil
		}})
	}
	return checks
}

func shutdownSink(sk *sink.Sink, timeout time.Duration, logger *slog.Logger) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	if err := sk.Close(ctx); err != nil {
		logger.Error("drain write pipeline", "err", err)
		return
	}
	logger.Info("write pipeline drained")
}

// cursorKeys loads the key that seals the read API's cursors: the file
// read.cursor_key_file names, else data_dir/cursor.key, made on first start.
func cursorKeys(cfg config.Config, logger *slog.Logger) (*cursor.Keys, error) {
	var keys *cursor.Keys
	var err error
	if cfg.Read.CursorKeyFile != "" {
		keys, err = cursor.LoadKeys(cfg.Read.CursorKeyFile)
	} else {
		if cfg.Store.Backend == "cassandra" {
			logger.Warn("read.cursor_key_file is not set: cursors are sealed with this gateway's own key in data_dir, so another gateway on the same store refuses them; give every gateway the same key file")
		}
		keys, err = cursor.LoadOrCreateKeys(filepath.Join(cfg.DataDir, "cursor.key"))
	}
	if err != nil {
		return nil, fmt.Errorf("read.cursor_key_file: %w", err)
	}
	return keys, nil
}

// configuredTenants lists the tenants the configuration names: they are
// labelled by name in the quota metrics.
func configuredTenants(cfg config.Config) []string {
	var out []string
	for _, t := range cfg.Auth.Tokens {
		out = append(out, t.Tenant)
	}
	out = append(out, cfg.MQTT.Tenant)
	out = append(out, cfg.MQTT.Tenants...)
	for _, u := range cfg.MQTT.Embedded.Users {
		out = append(out, u.Tenant)
	}
	return out
}

// extraRoutes merges the optional routes of the components.
func extraRoutes(sets ...map[string]http.HandlerFunc) map[string]http.HandlerFunc {
	out := make(map[string]http.HandlerFunc)
	for _, set := range sets {
		for pattern, h := range set {
			out[pattern] = h
		}
	}
	return out
}

// listen opens the HTTP listener, serving at most http.max_connections
// connections at once: past that, Accept waits until one closes, and new
// clients wait in the kernel's backlog instead of costing memory here.
func listen(c config.HTTP) (net.Listener, error) {
	ln, err := net.Listen("tcp", c.Addr)
	if err != nil || c.MaxConnections == 0 {
		return ln, err
	}
	return netutil.LimitListener(ln, c.MaxConnections), nil
}
