package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/buckets"
	"github.com/sluicehq/sluice/internal/model"
	"github.com/sluicehq/sluice/internal/store"
	"github.com/sluicehq/sluice/internal/store/cqlstore"
	"github.com/sluicehq/sluice/internal/wire"
)

// TestCassandraCountsAfterKill: two gateways (writer slots 1 and 2) write
// the same devices into Cassandra; gateway 2 is SIGKILLed mid-stream, so
// it leaves entries ahead of its partitions, and of commits cut between
// their rows and their counts. After it restarts and both stop cleanly,
// every catalogued partition counts exactly the rows it holds, none is
// still a claim, and every closed partition closed at its bound, not a
// reserve early.
func TestCassandraCountsAfterKill(t *testing.T) {
	env := cassandraEnv(t)
	if _, errOut, err := runBin(t, env, "ingest", "migrate"); err != nil {
		t.Fatalf("ingest migrate: %v\n%s", err, errOut)
	}
	const (
		bound   = 768 // rows per partition: the reserve is 12 rows
		devices = 8
		perDev  = 1000 // readings of 2 rows each per device
	)
	gwEnv := func(writer int) []string {
		return append(append([]string(nil), env...),
			fmt.Sprintf("SLUICE_BUCKETS_MAX_ROWS=%d", bound), fmt.Sprintf("SLUICE_BUCKETS_WRITER_ID=%d", writer))
	}
	a := startGateway(t, t.TempDir(), gwEnv(1)...)
	b := startGateway(t, t.TempDir(), gwEnv(2)...)
	var bMu sync.RWMutex // guards b while it is replaced
	base := day(1).Add(6 * time.Hour)
	line := func(dev, i int) []byte {
		return []byte(fmt.Sprintf(`{"device_id":"dev-%d","ts":%q,"metrics":{"a":%d,"b":%d}}`,
			dev, base.Add(time.Duration(i)*time.Second).Format(time.RFC3339Nano), i, i))
	}
	// send posts to g without failing the test: gateway 2 may be dead.
	send := func(g *gateway, body []byte) bool {
		req, err := http.NewRequest(http.MethodPost, g.url+"/v1/readings", strings.NewReader(string(body)))
		if err != nil {
			return false
		}
		req.Header.Set("Authorization", "Bearer "+token)
		req.Header.Set("Content-Type", "application/x-ndjson")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusAccepted
	}
	var (
		sent    atomic.Int64
		bDown   atomic.Bool
		wg      sync.WaitGroup
		failed  atomic.Int64
		killAt  = int64(devices * perDev / 3)
		startAt = int64(devices * perDev * 2 / 3)
	)
	for dev := range devices {
		wg.Go(func() {
			for i := range perDev {
				body := line(dev, i)
				n := sent.Add(1)
				// Every other reading through gateway 2, while it is up; a
				// reading it does not acknowledge goes to gateway 1 (never
				// again to 2, whose partition may hold it already).
				if i%2 == 1 && !bDown.Load() {
					bMu.RLock()
					ok := send(b, body)
					bMu.RUnlock()
					if ok {
						continue
					}
				}
				if !send(a, body) {
					failed.Add(1)
				}
				if n == killAt {
					bMu.Lock()
					bDown.Store(true)
					b.kill()
					bMu.Unlock()
				}
				if n == startAt {
					bMu.Lock()
					b = startGateway(t, t.TempDir(), gwEnv(2)...)
					bDown.Store(false)
					bMu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	if n := failed.Load(); n > 0 {
		t.Fatalf("%d readings not acknowledged by gateway 1", n)
	}
	cfg := cqlstore.DefaultConfig()
	cfg.Hosts = []string{cassandraAddr()}
	for _, kv := range env {
		if k, ok := strings.CutPrefix(kv, "SLUICE_STORE_CASSANDRA_KEYSPACE="); ok {
			cfg.Keyspace = k
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	st, err := cqlstore.Open(ctx, cfg, slog.New(slog.DiscardHandler), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	day := model.DayOf(base.UnixMilli())
	stored := func(pk model.PartitionKey) int64 {
		t.Helper()
		rows, err := st.ScanReadings(ctx, pk, store.Range{From: day.Start(), To: day.End()}, 1<<20)
		if err != nil {
			t.Fatal(err)
		}
		return int64(len(rows))
	}

	// Gateway 2 writes a few more readings of every device (its entries
	// now run ahead) and is killed again, and stays down: gateway 1 lists
	// its claims counted from their rows, without rewriting them.
	for dev := range devices {
		for i := perDev; i < perDev+5; i++ {
			if !send(b, line(dev, i)) {
				t.Fatalf("gateway 2 refused reading %d of dev-%d", i, dev)
			}
		}
	}
	b.kill()
	for dev := range devices {
		page, _ := listed(t, a, fmt.Sprint("dev-", dev), base)
		if page.Unsettled {
			t.Errorf("dev-%d: listing through gateway 1 unsettled: %+v", dev, page.Partitions)
		}
		for _, p := range page.Partitions {
			pk := model.SeriesDay{Kind: model.KindReadings, Tenant: "acme", Series: p.Series, Day: day}.Partition(p.SubBucket)
			if n := stored(pk); p.Rows != n || p.Ahead {
				t.Errorf("%v: listed through gateway 1 with %d rows (ahead %v), holds %d", pk, p.Rows, p.Ahead, n)
			}
		}
	}
	// Gateway 2, back, reconciles its own entries when it lists them.
	b = startGateway(t, t.TempDir(), gwEnv(2)...)
	for dev := range devices {
		listed(t, b, fmt.Sprint("dev-", dev), base)
	}
	a.stop()
	b.stop()

	var partitions, closed int
	for dev := range devices {
		sd := model.SeriesDay{Kind: model.KindReadings, Tenant: "acme", Series: fmt.Sprint("dev-", dev), Day: day}
		parts, err := st.Catalogue(ctx, sd)
		if err != nil {
			t.Fatal(err)
		}
		for _, pi := range parts {
			partitions++
			if n := stored(pi.Key); pi.Ahead || pi.Rows != n {
				t.Errorf("%v: catalogued with %d rows (ahead %v), holds %d", pi.Key, pi.Rows, pi.Ahead, n)
			}
			if pi.Closed {
				closed++
				if pi.Rows < bound-1 { // a reading is 2 rows
					t.Errorf("%v closed at %d rows, before its bound %d", pi.Key, pi.Rows, bound)
				}
			}
		}
		// The listing through the read path agrees (query --direct).
		out := direct(t, env, "partitions", "--device", sd.Series, "--day", sd.Day.String(), "--format", "json")
		if strings.Contains(out, `"unsettled"`) || strings.Contains(out, `"ahead"`) {
			t.Errorf("%s: listing still shows claims: %s", sd.Series, out)
		}
	}
	t.Logf("%d partitions checked, %d closed", partitions, closed)

	// The largest partitions of the day, cluster-wide from the shared
	// catalogue: both gateways' partitions, in order of size.
	out := direct(t, env, "partitions", "--largest", "--day", day.String(), "--limit", "100", "--format", "json")
	var page wire.TopPartitionsPage
	if err := json.Unmarshal([]byte(out), &page); err != nil {
		t.Fatalf("decode %q: %v", out, err)
	}
	if len(page.Partitions) != partitions {
		t.Errorf("--largest listed %d partitions, want all %d", len(page.Partitions), partitions)
	}
	writers := make(map[uint8]bool)
	for i, p := range page.Partitions {
		writers[buckets.WriterOf(p.SubBucket)] = true
		if i > 0 && p.Rows > page.Partitions[i-1].Rows {
			t.Errorf("--largest not in order: %d rows after %d", p.Rows, page.Partitions[i-1].Rows)
		}
	}
	if !writers[1] || !writers[2] {
		t.Errorf("--largest ranked partitions of writers %v, want both gateways'", writers)
	}
	if closed == 0 {
		t.Error("no partition closed: the test does not exercise the bound")
	}
}
