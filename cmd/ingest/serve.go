package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/sluicehq/sluice/internal/buckets"
	"github.com/sluicehq/sluice/internal/config"
	"github.com/sluicehq/sluice/internal/httpingest"
	"github.com/sluicehq/sluice/internal/readapi"
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
	mqttBuckets(&cfg, logger)
	cfg.Buckets.Reserve = buckets.DefaultReserve(cfg.Buckets)
	sinkOpts := ru.sinkOptions()
	if al != nil {
		sinkOpts = append(sinkOpts, sink.WithAuditGate(al.Gate))
	}
	sk := sink.New(cfg.Sink, cfg.Buckets, st, logger.With("component", "sink"), reg, sinkOpts...)
	stopAudit := startAudit(ctx, cfg, al, logger.With("component", "audit"))
	defer stopAudit() // before the store closes
	ingest := httpingest.New(httpingest.Config{
		MaxBodyBytes: cfg.HTTP.MaxBodyBytes, MaxDecompressedBytes: cfg.HTTP.MaxDecompressedBytes, Limits: cfg.Limits.Decode(),
		Horizon: horizon(cfg.Retention),
	}, sk, time.Now, logger.With("component", "http"), reg)
	read := readapi.New(retention.Hide(st, cfg.Retention, time.Now), time.Now, logger.With("component", "read"), readapi.WithSettle(sk.Settle))
	stopMQTT, err := startMQTT(cfg, sk, logger, reg)
	if err != nil {
		shutdownSink(sk, cfg.HTTP.ShutdownTimeout, logger)
		return err
	}

	tokens := make([]server.Token, len(cfg.Auth.Tokens))
	for i, t := range cfg.Auth.Tokens {
		tokens[i] = server.Token{Token: t.Token, Tenant: t.Tenant}
	}
	var stopping atomic.Bool // readiness: false once shutdown begins
	h := server.Handler(tokens, server.Routes{
		PostReadings: ingest.Readings, PostAudit: ingest.Audit,
		GetReadings: read.Readings, GetAudit: read.Audit, GetPartitions: read.Partitions,
		Metrics: promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}),
		Extra:   extraRoutes(ru.routes(), auditRoutes(al, logger), map[string]http.HandlerFunc{"GET /v1/deadletters": readapi.DeadLetters(st, time.Now, logger.With("component", "read"))}),
		Ready: func() error {
			if stopping.Load() {
				return errors.New("shutting down")
			}
			return nil
		},
	})

	ln, err := net.Listen("tcp", cfg.HTTP.Addr)
	if err != nil {
		stopMQTT(cfg.HTTP.ShutdownTimeout)
		shutdownSink(sk, cfg.HTTP.ShutdownTimeout, logger)
		return fmt.Errorf("listen on %s (http.addr): %w", cfg.HTTP.Addr, err)
	}
	srv := &http.Server{
		Handler:           h,
		ReadTimeout:       cfg.HTTP.ReadTimeout,
		ReadHeaderTimeout: 10 * time.Second,
		WriteTimeout:      cfg.HTTP.WriteTimeout,
		IdleTimeout:       cfg.HTTP.IdleTimeout,
		ErrorLog:          slog.NewLogLogger(logger.Handler(), slog.LevelWarn),
	}
	serveErr := make(chan error, 1)
	go func() { serveErr <- srv.Serve(ln) }()
	logger.Info("gateway ready", "http_addr", ln.Addr().String(), "startup", time.Since(start).Round(time.Millisecond))
	if onListen != nil {
		onListen(ln.Addr().String())
	}

	var runErr error
	select {
	case <-ctx.Done():
		stopping.Store(true)
		logger.Info("shutting down: stop accepting requests, finish those in progress")
	case err := <-serveErr:
		runErr = fmt.Errorf("http server: %w", err)
	}
	sctx, cancel := context.WithTimeout(context.Background(), cfg.HTTP.ShutdownTimeout)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil && !errors.Is(err, http.ErrServerClosed) {
		logger.Error("http shutdown", "err", err)
	}
	logger.Info("http server stopped")
	stopMQTT(cfg.HTTP.ShutdownTimeout)
	shutdownSink(sk, cfg.HTTP.ShutdownTimeout, logger)
	return runErr
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
