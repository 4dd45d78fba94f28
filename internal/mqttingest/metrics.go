package mqttingest

import "github.com/prometheus/client_golang/prometheus"

type metrics struct {
	messages    prometheus.Counter
	readings    prometheus.Counter
	deadLetters *prometheus.CounterVec
	retries     *prometheus.CounterVec
	inflight    prometheus.Gauge
	connected   prometheus.Gauge
	connects    prometheus.Counter
	connLost    prometheus.Counter
	ackSeconds  prometheus.Histogram
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		messages: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sluice_mqtt_messages_stored_total", Help: "MQTT messages made durable (as rows or as dead letters) and acknowledged.",
		}),
		readings: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sluice_mqtt_readings_decoded_total", Help: "Readings decoded from MQTT messages.",
		}),
		deadLetters: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_mqtt_dead_letters_total", Help: "MQTT messages kept as dead letters, by reason.",
		}, []string{"reason"}),
		retries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_mqtt_write_retries_total", Help: "Writes retried because the sink was busy or failed.",
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
	if reg != nil {
		reg.MustRegister(m.messages, m.readings, m.deadLetters, m.retries, m.inflight, m.connected, m.connects, m.connLost, m.ackSeconds)
	}
	return m
}
