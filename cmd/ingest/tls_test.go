package main

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// Handshake failures, which any client can cause, are counted and do not
// flood the log; the server's other errors are all logged.
func TestHTTPErrorLogLimitsHandshakeErrors(t *testing.T) {
	var out bytes.Buffer
	reg := prometheus.NewRegistry()
	l := httpErrorLog(slog.New(slog.NewTextHandler(&out, nil)), reg)
	for range 1000 {
		l.Printf("http: TLS handshake error from 127.0.0.1:1234: remote error: tls: bad certificate")
	}
	l.Printf("http: Accept error: too many open files")
	logged := out.String()
	if n := strings.Count(logged, "TLS handshake error"); n < 1 || n > 10 {
		t.Errorf("%d handshake errors logged of 1000, want a few at most:\n%s", n, logged)
	}
	if !strings.Contains(logged, "Accept error: too many open files") {
		t.Errorf("another server error was not logged:\n%s", logged)
	}
	if got, err := testutil.GatherAndCount(reg, "sluice_http_tls_handshake_errors_total"); err != nil || got != 1 {
		t.Fatalf("metric: %d series, %v", got, err)
	}
	mfs, _ := reg.Gather()
	if v := mfs[0].GetMetric()[0].GetCounter().GetValue(); v != 1000 {
		t.Errorf("sluice_http_tls_handshake_errors_total = %v, want 1000", v)
	}
}
