package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/wire"
)

// clusterPage is the JSON of query partitions --hottest over several
// gateways.
type clusterPage struct {
	wire.TopPartitionsPage
	Gateways []string `json:"gateways"`
	Failed   []struct {
		URL   string `json:"url"`
		Error string `json:"error"`
	} `json:"failed"`
}

// TestHottestAcrossGateways: each gateway counts the rates of the rows it
// wrote, so with two gateways each has one hot device; query partitions
// --hottest --urls asks both and ranks both hot devices above either
// gateway's cold one. A gateway that cannot be reached is named, the exit
// status is 1, and the others' ranking is still printed.
func TestHottestAcrossGateways(t *testing.T) {
	ga := startGateway(t, t.TempDir())
	gb := startGateway(t, t.TempDir())
	d := day(1)
	post := func(g *gateway, counts map[string]int) {
		t.Helper()
		var body strings.Builder
		for dev, n := range counts {
			for i := range n {
				fmt.Fprintf(&body, `{"device_id":%q,"ts":%q,"metrics":{"a":%d}}`+"\n", dev, d.Add(time.Duration(i)*time.Second).Format(time.RFC3339Nano), i)
			}
		}
		if status, resp := g.post("/v1/readings", "application/x-ndjson", []byte(body.String())); status != 202 {
			t.Fatalf("POST to %s: %d %s", g.url, status, resp)
		}
	}
	post(ga, map[string]int{"hot-a": 1000, "cold-a": 5})
	post(gb, map[string]int{"hot-b": 600, "cold-b": 5})

	// Nothing listens on port 1 of loopback.
	const dead = "http://127.0.0.1:1"

	run := func(urls ...string) (clusterPage, string, error) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, filepath.Join(bin, "query"), "partitions", "--hottest", "--limit", "2",
			"--day", d.Format("2006-01-02"), "--format", "json", "--timeout", "5s", "--urls", strings.Join(urls, ","))
		cmd.Env = append(os.Environ(), "SLUICE_TOKEN="+token, "SLUICE_URL=", "SLUICE_URLS=")
		var out, errb bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errb
		err := cmd.Run()
		var page clusterPage
		if jerr := json.Unmarshal(out.Bytes(), &page); jerr != nil {
			t.Fatalf("decode %q: %v (exit %v, stderr %s)", out.String(), jerr, err, errb.String())
		}
		return page, errb.String(), err
	}
	series := func(p clusterPage) []string {
		var s []string
		for i, q := range p.Partitions {
			s = append(s, q.Series)
			if q.RowsPerSecond <= 0 || (i > 0 && q.RowsPerSecond > p.Partitions[i-1].RowsPerSecond) {
				t.Errorf("partition %d (%s) rate %g: want positive and no higher than the one before", i, q.Series, q.RowsPerSecond)
			}
		}
		return s
	}

	page, stderr, err := run(ga.url, gb.url)
	if err != nil {
		t.Fatalf("query: %v\nstderr: %s", err, stderr)
	}
	if got := fmt.Sprint(series(page)); got != "[hot-a hot-b]" {
		t.Errorf("merged ranking %s, want [hot-a hot-b] (each gateway's hot device, ahead of both cold ones)", got)
	}
	if fmt.Sprint(page.Gateways) != fmt.Sprint([]string{ga.url, gb.url}) || len(page.Failed) != 0 {
		t.Errorf("gateways %v failed %v, want both asked, none failed", page.Gateways, page.Failed)
	}

	// One gateway alone answers only for its own writes.
	page, _, err = run(gb.url)
	if err != nil {
		t.Fatal(err)
	}
	if got := fmt.Sprint(series(page)); got != "[hot-b cold-b]" {
		t.Errorf("gateway b alone: %s, want [hot-b cold-b]", got)
	}

	page, stderr, err = run(ga.url, dead, gb.url)
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 1 {
		t.Errorf("exit %v, want status 1 when a gateway cannot be reached", err)
	}
	if !strings.Contains(stderr, "gateway "+dead+":") || !strings.Contains(stderr, "1 of 3 gateways did not answer") {
		t.Errorf("stderr %q, want it to name %s", stderr, dead)
	}
	if got := fmt.Sprint(series(page)); got != "[hot-a hot-b]" {
		t.Errorf("ranking with a gateway down %s, want [hot-a hot-b]", got)
	}
	if len(page.Failed) != 1 || page.Failed[0].URL != dead || len(page.Gateways) != 3 {
		t.Errorf("gateways %v failed %+v, want 3 asked and %s failed", page.Gateways, page.Failed, dead)
	}
	ga.stop()
	gb.stop()
}
