package mqttingest

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	mqtt "github.com/eclipse/paho.mqtt.golang"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/sluicehq/sluice/internal/broker"
	"github.com/sluicehq/sluice/internal/buckets"
	"github.com/sluicehq/sluice/internal/sink"
)

// failingWriter answers every write with err (a sink that is busy or
// whose store fails), storing nothing.
type failingWriter struct{ err error }

func (f failingWriter) Write(context.Context, *sink.Request) error { return f.err }

// oneShotPublisher is a device that neither reconnects nor keeps a session:
// a publish the broker does not acknowledge ends with an error when the
// connection closes.
func oneShotPublisher(t *testing.T, addr, id string) mqtt.Client {
	t.Helper()
	o := mqtt.NewClientOptions().AddBroker("tcp://" + addr).SetClientID(id).SetCleanSession(true).SetAutoReconnect(false)
	c := mqtt.NewClient(o)
	if tok := c.Connect(); !tok.WaitTimeout(30*time.Second) || tok.Error() != nil {
		t.Fatalf("connect publisher: %v", tok.Error())
	}
	t.Cleanup(func() { c.Disconnect(0) })
	return c
}

// The embedded broker's publish hook, through a Receiver and the real
// sink and store: a message is acknowledged exactly when its rows or its
// dead letter are durable.
func TestReceiver(t *testing.T) {
	good := func(ts int64) string { return fmt.Sprintf(`{"ts":%d,"metrics":{"v":1,"w":2}}`, ts) }
	tests := []struct {
		name    string
		payload func(ts int64) string
		// writer wraps the real sink; shutdown closes the broker while the
		// write waits.
		writer          func(w Writer) Writer
		shutdown        bool
		wantAck         bool
		wantRows        int
		wantDeadLetter  string // reason
		wantRefused     string // refusal reason counted
		wantStoredCount float64
	}{
		{name: "good message", payload: good, writer: func(w Writer) Writer { return w },
			wantAck: true, wantRows: 2, wantStoredCount: 1},
		{name: "poison message", payload: func(int64) string { return `{"ts":1,"metrics":` }, writer: func(w Writer) Writer { return w },
			wantAck: true, wantDeadLetter: "invalid_json", wantStoredCount: 1},
		{name: "sink busy", payload: good,
			writer:  func(Writer) Writer { return failingWriter{&sink.BusyError{RetryAfter: time.Second, Reason: "full"}} },
			wantAck: false, wantRefused: "busy"},
		{name: "store error", payload: good,
			writer:  func(Writer) Writer { return failingWriter{errors.New("disk on fire")} },
			wantAck: false, wantRefused: "error"},
		{name: "shutdown while writing", payload: good, shutdown: true,
			writer:  func(w Writer) Writer { return &hangingWriter{w: w, stalled: make(chan struct{})} },
			wantAck: false, wantRefused: "shutdown"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			prefix := "sluicetest/" + uniq(t)
			stk := newStack(t, buckets.DefaultConfig())
			w := tt.writer(stk.sk)
			b, rc := startEmbedded(t, prefix, testConfig("", prefix), broker.Config{Enabled: true, Listen: "127.0.0.1:0", AllowAnonymous: true}, w)
			pub := oneShotPublisher(t, b.Addr(), prefix+"-dev")
			ts := baseTS()
			tok := pub.Publish(prefix+"/dev-1/readings", 1, false, tt.payload(ts))
			if tt.shutdown {
				<-w.(*hangingWriter).stalled
				closed := make(chan error, 1)
				go func() { closed <- b.Close() }()
				select {
				case err := <-closed:
					if err != nil {
						t.Fatal(err)
					}
				case <-time.After(30 * time.Second):
					t.Fatal("the broker's Close hangs while a message is being stored")
				}
			}
			// Without an acknowledgement the token ends when the broker
			// drops the connection; the bound only stops a hang.
			if !tok.WaitTimeout(30 * time.Second) {
				t.Fatal("the publish neither acknowledged nor failed within 30s")
			}
			if acked := tok.Error() == nil; acked != tt.wantAck {
				t.Fatalf("acknowledged = %v (err %v), want %v", acked, tok.Error(), tt.wantAck)
			}
			if !tt.wantAck && pub.IsConnectionOpen() {
				t.Error("the broker kept the connection of a device it did not acknowledge")
			}
			// Acknowledged means durable: read at once, no polling.
			if got := len(readAll(t, stk.st, "acme", []string{"dev-1"}, ts, ts+1)); got != tt.wantRows {
				t.Errorf("%d rows stored, want %d", got, tt.wantRows)
			}
			var reasons []string
			for _, d := range deadLetters(t, stk.st, "acme") {
				reasons = append(reasons, d.Reason)
				if d.Source != "mqtt" || d.Topic != prefix+"/dev-1/readings" {
					t.Errorf("dead letter lacks its source or topic: %+v", d)
				}
			}
			if want := tt.wantDeadLetter; (want == "" && len(reasons) > 0) || (want != "" && strings.Join(reasons, ",") != want) {
				t.Errorf("dead letters %v, want %q", reasons, want)
			}
			if got := testutil.ToFloat64(rc.m.messages); got != tt.wantStoredCount {
				t.Errorf("sluice_mqtt_messages_stored_total = %v, want %v", got, tt.wantStoredCount)
			}
			if tt.wantRefused != "" {
				if got := testutil.ToFloat64(rc.m.refused.WithLabelValues(tt.wantRefused)); got != 1 {
					t.Errorf("sluice_mqtt_messages_refused_total{reason=%q} = %v, want 1", tt.wantRefused, got)
				}
			}
			if got := testutil.ToFloat64(rc.m.inflight); got != 0 {
				t.Errorf("sluice_mqtt_inflight_messages = %v after the message was answered, want 0", got)
			}
		})
	}
}
