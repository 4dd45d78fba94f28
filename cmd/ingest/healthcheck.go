package main

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/sluicehq/sluice/internal/config"
)

const healthcheckUsage = `Usage: ingest healthcheck [--live] [--timeout D] [--config FILE] [--KEY VALUE ...]

Asks the gateway that this configuration describes (http.addr, http.tls)
whether it is ready: GET /readyz on its own listener, from the same host.
Exit status 0 when it answers 200, 1 otherwise, with the answer or the error
on stderr. --live asks /healthz instead (the process serves HTTP, whatever
its dependencies). It is the container healthcheck of an image that has no
shell and no curl.

An unspecified listen address (0.0.0.0, [::], or no host) is asked on
loopback. With TLS the certificate is not verified (the probe sends nothing
but the request line); a listener that requires client certificates
(http.tls.client_auth: require) refuses the probe.
`

// healthcheckCmd runs `ingest healthcheck`.
func healthcheckCmd(ctx context.Context, args, env []string, stdout, stderr io.Writer) error {
	fs, cfgFile := commandFlags("ingest healthcheck", healthcheckUsage, env, stderr)
	live := fs.Bool("live", false, "ask /healthz (liveness) instead of /readyz (readiness)")
	timeout := fs.Duration("timeout", 5*time.Second, "give up after this long")
	cfg, _, help, err := parseConfig(fs, args, env, cfgFile)
	if help || err != nil {
		return err
	}
	path := "/readyz"
	if *live {
		path = "/healthz"
	}
	url, err := probeURL(cfg.HTTP, path)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	status, body, err := probe(ctx, url, cfg.HTTP.TLS.Enabled())
	if err != nil {
		return fmt.Errorf("healthcheck %s: %w", url, err)
	}
	if status != http.StatusOK {
		return fmt.Errorf("healthcheck %s: %d %s", url, status, body)
	}
	fmt.Fprintf(stdout, "%s: %s\n", url, body)
	return nil
}

// probeURL is where a process on the gateway's own host reaches its
// listener: an unspecified host becomes the loopback address of its family.
func probeURL(c config.HTTP, path string) (string, error) {
	host, port, err := net.SplitHostPort(c.Addr)
	if err != nil {
		return "", fmt.Errorf("http.addr %q: %w", c.Addr, err)
	}
	switch host {
	case "", "0.0.0.0":
		host = "127.0.0.1"
	case "::":
		host = "::1"
	}
	scheme := "http"
	if c.TLS.Enabled() {
		scheme = "https"
	}
	return scheme + "://" + net.JoinHostPort(host, port) + path, nil
}

// probe sends one GET and returns the status and the first line of the
// body (at most 512 bytes).
func probe(ctx context.Context, url string, insecureTLS bool) (int, string, error) {
	tr := &http.Transport{DisableKeepAlives: true}
	if insecureTLS {
		tr.TLSClientConfig = &tls.Config{InsecureSkipVerify: true} //nolint:gosec // a probe of the gateway's own listener
	}
	defer tr.CloseIdleConnections()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, "", err
	}
	resp, err := (&http.Client{Transport: tr}).Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 512))
	if err != nil {
		return 0, "", fmt.Errorf("read answer: %w", err)
	}
	line, _, _ := strings.Cut(strings.TrimSpace(string(b)), "\n")
	return resp.StatusCode, line, nil
}
