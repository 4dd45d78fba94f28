package e2e

import (
	"bytes"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"math/big"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	mqtt "github.com/eclipse/paho.mqtt.golang"

	"github.com/sluicehq/sluice/internal/client"
	"github.com/sluicehq/sluice/internal/testenv"
	"github.com/sluicehq/sluice/internal/tlsconf/tlstest"
)

// TestTLS runs the gateway with HTTPS and the embedded broker's TLS listener
// only, both requiring a client certificate of the test CA and both serving
// the same certificate files: a reading posted over HTTPS and one published
// over MQTT with TLS are stored; a client without a certificate and a plain
// client get nothing; replacing the files changes the certificate served
// without a restart.
func TestTLS(t *testing.T) {
	dir := t.TempDir()
	ca := tlstest.NewCA(t, "sluice e2e CA")
	first := ca.Server(t, "gateway-1")
	certFile, keyFile := first.Write(t, dir, "gateway")
	caFile := ca.WriteCA(t, dir, "ca.pem")
	brokerAddr := testenv.FreeAddr(t)
	cfg := fmt.Sprintf(`http:
  tls:
    cert_file: %[1]q
    key_file: %[2]q
    client_auth: require
    client_ca_file: %[3]q
    reload_interval: 1s
mqtt:
  tenant: acme
  embedded:
    enabled: true
    listen: ""
    tls_listen: %[4]q
    tls:
      cert_file: %[1]q
      key_file: %[2]q
      client_auth: require
      client_ca_file: %[3]q
      reload_interval: 1s
    users:
      - username: %[5]s
        password: %[6]s
        device_id: %[5]s
`, certFile, keyFile, caFile, brokerAddr, mqttDevice, mqttPassword)
	file := filepath.Join(dir, "ingest.yaml")
	if err := os.WriteFile(file, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	g := startGateway(t, t.TempDir(), "SLUICE_CONFIG="+file)
	g.waitLog("embedded mqtt broker listening")
	if !strings.Contains(g.logs(), "tls=true") {
		t.Fatalf("the gateway does not say it serves TLS:\n%s", g.logs())
	}
	addr := strings.TrimPrefix(g.url, "http://")
	g.url = "https://" + addr

	clientCert := ca.Client(t, "e2e-client").TLS(t)
	withCert := httpsClient(&tls.Config{RootCAs: ca.Pool(), Certificates: []tls.Certificate{clientCert}})
	base := day(1).Add(8 * time.Hour)
	status, body := postWith(t, withCert, g.url+"/v1/readings", reading("https-dev", base, 1))
	if status != http.StatusAccepted {
		t.Fatalf("POST over https: %d %s", status, body)
	}

	// No client certificate: the handshake is refused, no request is read.
	if resp, err := httpsClient(&tls.Config{RootCAs: ca.Pool()}).Get(g.url + "/healthz"); err == nil {
		resp.Body.Close()
		t.Fatalf("https without a client certificate answered %d", resp.StatusCode)
	}
	// Plain HTTP on the TLS port: refused with 400, nothing stored.
	status, _ = postWith(t, http.DefaultClient, "http://"+addr+"/v1/readings", reading("https-dev", base.Add(time.Second), 2))
	if status != http.StatusBadRequest {
		t.Errorf("plain http on the https port: %d, want 400", status)
	}

	// MQTT over TLS with paho, as the device account with a client certificate.
	o := mqtt.NewClientOptions().AddBroker("ssl://" + brokerAddr).SetClientID("e2e-tls-" + mqttDevice).
		SetUsername(mqttDevice).SetPassword(mqttPassword).SetCleanSession(true).SetAutoReconnect(false).
		SetConnectTimeout(5 * time.Second).SetWriteTimeout(5 * time.Second).
		SetTLSConfig(&tls.Config{RootCAs: ca.Pool(), Certificates: []tls.Certificate{clientCert}, ServerName: "127.0.0.1"})
	dev := mqtt.NewClient(o)
	if tok := dev.Connect(); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
		t.Fatalf("device connect over TLS to %s: %v", brokerAddr, tok.Error())
	}
	defer dev.Disconnect(0)
	if !publishAcked(dev, reading(mqttDevice, base, 7)) {
		t.Fatal("reading published over TLS not acknowledged")
	}
	// Without a client certificate the broker accepts no session.
	o2 := mqtt.NewClientOptions().AddBroker("ssl://" + brokerAddr).SetClientID("e2e-tls-nocert").
		SetUsername(mqttDevice).SetPassword(mqttPassword).SetAutoReconnect(false).SetConnectTimeout(5 * time.Second).
		SetTLSConfig(&tls.Config{RootCAs: ca.Pool(), ServerName: "127.0.0.1"})
	nocert := mqtt.NewClient(o2)
	if tok := nocert.Connect(); tok.WaitTimeout(10*time.Second) && tok.Error() == nil {
		nocert.Disconnect(0)
		t.Fatal("a device without a client certificate connected")
	}

	// Both readings are stored (acknowledged means durable: no waiting).
	c, err := client.NewClient(g.url, token, withCert)
	if err != nil {
		t.Fatal(err)
	}
	for device, seq := range map[string]int64{"https-dev": 1, mqttDevice: 7} {
		page, err := c.Readings(context.Background(), client.ReadingsQuery{Device: device, Range: client.Range{From: day(1), To: day(-1), Limit: 10}})
		if err != nil {
			t.Fatal(err)
		}
		if len(page.Readings) != 1 || page.Readings[0].Seq != seq || page.Readings[0].TS != base.UnixMilli() {
			t.Fatalf("readings of %s: %+v, want one with seq %d", device, page.Readings, seq)
		}
	}

	// Replace the certificate files: new connections get the new
	// certificate on both listeners (looked at every second; the 30s bound
	// only stops a broken test).
	second := ca.Server(t, "gateway-2")
	replaceFile(t, keyFile+".new", keyFile, second.KeyPEM)
	replaceFile(t, certFile+".new", certFile, second.CertPEM)
	for name, addr := range map[string]string{"https": addr, "mqtts": brokerAddr} {
		deadline := time.Now().Add(30 * time.Second)
		for {
			got := servedSerial(t, addr, &tls.Config{RootCAs: ca.Pool(), Certificates: []tls.Certificate{clientCert}, ServerName: "127.0.0.1"})
			if got.Cmp(second.Serial) == 0 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s still serves certificate %v 30s after the files were replaced with %v\n%s", name, got, second.Serial, g.logs())
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
	if !strings.Contains(g.logs(), "tls certificate reloaded") {
		t.Errorf("no log line for the reload:\n%s", g.logs())
	}
	// The same files serve both listeners: one reloader, one load counted.
	if got := metricWith(t, withCert, g.url, `sluice_tls_certificate_loads_total{cert_file="`+certFile+`",result="ok"}`); got != 2 {
		t.Errorf("certificate loads = %v, want 2 (start and one reload)", got)
	}
	// The device, still connected, publishes on.
	if !publishAcked(dev, reading(mqttDevice, base.Add(time.Second), 8)) {
		t.Fatal("reading published after the reload not acknowledged")
	}
	dev.Disconnect(250)
	g.stop()
}

func httpsClient(tc *tls.Config) *http.Client {
	// ForceAttemptHTTP2: the client offers HTTP/2; the gateway answers in HTTP/1.1.
	return &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{TLSClientConfig: tc, ForceAttemptHTTP2: true}}
}

func postWith(t *testing.T, hc *http.Client, url, ndjson string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(ndjson+"\n"))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/x-ndjson")
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatalf("POST %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if strings.HasPrefix(url, "https:") && resp.Proto != "HTTP/1.1" {
		t.Errorf("POST %s answered in %s, want HTTP/1.1", url, resp.Proto)
	}
	return resp.StatusCode, string(b)
}

// replaceFile writes data to tmp and renames it over file, as a
// certificate manager would.
func replaceFile(t *testing.T, tmp, file string, data []byte) {
	t.Helper()
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, file); err != nil {
		t.Fatal(err)
	}
}

// servedSerial returns the serial of the certificate a TLS server on addr
// presents.
func servedSerial(t *testing.T, addr string, tc *tls.Config) *big.Int {
	t.Helper()
	conn, err := tls.Dial("tcp", addr, tc)
	if err != nil {
		t.Fatalf("tls dial %s: %v", addr, err)
	}
	defer conn.Close()
	return conn.ConnectionState().PeerCertificates[0].SerialNumber
}

// metricWith returns the value of one exposed series of /metrics.
func metricWith(t *testing.T, hc *http.Client, url, series string) float64 {
	t.Helper()
	resp, err := hc.Get(url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	for line := range bytes.Lines(b) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(string(line)), series+" "); ok {
			var f float64
			if _, err := fmt.Sscan(v, &f); err != nil {
				t.Fatal(err)
			}
			return f
		}
	}
	t.Fatalf("metric %s not exposed", series)
	return 0
}
