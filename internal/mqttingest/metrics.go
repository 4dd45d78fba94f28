package mqttingest

import "github.com/prometheus/client_golang/prometheus"

// metrics are shared by both ways in; the connection gauges and counters
// and the write retries belong to the subscriber, the refusals to the
// embedded broker's publish hook.
type metrics struct {
	messages prometheus.Counter
	readings prometheus.Counter
	// lineProtocol counts the messages read as line protocol.
	lineProtocol prometheus.Counter
	deadLetters  *prometheus.CounterVec
	retries      *prometheus.CounterVec
	refused      *prometheus.CounterVec
	inflight     prometheus.Gauge
	connected    prometheus.Gauge
	connects     prometheus.Counter
	connLost     prometheus.Counter
	ackSeconds   prometheus.Histogram
}

// newMetrics registers the metrics of the subscriber (subscriber true) or
// of the embedded broker's publish hook on reg, which may be nil.
func newMetrics(reg prometheus.Registerer, subscriber bool) *metrics {
	m := &metrics{
		messages: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sluice_mqtt_messages_stored_total", Help: "MQTT messages made durable (as rows or as dead letters) and acknowledged.",
		}),
		readings: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sluice_mqtt_readings_decoded_total", Help: "Readings decoded from MQTT messages.",
		}),
		lineProtocol: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sluice_mqtt_lineprotocol_messages_total", Help: "MQTT messages read as line protocol (mqtt.topics[].payload_format influx or auto), stored or kept as dead letters.",
		}),
		deadLetters: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_mqtt_dead_letters_total", Help: "MQTT messages kept as dead letters, by reason.",
		}, []string{"reason"}),
		retries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_mqtt_write_retries_total", Help: "Writes retried because the sink was busy or failed.",
		}, []string{"reason"}),
		refused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_mqtt_messages_refused_total",
			Help: "Messages published to the embedded broker that were not stored, and so not acknowledged, by reason (busy, error, shutdown).",
		}, []string{"reason"}),
		inflight: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "sluice_mqtt_inflight_messages", Help: "MQTT messages received and not yet acknowledged.",
		}),
		connected: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "sluice_mqtt_connected", Help: "1 while connected to the broker.",
		}),
		connects: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sluice_mqtt_connects_total", Help: "Successful connections to the broker.",
		}),
		connLost: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sluice_mqtt_connections_lost_total", Help: "Connections to the broker lost.",
		}),
		ackSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "sluice_mqtt_ack_seconds", Help: "Time from receiving a message to acknowledging it.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 14),
		}),
	}
	if reg == nil {
		return m
	}
	reg.MustRegister(m.messages, m.readings, m.lineProtocol, m.deadLetters, m.inflight, m.ackSeconds)
	if subscriber {
		reg.MustRegister(m.retries, m.connected, m.connects, m.connLost)
	} else {
		reg.MustRegister(m.refused)
	}
	return m
}
