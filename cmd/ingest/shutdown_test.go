package main

import (
	"log/slog"
	"net"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice/internal/buckets"
	"github.com/sluicehq/sluice/internal/sink"
	"github.com/sluicehq/sluice/internal/store/pebblestore"
)

// A request that runs until its context ends (as a rollup rebuild does,
// up to rollups.rebuild_timeout) is cancelled when http.shutdown_timeout
// ends, and has returned when shutdown does; the steps after the HTTP one
// get what is left of the one deadline, not a timeout of their own.
func TestShutdownOneDeadline(t *testing.T) {
	st, err := pebblestore.Open(t.TempDir(), pebblestore.Options{}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	sk := sink.New(sink.DefaultConfig(), buckets.DefaultConfig(), st, slog.New(slog.DiscardHandler), prometheus.NewRegistry())

	started := make(chan struct{})
	var returned atomic.Bool
	long := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		close(started)
		select {
		case <-r.Context().Done():
		case <-time.After(time.Minute):
		}
		returned.Store(true)
	})
	rq := newRequests()
	defer rq.cancel()
	srv := &http.Server{Handler: rq.wrap(long), BaseContext: rq.base}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(ln) }()
	go func() {
		resp, err := http.Post("http://"+ln.Addr().String()+"/v1/rollups/rebuild", "text/plain", nil)
		if err == nil {
			resp.Body.Close()
		}
	}()
	<-started

	const timeout = 300 * time.Millisecond
	var mqttGot time.Duration
	stopMQTT := func(d time.Duration) { mqttGot = d }
	begin := time.Now()
	shutdown(srv, rq, stopMQTT, sk, timeout, slog.New(slog.DiscardHandler))
	took := time.Since(begin)
	if !returned.Load() {
		t.Error("the long request was still running when shutdown returned")
	}
	if mqttGot > 50*time.Millisecond {
		t.Errorf("mqtt stop given %s after the http step used all of http.shutdown_timeout (%s), want what was left (about 0)", mqttGot, timeout)
	}
	if took > timeout+handlerGrace+sinkDrainFloor+2*time.Second {
		t.Errorf("shutdown took %s, want at most about %s", took, timeout+handlerGrace+sinkDrainFloor)
	}
}
