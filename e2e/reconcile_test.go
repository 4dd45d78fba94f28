package e2e

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/wire"
)

// listed returns the partitions `query partitions --format json` lists for
// device on d, and the rows they count.
func listed(t *testing.T, g *gateway, device string, d time.Time) (wire.PartitionsPage, int64) {
	t.Helper()
	out, _ := g.query("partitions", "--device", device, "--day", d.Format("2006-01-02"), "--format", "json")
	var page wire.PartitionsPage
	if err := json.Unmarshal([]byte(out), &page); err != nil {
		t.Fatalf("decode %q: %v", out, err)
	}
	var rows int64
	for _, p := range page.Partitions {
		rows += p.Rows
	}
	return page, rows
}

// TestPartitionCountsAfterKill: a gateway SIGKILLed while its catalogue
// entries run ahead of their partitions leaves claims behind; the next run
// reconciles them, so the listing is exact (it said 146 rows for 100
// before), one more write makes it 101, and a clean restart keeps 101.
func TestPartitionCountsAfterKill(t *testing.T) {
	dir := t.TempDir()
	d := day(1)
	post := func(g *gateway, i int) {
		t.Helper()
		line := fmt.Sprintf(`{"device_id":"pump-1","ts":%q,"metrics":{"rpm":%d}}`, d.Add(time.Duration(i)*time.Second).Format(time.RFC3339Nano), i)
		if status, resp := g.post("/v1/readings", "application/x-ndjson", []byte(line)); status != 202 {
			t.Fatalf("POST reading %d: %d %s", i, status, resp)
		}
	}
	// A small bound, so that the reserve (bound/64) is visible in counts.
	env := "SLUICE_BUCKETS_MAX_ROWS=3000"
	g := startGateway(t, dir, env)
	for i := range 100 {
		post(g, i)
	}
	g.kill()

	g = startGateway(t, dir, env)
	check := func(when string, want int64) {
		t.Helper()
		page, rows := listed(t, g, "pump-1", d)
		if rows != want || page.Unsettled {
			t.Errorf("%s: listing counts %d rows (unsettled %v), want exactly %d: %+v", when, rows, page.Unsettled, want, page.Partitions)
		}
		for _, p := range page.Partitions {
			if p.Ahead {
				t.Errorf("%s: partition %d listed as a claim", when, p.SubBucket)
			}
		}
	}
	check("after SIGKILL and restart", 100)
	post(g, 100)
	check("after one more write", 101)
	g.stop()
	g = startGateway(t, dir, env)
	check("after a clean restart", 101)
	g.stop()
}

// TestPartitionRanking: through the real binaries, the tenant's largest
// partitions of a day come from the catalogue, the hottest from the
// gateway's counters, and the partition health metrics are exported.
func TestPartitionRanking(t *testing.T) {
	g := startGateway(t, t.TempDir(), "SLUICE_BUCKETS_MAX_ROWS=1000")
	d := day(1)
	var body strings.Builder
	// dev-big: 1,400 readings of 2 rows (3 partitions: 2 closed at 1000
	// rows, 800 rows open); dev-mid: 200 readings; dev-small: 3.
	for dev, n := range map[string]int{"dev-big": 1400, "dev-mid": 200, "dev-small": 3} {
		for i := range n {
			fmt.Fprintf(&body, `{"device_id":%q,"ts":%q,"metrics":{"a":%d,"b":%d}}`+"\n", dev, d.Add(time.Duration(i)*time.Second).Format(time.RFC3339Nano), i, i)
		}
	}
	if status, resp := g.post("/v1/readings", "application/x-ndjson", []byte(body.String())); status != 202 {
		t.Fatalf("POST: %d %s", status, resp)
	}
	rank := func(args ...string) wire.TopPartitionsPage {
		t.Helper()
		out, _ := g.query(append([]string{"partitions", "--format", "json", "--day", d.Format("2006-01-02")}, args...)...)
		var page wire.TopPartitionsPage
		if err := json.Unmarshal([]byte(out), &page); err != nil {
			t.Fatalf("decode %q: %v", out, err)
		}
		return page
	}
	largest := rank("--largest", "--limit", "4")
	var got []string
	for _, p := range largest.Partitions {
		got = append(got, fmt.Sprintf("%s:%d", p.Series, p.Rows))
	}
	if want := "[dev-big:1000 dev-big:1000 dev-big:800 dev-mid:400]"; fmt.Sprint(got) != want || largest.Day != d.Format("2006-01-02") {
		t.Errorf("largest = %v on %s, want %s", got, largest.Day, want)
	}
	hottest := rank("--hottest", "--limit", "1")
	if len(hottest.Partitions) != 1 || hottest.Partitions[0].Series != "dev-big" || hottest.Partitions[0].RowsPerSecond <= 0 {
		t.Errorf("hottest = %+v, want a dev-big partition with a rate", hottest.Partitions)
	}
	if n := g.histogramCount("sluice_partition_closed_rows"); n != 2 {
		t.Errorf("closed partitions observed %d, want 2", n)
	}
	if n := g.histogramCount("sluice_partition_sub_buckets"); n != 5 {
		t.Errorf("sub-bucket openings observed %d, want 5 (3 + 1 + 1)", n)
	}
	g.stop()
}

// histogramCount returns the sum of name_count over its label sets.
func (g *gateway) histogramCount(name string) int {
	g.t.Helper()
	return int(g.metricSum(name + "_count"))
}
