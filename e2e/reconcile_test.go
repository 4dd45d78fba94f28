package e2e

import (
	"encoding/json"
	"fmt"
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
