package main

import (
	"context"
	"fmt"
	"log/slog"
	"path/filepath"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice/internal/broker"
	"github.com/sluicehq/sluice/internal/config"
	"github.com/sluicehq/sluice/internal/mqttingest"
	"github.com/sluicehq/sluice/internal/sink"
)

// mqttBuckets adjusts the bucket planner for shared subscriptions: when
// several gateways may receive messages of the same device, each must fill
// partitions of its own (see buckets.Config.PerWriterSingle). It warns when the
// writer slot was left at its default.
func mqttBuckets(cfg *config.Config, logger *slog.Logger) {
	if !cfg.MQTT.Enabled || cfg.MQTT.Embedded.Enabled || cfg.MQTT.SharedGroup == "" {
		return // no shared subscription: the embedded broker does not subscribe
	}
	cfg.Buckets.PerWriterSingle = true
	if cfg.Buckets.Writer == 0 {
		logger.Warn("mqtt.shared_group is set and buckets.writer_id is 0: give every gateway of the group its own buckets.writer_id (1-255), or two gateways writing one store will share partitions",
			"shared_group", cfg.MQTT.SharedGroup)
	}
}

// startMQTT starts the embedded broker, or the MQTT subscription, when
// configured. ready reports, for /readyz, whether the subscription is
// connected to its broker (the embedded broker: whether it runs); nil when
// MQTT is off. The returned stop function stops it; call it before the sink
// drains, since both write through the sink: the subscription's last writes,
// and the broker's publish hook (which must not be left waiting on a closed
// sink, and whose listener must be closed before the sink is).
func startMQTT(cfg config.Config, sk *sink.Sink, certs *certSources, q mqttingest.Limiter, logger *slog.Logger, reg prometheus.Registerer) (stop func(timeout time.Duration), ready func() error, err error) {
	mc := cfg.MQTT
	if !mc.Active() {
		return func(time.Duration) {}, nil, nil
	}
	if mc.Embedded.Enabled {
		return startEmbeddedBroker(cfg, sk, certs, q, logger, reg)
	}
	in, err := mqttingest.New(mc, sk, cfg.Limits.Decode(), time.Now, logger.With("component", "mqtt"), reg)
	if err == nil {
		in.SetHorizon(horizon(cfg.Retention))
		in.SetLineProtocol(cfg.Influx)
		in.SetLimiter(q)
		err = in.Start()
	}
	if err != nil {
		return nil, nil, err
	}
	ready = func() error {
		if !in.Connected() {
			return fmt.Errorf("not connected to the broker (mqtt.brokers %v)", mc.Brokers)
		}
		return nil
	}
	return func(timeout time.Duration) {
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		if err := in.Stop(ctx); err != nil {
			logger.Error("stop mqtt subscription", "err", err)
		} else {
			logger.Info("mqtt subscription stopped")
		}
	}, ready, nil
}

// startEmbeddedBroker runs the embedded broker, which stores each message a
// device publishes (through an mqttingest.Receiver and the sink) before it
// acknowledges it. Its stop function closes the listener and every
// connection; the messages being stored then are not acknowledged, and the
// devices send them again.
func startEmbeddedBroker(cfg config.Config, sk *sink.Sink, certs *certSources, q mqttingest.Limiter, logger *slog.Logger, reg prometheus.Registerer) (func(time.Duration), func() error, error) {
	mc := cfg.MQTT
	tc, err := certs.serverConfig(mc.Embedded.TLS)
	if err != nil {
		return nil, nil, fmt.Errorf("mqtt.embedded.tls: %w", err)
	}
	rc, err := mqttingest.NewReceiver(mc, sk, cfg.Limits.Decode(), time.Now, logger.With("component", "mqtt"), reg)
	if err != nil {
		return nil, nil, err
	}
	rc.SetHorizon(horizon(cfg.Retention))
	rc.SetLineProtocol(cfg.Influx)
	rc.SetLimiter(q)
	opts := rc.BrokerOptions(filepath.Join(cfg.DataDir, "broker"))
	opts.TLS = tc
	b, err := broker.Start(mc.Embedded, opts, logger.With("component", "mqtt-broker"))
	if err != nil {
		return nil, nil, err
	}
	if mc.Embedded.AllowAnonymous {
		logger.Warn("THE EMBEDDED MQTT BROKER ACCEPTS ANONYMOUS CLIENTS: anyone who reaches it can publish readings for any device; set mqtt.embedded.users and allow_anonymous: false before exposing it",
			"listen", b.Addr())
	}
	logger.Info("embedded mqtt broker listening", "addr", b.Addr(), "tls_addr", b.TLSAddr(), "accounts", len(mc.Embedded.Users))
	// No readiness check: the broker runs until this stop function, which
	// runs after /readyz already answers 503 for the shutdown.
	return func(time.Duration) {
		if err := b.Close(); err != nil {
			logger.Error("close embedded mqtt broker", "err", err)
		} else {
			logger.Info("embedded mqtt broker stopped")
		}
	}, nil, nil
}
