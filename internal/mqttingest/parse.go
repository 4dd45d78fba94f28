package mqttingest

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/internal/decode"
	"github.com/sluicehq/sluice/internal/lineproto"
	"github.com/sluicehq/sluice/internal/lograte"
	"github.com/sluicehq/sluice/internal/model"
	"github.com/sluicehq/sluice/internal/sink"
)

// parser turns one MQTT message (topic and payload) into the readings of a
// tenant, or into a dead letter. Both ways in share it: the subscriber
// (Ingester) and the embedded broker's publish hook (Receiver). It does no
// I/O.
type parser struct {
	cfg     Config
	tmpl    *Template
	tenants map[string]bool // nil: any valid tenant
	lim     decode.Limits
	horizon func(model.Kind, string, time.Time) time.Time // nil: no retention horizon
	influx  lineproto.Config                              // line protocol to readings
	logger  *slog.Logger
	m       *metrics
	dlLog   *lograte.Limiter

	idPrefix string
	seq      atomic.Uint64
}

func newParser(cfg Config, lim decode.Limits, logger *slog.Logger, m *metrics) (*parser, error) {
	tmpl, err := ParseTemplate(cfg.TopicTemplate)
	if err != nil {
		return nil, fmt.Errorf("mqtt.topic_template: %w", err)
	}
	var rb [6]byte
	_, _ = rand.Read(rb[:])
	p := &parser{cfg: cfg, tmpl: tmpl, lim: lim, logger: logger, m: m, influx: lineproto.DefaultConfig(),
		dlLog: &lograte.Limiter{Every: time.Second}, idPrefix: hex.EncodeToString(rb[:])}
	if len(cfg.Tenants) > 0 {
		p.tenants = make(map[string]bool, len(cfg.Tenants))
		for _, t := range cfg.Tenants {
			p.tenants[t] = true
		}
	}
	return p, nil
}

// request returns the write of one message: its readings, or its dead
// letter, under its tenant.
func (p *parser) request(topic string, payload []byte, recv, now time.Time) *sink.Request {
	tenant, rs, dl := p.decode(topic, payload, recv, now)
	r := &sink.Request{Tenant: tenant, Readings: rs}
	if dl != nil {
		r.DeadLetters = []model.DeadLetter{*dl}
	}
	return r
}

// decode turns one message into readings of a tenant, or a dead letter.
// recv is when the message arrived (the dead letter's time); now is the
// clock for the future-timestamp limit and the retention horizon.
func (p *parser) decode(topic string, payload []byte, recv, now time.Time) (string, []model.Reading, *model.DeadLetter) {
	if len(payload) > p.cfg.MaxPayloadBytes {
		return p.cfg.Tenant, nil, p.deadLetter(topic, payload, recv, p.cfg.Tenant, "too_large",
			fmt.Errorf("payload of %d bytes is over mqtt.max_payload_bytes (%d)", len(payload), p.cfg.MaxPayloadBytes))
	}
	tenant, device, err := p.tmpl.Match(topic)
	if err != nil {
		return p.cfg.Tenant, nil, p.deadLetter(topic, payload, recv, p.cfg.Tenant, "bad_topic", err)
	}
	if !p.tmpl.HasTenant() {
		tenant = p.cfg.Tenant
	} else if !model.ValidTenant(tenant) || (p.tenants != nil && !p.tenants[tenant]) {
		return p.cfg.Tenant, nil, p.deadLetter(topic, payload, recv, p.cfg.Tenant, "unknown_tenant",
			fmt.Errorf("topic %q: tenant %q is not allowed (mqtt.tenants, or "+model.TenantRule+")", topic, tenant))
	}
	lim := p.lim
	if p.horizon != nil {
		lim.Oldest = p.horizon(model.KindReadings, tenant, now)
	}
	var rs []model.Reading
	if p.lineProtocol(topic, payload) {
		rs, _, err = lineproto.Readings(payload, now, p.influx, lim, lineproto.Options{Device: device})
		p.m.lineProtocol.Inc()
	} else {
		rs, err = decode.Readings(payload, decode.FormatJSON, now, lim, decode.Options{Device: device})
	}
	if err != nil {
		return tenant, nil, p.deadLetter(topic, payload, recv, tenant, deadLetterReason(err, payload), err)
	}
	p.m.readings.Add(float64(len(rs)))
	return tenant, rs, nil
}

// lineProtocol reports whether the payload of a message on topic is read
// as line protocol (Config.PayloadFormat).
func (p *parser) lineProtocol(topic string, payload []byte) bool {
	switch p.cfg.PayloadFormat(topic) {
	case FormatInflux:
		return true
	case FormatAuto:
		i := 0
		for i < len(payload) && (payload[i] == ' ' || payload[i] == '\t' || payload[i] == '\n' || payload[i] == '\r') {
			i++
		}
		return i == len(payload) || (payload[i] != '{' && payload[i] != '[')
	}
	return false
}

func (p *parser) deadLetter(topic string, payload []byte, recv time.Time, tenant, reason string, err error) *model.DeadLetter {
	keep := min(len(payload), p.cfg.DeadLetterPayloadBytes)
	dl := &model.DeadLetter{
		Tenant: tenant, TS: recv.UnixMilli(), ID: fmt.Sprintf("%s-%d", p.idPrefix, p.seq.Add(1)),
		Source: "mqtt", Topic: topic, Reason: reason, Error: err.Error(),
		Payload: append([]byte(nil), payload[:keep]...), Truncated: keep < len(payload),
	}
	p.m.deadLetters.WithLabelValues(reason).Inc()
	if ok, dropped := p.dlLog.Allow(recv); ok {
		p.logger.Warn("mqtt message kept as a dead letter", "tenant", tenant, "topic", topic, "reason", reason, "err", err,
			"similar_messages_not_logged", dropped)
	}
	return dl
}

// deadLetterReason names why a payload could not be decoded.
func deadLetterReason(err error, payload []byte) string {
	var fe *decode.FieldError
	var tm *decode.TooManyRowsError
	var le *lineproto.LineError
	switch {
	case errors.As(err, &tm):
		return "too_many_rows"
	case errors.As(err, &le):
		switch {
		case le.Syntax:
			return "invalid_line_protocol"
		case le.DeviceMismatch:
			return "device_mismatch"
		case le.Field == "device":
			return "bad_topic"
		}
		return "invalid_field"
	case errors.As(err, &fe):
		switch {
		case strings.HasPrefix(fe.Reason, "malformed JSON"):
			return "invalid_json"
		case fe.Field == "device_id" && strings.Contains(fe.Reason, "from the topic"):
			if strings.Contains(fe.Reason, "does not match") {
				return "device_mismatch"
			}
			return "bad_topic"
		}
		return "invalid_field"
	}
	return "invalid_payload"
}
