// Package e2e runs the real binaries: it builds cmd/ingest and cmd/query,
// starts the gateway on a free port with its embedded store, writes over
// HTTP and reads back through the query tool and the read API.
package e2e

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/client"
)

var bin string // directory holding the built binaries

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "sluice-e2e-bin")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	bin = dir
	for _, pkg := range []string{"./cmd/ingest", "./cmd/query"} {
		if err := build(pkg); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// build builds the command of package pkg (a path from the module's root)
// into bin, named as its directory.
func build(pkg string) error {
	name := filepath.Base(pkg)
	cmd := exec.Command("go", "build", "-o", filepath.Join(bin, name), pkg)
	cmd.Dir = ".."
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("build %s: %w\n%s", name, err, out)
	}
	return nil
}

const token = "e2e-token-1"

// gateway is a running ingest process.
type gateway struct {
	t       testing.TB
	cmd     *exec.Cmd
	url     string
	dataDir string
	mu      sync.Mutex
	log     bytes.Buffer
	exited  chan error
}

// readyLine matches the start-up line in text and in JSON (log.format).
var readyLine = regexp.MustCompile(`msg="gateway ready" http_addr=(\S+)|"msg":"gateway ready",[^}]*"http_addr":"([^"]+)"`)

// startGateway runs ingest with the embedded store in dataDir and extra
// SLUICE_* settings, and waits until it listens.
func startGateway(t testing.TB, dataDir string, env ...string) *gateway {
	t.Helper()
	g := &gateway{t: t, dataDir: dataDir, exited: make(chan error, 1)}
	g.cmd = exec.Command(filepath.Join(bin, "ingest"))
	g.cmd.Dir = t.TempDir() // no configs/ingest.yaml there: built-in defaults
	g.cmd.Env = append(os.Environ(),
		"SLUICE_HTTP_ADDR=127.0.0.1:0",
		"SLUICE_DATA_DIR="+dataDir,
		"SLUICE_AUTH_TOKENS="+token+"=acme",
		// Stop at once unless a test asks for a drain (the default is 5s).
		"SLUICE_HTTP_DRAIN_DELAY=0s",
	)
	g.cmd.Env = append(g.cmd.Env, env...)
	stderr, err := g.cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := g.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	addr := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			line := sc.Text()
			g.mu.Lock()
			g.log.WriteString(line + "\n")
			g.mu.Unlock()
			if m := readyLine.FindStringSubmatch(line); m != nil {
				addr <- m[1] + m[2]
			}
		}
		g.exited <- g.cmd.Wait()
	}()
	select {
	case a := <-addr:
		g.url = "http://" + a
	case err := <-g.exited:
		t.Fatalf("gateway exited before it was ready: %v\n%s", err, g.logs())
	case <-time.After(30 * time.Second):
		_ = g.cmd.Process.Kill()
		t.Fatalf("gateway not ready after 30s:\n%s", g.logs())
	}
	t.Cleanup(func() {
		if g.cmd.ProcessState == nil {
			_ = g.cmd.Process.Kill()
			<-g.exited
		}
	})
	return g
}

func (g *gateway) logs() string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.log.String()
}

// stop sends SIGTERM and waits for a clean exit.
func (g *gateway) stop() {
	g.t.Helper()
	if err := g.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		g.t.Fatal(err)
	}
	select {
	case err := <-g.exited:
		if err != nil {
			g.t.Fatalf("gateway exit: %v\n%s", err, g.logs())
		}
	case <-time.After(30 * time.Second):
		g.t.Fatalf("gateway did not stop within 30s:\n%s", g.logs())
	}
}

func (g *gateway) post(path, contentType string, body []byte) (int, string) {
	g.t.Helper()
	req, err := http.NewRequest(http.MethodPost, g.url+path, bytes.NewReader(body))
	if err != nil {
		g.t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		g.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func (g *gateway) client() *client.Client {
	g.t.Helper()
	c, err := client.NewClient(g.url, token, http.DefaultClient)
	if err != nil {
		g.t.Fatal(err)
	}
	return c
}

// query runs the query binary against the gateway and returns its stdout.
func (g *gateway) query(args ...string) (string, string) {
	g.t.Helper()
	return g.queryT(g.t, args...)
}

// queryT is query failing t (a subtest of the gateway's test) instead.
func (g *gateway) queryT(t testing.TB, args ...string) (string, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(bin, "query"), args...)
	cmd.Env = append(os.Environ(), "SLUICE_URL="+g.url, "SLUICE_TOKEN="+token)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		t.Fatalf("query %s: %v\nstderr: %s", strings.Join(args, " "), err, errb.String())
	}
	return out.String(), errb.String()
}

// day returns midnight UTC n days before today.
func day(n int) time.Time {
	return time.Now().UTC().Truncate(24*time.Hour).AddDate(0, 0, -n)
}
