package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/client"
	"github.com/sluicehq/sluice/internal/model"
)

func reading(device string, ts time.Time, i int) string {
	return fmt.Sprintf(`{"device_id":%q,"ts":%q,"seq":%d,"metrics":{"rpm":%d,"temp_c":%g}}`,
		device, ts.Format(time.RFC3339Nano), i, 1000+i, float64(i)/2)
}

// expectedCSV is what `query readings --format csv` prints for readings
// 0..n-1 written by reading().
func expectedCSV(base time.Time, idx []int) string {
	var b strings.Builder
	b.WriteString("ts,rpm,temp_c,seq\n")
	for _, i := range idx {
		fmt.Fprintf(&b, "%s,%d,%g,%d\n", base.Add(time.Duration(i)*time.Second).UTC().Format("2006-01-02T15:04:05.000Z"), 1000+i, float64(i)/2, i)
	}
	return b.String()
}

func TestIngestQueryRestart(t *testing.T) {
	data := t.TempDir()
	g := startGateway(t, data)
	base := day(1).Add(10 * time.Hour)
	const n = 300
	// Three NDJSON requests, the middle one sent first: out of order on purpose.
	var bodies [3]strings.Builder
	for i := range n {
		fmt.Fprintln(&bodies[i/100], reading("pump-17", base.Add(time.Duration(i)*time.Second), i))
	}
	for _, k := range []int{1, 0, 2} {
		status, body := g.post("/v1/readings", "application/x-ndjson", []byte(bodies[k].String()))
		if status != 202 || body != "{\"accepted\":100}\n" {
			t.Fatalf("POST readings: %d %s", status, body)
		}
	}
	// A retry of a whole request stores nothing twice.
	if status, _ := g.post("/v1/readings", "application/x-ndjson", []byte(bodies[0].String())); status != 202 {
		t.Fatalf("retry: %d", status)
	}
	all := make([]int, n)
	for i := range all {
		all[i] = i
	}
	from, to := day(1).Format(time.RFC3339), day(0).Format(time.RFC3339)
	out, _ := g.query("readings", "--device", "pump-17", "--from", from, "--to", to, "--all", "--format", "csv")
	if want := expectedCSV(base, all); out != want {
		t.Fatalf("query readings --all --format csv:\n%s\nwant:\n%s", head(out), head(want))
	}

	// Paging through the binary: each page's cursor resumes exactly.
	var got strings.Builder
	got.WriteString("ts,rpm,temp_c,seq\n")
	cursor := ""
	pages := 0
	nextRe := regexp.MustCompile(`next page: --cursor (\S+)`)
	for {
		args := []string{"readings", "--device", "pump-17", "--from", from, "--to", to, "--limit", "70", "--format", "csv"}
		if cursor != "" {
			args = append(args, "--cursor", cursor)
		}
		out, errOut := g.query(args...)
		got.WriteString(strings.TrimPrefix(out, "ts,rpm,temp_c,seq\n"))
		pages++
		m := nextRe.FindStringSubmatch(errOut)
		if m == nil {
			break
		}
		cursor = m[1]
	}
	if pages != 5 || got.String() != expectedCSV(base, all) {
		t.Fatalf("%d pages of 70 gave:\n%s", pages, head(got.String()))
	}

	// Audit events, each sent twice, are stored once.
	var events strings.Builder
	for i := range 20 {
		fmt.Fprintf(&events, `{"event_id":"01JEV%03d","stream":"billing-api","ts":%q,"actor":"user:42","action":"invoice.refund","resource":"invoice:%d","outcome":"success","attributes":{"amount":%d}}`+"\n",
			i, base.Add(time.Duration(i)*time.Minute).Format(time.RFC3339), i, i*10)
	}
	for range 2 {
		if status, body := g.post("/v1/audit", "application/x-ndjson", []byte(events.String())); status != 202 {
			t.Fatalf("POST audit: %d %s", status, body)
		}
	}
	out, _ = g.query("audit", "--stream", "billing-api", "--from", from, "--to", to, "--format", "json")
	var page struct {
		Events []struct {
			EventID    string          `json:"event_id"`
			Attributes json.RawMessage `json:"attributes"`
		} `json:"events"`
	}
	if err := json.Unmarshal([]byte(out), &page); err != nil {
		t.Fatalf("query audit json: %v\n%s", err, out)
	}
	var attrs bytes.Buffer
	if len(page.Events) == 20 {
		_ = json.Compact(&attrs, page.Events[7].Attributes)
	}
	if len(page.Events) != 20 || page.Events[7].EventID != "01JEV007" || attrs.String() != `{"amount":70}` {
		t.Fatalf("audit events: %d, [7] = %+v", len(page.Events), page.Events[min(7, len(page.Events)-1)])
	}

	out, _ = g.query("partitions", "--device", "pump-17", "--day", day(1).Format(time.DateOnly), "--format", "csv")
	if lines := strings.Split(strings.TrimSpace(out), "\n"); len(lines) != 2 || !strings.HasPrefix(lines[1], "0,single,false,800,") {
		// 300 readings x 2 metrics, plus the 100-reading retry counted again.
		t.Fatalf("partitions:\n%s", out)
	}

	// Graceful stop, then a restart on the same data finds everything.
	g.stop()
	for _, want := range []string{"http server stopped", "write pipeline drained", "store closed"} {
		if !strings.Contains(g.logs(), want) {
			t.Errorf("shutdown log lacks %q:\n%s", want, g.logs())
		}
	}
	g2 := startGateway(t, data)
	out, _ = g2.query("readings", "--device", "pump-17", "--from", from, "--to", to, "--all", "--format", "csv")
	if out != expectedCSV(base, all) {
		t.Fatalf("after restart:\n%s", head(out))
	}
	g2.stop()
}

