package mqttingest

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice/internal/broker"
	"github.com/sluicehq/sluice/internal/decode"
	"github.com/sluicehq/sluice/internal/lineproto"
	"github.com/sluicehq/sluice/internal/lograte"
	"github.com/sluicehq/sluice/internal/model"
	"github.com/sluicehq/sluice/internal/quota"
	"github.com/sluicehq/sluice/internal/sink"
)

// Receiver stores the messages devices publish to the embedded broker
// (package broker), one at a time, on the publishing connection's goroutine
// and before the broker acknowledges them: Receive returns nil only once the
// message's rows, or its dead letter, are durable, and the broker sends the
// PUBACK only then. A tenant over its quotas (SetLimiter) is slowed:
// Receive waits for them on the publishing connection, which holds back
// that device alone. A message Receive could not store (sink busy past its
// admission wait, store error, shutdown) is not acknowledged; the device
// sends it again, and idempotent keys make the second copy harmless.
//
// It decodes exactly as the subscriber (Ingester) does: same topic
// template, tenants, limits, retention horizon and dead letters. The
// subscriber's settings (brokers, client id, topics, shared group,
// max_inflight, timeouts) do not apply.
type Receiver struct{ core }

// core is what the subscriber (Ingester) and the Receiver share: the parser
// that turns a message into a sink request, the writer it goes to, the
// clock, logging and metrics.
type core struct {
	p      *parser
	w      Writer
	quota  Limiter // nil: no quotas
	now    func() time.Time
	logger *slog.Logger
	m      *metrics
	errLog *lograte.Limiter
}

// Limiter holds back a tenant over its quotas: Wait returns once the
// tenant may store rows rows from bytes payload bytes, or with ctx's error.
type Limiter interface {
	Wait(ctx context.Context, tenant string, rows, bytes int64) error
}

// SetLimiter makes every write wait for its tenant's quotas first: a
// tenant over quota is slowed, its messages held (and not acknowledged)
// until it is within them, never dropped. Call it before the first
// message.
func (c *core) SetLimiter(l Limiter) {
	c.quota = l
}

func newCore(cfg Config, w Writer, lim decode.Limits, now func() time.Time, logger *slog.Logger, reg prometheus.Registerer, subscriber bool) (core, error) {
	m := newMetrics(reg, subscriber)
	p, err := newParser(cfg, lim, logger, m)
	if err != nil {
		return core{}, err
	}
	return core{p: p, w: w, now: now, logger: logger, m: m, errLog: &lograte.Limiter{Every: time.Second}}, nil
}

// refusal says why the sink refused a write: "shutdown" (ctx ended or the
// sink closed), "busy" (with the sink's answer) or "error".
func refusal(ctx context.Context, err error) (string, *sink.BusyError) {
	var busy *sink.BusyError
	switch {
	case ctx.Err() != nil || errors.Is(err, sink.ErrClosed):
		return "shutdown", nil
	case errors.As(err, &busy):
		return "busy", busy
	}
	return "error", nil
}

// waitQuota waits until req's tenant may store it (ctx ends the wait).
func (c *core) waitQuota(ctx context.Context, req *sink.Request, bytes int) error {
	if c.quota == nil {
		return nil
	}
	return c.quota.Wait(ctx, req.Tenant, quota.Rows(req), int64(bytes))
}

// SetLineProtocol sets how line-protocol payloads (Topic.PayloadFormat
// influx or auto) map to readings; lineproto.DefaultConfig() until then.
// Call it before the first message.
func (c *core) SetLineProtocol(cfg lineproto.Config) {
	c.p.influx = cfg
}

// SetHorizon makes readings older than h(kind, tenant, now) (the tenant's
// retention horizon) dead letters with reason invalid_field: stored, they
// would be dropped at once. Call it before the first message (before
// Ingester.Start, before the first Receive).
func (c *core) SetHorizon(h func(kind model.Kind, tenant string, now time.Time) time.Time) {
	c.p.horizon = h
}

// BrokerOptions returns the embedded broker's options that make it store
// through r (dir is its state directory): an account publishes on the topic
// the topic template renders for it, anonymous clients on any topic the
// template matches, and every publish goes to Receive.
func (r *Receiver) BrokerOptions(dir string) broker.Options {
	tmpl := r.p.tmpl
	return broker.Options{
		Dir:     dir,
		TopicOf: func(u broker.User) string { return tmpl.Render(u.Tenant, u.DeviceID) },
		Anonymous: func(topic string) bool {
			_, _, err := tmpl.Match(topic)
			return err == nil
		},
		Receive: r.Receive,
	}
}

// NewReceiver returns a receiver; cfg must be valid. now is the clock for
// receive times and the future-timestamp limit.
func NewReceiver(cfg Config, w Writer, lim decode.Limits, now func() time.Time, logger *slog.Logger, reg prometheus.Registerer) (*Receiver, error) {
	c, err := newCore(cfg, w, lim, now, logger, reg, false)
	if err != nil {
		return nil, err
	}
	return &Receiver{c}, nil
}

// Receive stores one message: its readings, or its dead letter when it
// cannot become readings. It returns nil only once that is durable; an
// error means the message may not be acknowledged. It returns early when
// ctx ends. It is safe for concurrent use.
func (r *Receiver) Receive(ctx context.Context, topic string, payload []byte) error {
	recv := r.now()
	r.m.inflight.Inc()
	defer r.m.inflight.Dec()
	req := r.p.request(topic, payload, recv, recv)
	err := r.waitQuota(ctx, req, len(payload))
	if err == nil {
		err = r.w.Write(ctx, req)
	}
	if err != nil {
		reason, _ := refusal(ctx, err)
		r.m.refused.WithLabelValues(reason).Inc()
		if reason == "error" {
			if ok, dropped := r.errLog.Allow(recv); ok {
				r.logger.Error("store mqtt message; not acknowledged, the device will send it again", "tenant", req.Tenant, "topic", topic,
					"err", err, "similar_errors_not_logged", dropped)
			}
		}
		return fmt.Errorf("store mqtt message of tenant %q: %w", req.Tenant, err)
	}
	r.m.messages.Inc()
	r.m.ackSeconds.Observe(r.now().Sub(recv).Seconds())
	return nil
}
