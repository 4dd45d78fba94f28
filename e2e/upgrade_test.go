package e2e

import (
	"bufio"
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/sluicehq/sluice/internal/wire"
)

// upgradeEnv keeps the fixture's day (2026-11-20) inside retention however
// late the test runs, and leaves it to this test when rollups are written.
var upgradeEnv = []string{
	"SLUICE_RETENTION_ENABLED=false",
	"SLUICE_RETENTION_READINGS=20y",
	"SLUICE_ROLLUPS_ROLL_DELAY=1s",
}

// TestUpgradeFromFloatOnlyStore opens, with the current gateway, a data
// directory written by the gateway of commit 10a3f17 (before typed metric
// values; see testdata/upgrade/make.sh), and checks that every reading
// reads back as the float it was sent as, that its rollups still read, and
// that typed readings are stored beside the old ones.
func TestUpgradeFromFloatOnlyStore(t *testing.T) {
	data := t.TempDir()
	untar := exec.Command("tar", "-xzf", filepath.Join("testdata", "upgrade", "store-10a3f17.tar.gz"), "-C", data)
	if out, err := untar.CombinedOutput(); err != nil {
		t.Fatalf("untar the fixture: %v\n%s", err, out)
	}
	sent := readNDJSON(t, filepath.Join("testdata", "upgrade", "readings.ndjson"))
	g := startGateway(t, data, upgradeEnv...)
	const from, to = "2026-11-20T00:00:00Z", "2026-11-21T00:00:00Z"
	for _, dev := range []string{"pump-17", "pump-18"} {
		var want []wire.Reading
		for _, r := range sent {
			if r.DeviceID == dev {
				r.DeviceID = "" // the read API leaves the device to the query
				want = append(want, r)
			}
		}
		out, _ := g.query("readings", "--device", dev, "--from", from, "--to", to, "--all", "--format", "json")
		var page wire.ReadingsPage
		decodeJSON(t, out, &page, "readings")
		for i := range page.Readings {
			page.Readings[i].DeviceID = ""
		}
		if diff := cmp.Diff(want, page.Readings); diff != "" {
			t.Errorf("%s: readings written before typed values (-sent +read):\n%s", dev, diff)
		}
	}

	// The old gateway's rollups read back: each minute of pump-17's rpm
	// holds its 60 readings, rpm 1000+i at second i.
	out, _ := g.query("rollups", "--device", "pump-17", "--metric", "rpm", "--from", from, "--to", to, "--format", "json")
	var series struct {
		Buckets []struct {
			Count uint64  `json:"count"`
			Sum   float64 `json:"sum"`
		} `json:"buckets"`
	}
	if err := json.Unmarshal([]byte(out), &series); err != nil {
		t.Fatalf("query rollups: %v\n%s", err, out)
	}
	if len(series.Buckets) != 2 || series.Buckets[0].Count != 60 || series.Buckets[0].Sum != 60*1000+59*60/2 ||
		series.Buckets[1].Count != 60 || series.Buckets[1].Sum != 60*1060+59*60/2 {
		t.Errorf("rollups of the old store: %s", out)
	}

	// Typed readings beside the old ones, in the same partition.
	body := `{"device_id":"pump-17","ts":"2026-11-20T10:05:00Z","metrics":{"state":"idle","open":true,"rpm":1200}}`
	if status, resp := g.post("/v1/readings", "application/json", []byte(body)); status != 202 {
		t.Fatalf("POST typed reading: %d %s", status, resp)
	}
	out, _ = g.query("readings", "--device", "pump-17", "--from", "2026-11-20T10:05:00Z", "--to", to, "--format", "json")
	var page wire.ReadingsPage
	decodeJSON(t, out, &page, "readings")
	if len(page.Readings) != 1 || string(mustJSON(t, page.Readings[0].Metrics)) != `{"open":true,"rpm":1200.0,"state":"idle"}` {
		t.Errorf("typed reading read back as %s", out)
	}
	g.stop()
}

func readNDJSON(t *testing.T, path string) []wire.Reading {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var rs []wire.Reading
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		// Ingest's JSON, where every number is a float.
		var r struct {
			DeviceID string             `json:"device_id"`
			TS       string             `json:"ts"`
			Seq      *int64             `json:"seq"`
			Metrics  map[string]float64 `json:"metrics"`
		}
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		w := wire.Reading{DeviceID: r.DeviceID, TS: r.TS, Seq: r.Seq, Metrics: map[string]wire.Value{}}
		for name, v := range r.Metrics {
			w.Metrics[name] = wire.Value{Value: v}
		}
		rs = append(rs, w)
	}
	return rs
}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