func head(s string) string {
	lines := strings.SplitN(s, "\n", 8)
	if len(lines) == 8 {
		lines[7] = "…"
	}
	return strings.Join(lines, "\n")
}

func TestDevTokenWarning(t *testing.T) {
	g := startGateway(t, t.TempDir(), "SLUICE_AUTH_TOKENS=sluice-dev-token=dev")
	if !strings.Contains(g.logs(), "THE DEVELOPMENT TOKEN IS ACCEPTED") {
		t.Errorf("no loud warning for the development token:\n%s", g.logs())
	}
	g.stop()
}

func TestBadConfigStopsStartup(t *testing.T) {
	tests := []struct {
		env  string
		want string
	}{
		{"SLUICE_BUCKETS_MAX_ROWS=0", "buckets.max_rows: must be at least 1, got 0"},
		{"SLUICE_HTTP_ADDR=nowhere", `http.addr: "nowhere" is not host:port`},
		{"SLUICE_SINK_LINGER=forever", `sink.linger (from SLUICE_SINK_LINGER): "forever" is not a duration`},
	}
	for _, tt := range tests {
		t.Run(tt.env, func(t *testing.T) {
			cmd := exec.Command(filepath.Join(bin, "ingest"))
			cmd.Dir = t.TempDir()
			cmd.Env = append(cmd.Environ(), "SLUICE_DATA_DIR="+t.TempDir(), tt.env)
			out, err := cmd.CombinedOutput()
			if err == nil {
				t.Fatalf("ingest started with %s", tt.env)
			}
			if !strings.Contains(string(out), tt.want) || strings.Count(strings.TrimSpace(string(out)), "\n") != 0 {
				t.Errorf("output %q: want one line containing %q", out, tt.want)
			}
		})
	}
}

// TestBucketing writes 1,000 quiet devices and one device 1,000 times
// noisier, over two days, with late rows, through the real gateway with a
// lowered bound, and checks the partitions and the read-back.
func TestBucketing(t *testing.T) {
	const (
		quiet      = 1000
		perQuiet   = 3    // readings per quiet device-day
		perNoisy   = 3000 // 1,000 times a quiet device
		bound      = 500  // rows per partition; a reading is 2 rows
		lateNoisy  = 200  // noisy readings of day 2 sent after day 1's
		noisyName  = "press-0"
		metricsPer = 2
	)
	g := startGateway(t, t.TempDir(), fmt.Sprintf("SLUICE_BUCKETS_MAX_ROWS=%d", bound))
	days := []time.Time{day(2), day(1)}
	rng := rand.New(rand.NewPCG(1, 2))
	var noisyLate []string
	for d, dayStart := range days {
		var body strings.Builder
		lines := 0
		flush := func() {
			if lines == 0 {
				return
			}
			if status, resp := g.post("/v1/readings", "application/x-ndjson", []byte(body.String())); status != 202 {
				t.Fatalf("POST: %d %s", status, resp)
			}
			body.Reset()
			lines = 0
		}
		// Quiet devices: three readings each, spread over the day, in shuffled order.
		order := rng.Perm(quiet * perQuiet)
		for _, k := range order {
			dev, j := k/perQuiet, k%perQuiet
			ts := dayStart.Add(time.Duration(dev)*time.Second + time.Duration(j)*8*time.Hour)
			fmt.Fprintln(&body, reading(fmt.Sprintf("valve-%04d", dev), ts, j))
			if lines++; lines == 1000 {
				flush()
			}
		}
		// The noisy device, one reading per 10 s from midnight; the last
		// lateNoisy readings of day 2 are held back and sent at the end.
		for i := range perNoisy {
			line := reading(noisyName, dayStart.Add(time.Duration(i)*10*time.Second), i)
			if d == 0 && i >= perNoisy-lateNoisy {
				noisyLate = append(noisyLate, line)
				continue
			}
			fmt.Fprintln(&body, line)
			if lines++; lines == 1000 {
				flush()
			}
		}
		flush()
	}
	// Late rows for the first day, after the second day was written.
	if status, resp := g.post("/v1/readings", "application/x-ndjson", []byte(strings.Join(noisyLate, "\n"))); status != 202 {
		t.Fatalf("POST late: %d %s", status, resp)
	}
	// A retry of the first day's first noisy readings, long after the
	// series-day moved on from the partition that holds them: the copies land
	// in another partition, and reads must still return each reading once.
	const retried = 100
	var retry strings.Builder
	for i := range retried {
		fmt.Fprintln(&retry, reading(noisyName, days[0].Add(time.Duration(i)*10*time.Second), i))
	}
	if status, resp := g.post("/v1/readings", "application/x-ndjson", []byte(retry.String())); status != 202 {
		t.Fatalf("POST retry: %d %s", status, resp)
	}

	ctx := context.Background()
	c := g.client()
	for _, dayStart := range days {
		d := model.DayOf(dayStart.UnixMilli())
		for dev := range quiet {
			parts, err := c.Partitions(ctx, client.PartitionsQuery{Kind: model.KindReadings, Series: fmt.Sprintf("valve-%04d", dev), Day: d})
			if err != nil {
				t.Fatal(err)
			}
			if len(parts) != 1 || parts[0].Key.Sub != 0 || parts[0].Rows != perQuiet*metricsPer {
				t.Fatalf("quiet device %d on %s: partitions %+v, want one sub-bucket 0 with %d rows", dev, d, parts, perQuiet*metricsPer)
			}
		}
		parts, err := c.Partitions(ctx, client.PartitionsQuery{Kind: model.KindReadings, Series: noisyName, Day: d})
		if err != nil {
			t.Fatal(err)
		}
		rows := int64(0)
		for _, p := range parts {
			if p.Rows > bound {
				t.Errorf("%s partition %d holds %d rows, over the bound %d", d, p.Key.Sub, p.Rows, bound)
			}
			rows += p.Rows
		}
		maxParts := int((rows+bound-1)/bound) + 1
		wantRows := int64(perNoisy * metricsPer)
		if dayStart.Equal(days[0]) {
			wantRows += retried * metricsPer // the catalogue counts every write
		}
		if rows != wantRows || len(parts) > maxParts || len(parts) < 2 {
			t.Errorf("%s: %d partitions for %d rows; want 2..%d and %d rows", d, len(parts), rows, maxParts, wantRows)
		}
		// Exact, ordered read-back, late rows included.
		var got []model.Reading
		for page, err := range c.ReadingPages(ctx, client.ReadingsQuery{Device: noisyName, Range: client.Range{From: dayStart, To: dayStart.Add(24 * time.Hour), Limit: 700}}) {
			if err != nil {
				t.Fatal(err)
			}
			got = append(got, page.Readings...)
		}
		if len(got) != perNoisy {
			t.Fatalf("%s: read back %d readings, want %d", d, len(got), perNoisy)
		}
		for i, r := range got {
			wantTS := dayStart.Add(time.Duration(i) * 10 * time.Second).UnixMilli()
			if r.TS != wantTS || r.Seq != int64(i) || len(r.Metrics) != 2 || r.Metrics[0].Value != float64(1000+i) {
				t.Fatalf("%s: reading %d = %+v, want ts %d seq %d", d, i, r, wantTS, i)
			}
		}
	}
	g.stop()
}
