package main

import (
	"bytes"
	"context"
	"log/slog"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/model"
	"github.com/sluicehq/sluice/internal/store"
	"github.com/sluicehq/sluice/internal/store/pebblestore"
)

// `ingest retention run` on the embedded store: 40 days of readings of two
// tenants, one with a 10-day override. A dry run reports and changes
// nothing; the real run drops exactly the expired days and prints them.
func TestRetentionRun(t *testing.T) {
	dir := t.TempDir()
	today := model.DayOf(time.Now().UnixMilli())
	st, err := pebblestore.Open(dir, pebblestore.Options{}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	for _, tenant := range []string{"acme", "brief"} {
		for i := range 40 {
			d := today - model.Day(i)
			pk := model.PartitionKey{Kind: model.KindReadings, Tenant: tenant, Series: "d1", Day: d}
			b := &store.Batch{
				Partitions: []store.PartitionWrite{{Key: pk, Readings: []model.ReadingRow{{TS: d.Start(), Metric: "m"}, {TS: d.Start() + 1, Metric: "m"}}}},
				Catalogue:  []model.PartitionInfo{{Key: pk, Rows: 2, Bytes: 36, MinTS: d.Start(), MaxTS: d.Start() + 1}},
			}
			if err := st.Commit(t.Context(), b); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	t.Chdir(t.TempDir()) // no ./configs/ingest.yaml
	env := []string{"SLUICE_DATA_DIR=" + dir, "SLUICE_RETENTION_AUDIT_FLOOR=1d"}
	cfg := "retention:\n  tenants:\n    brief:\n      readings: 10d\n"
	writeFile(t, "ingest.yaml", cfg)

	remaining := func() map[string]int {
		st, err := pebblestore.Open(dir, pebblestore.Options{}, slog.New(slog.DiscardHandler))
		if err != nil {
			t.Fatal(err)
		}
		defer st.Close()
		out := map[string]int{}
		for _, tenant := range []string{"acme", "brief"} {
			for i := range 40 {
				d := today - model.Day(i)
				rows, err := st.ScanReadings(t.Context(), model.PartitionKey{Kind: model.KindReadings, Tenant: tenant, Series: "d1", Day: d},
					store.Range{From: d.Start(), To: d.End()}, 10)
				if err != nil {
					t.Fatal(err)
				}
				out[tenant] += len(rows) / 2
			}
		}
		return out
	}
	sweep := func(args ...string) (string, string) {
		var stdout, stderr bytes.Buffer
		if err := run(context.Background(), append([]string{"retention", "run", "--config", "ingest.yaml"}, args...), env, &stdout, &stderr); err != nil {
			t.Fatalf("retention run %v: %v\n%s", args, err, stderr.String())
		}
		return stdout.String(), stderr.String()
	}
	row := func(out, kind string) []string {
		m := regexp.MustCompile(`(?m)^\s*` + kind + `\s+(\d+)\s+(\d+)\s+(\d+)\s+(\d+)\s+(\d+)\s*$`).FindStringSubmatch(out)
		if m == nil {
			t.Fatalf("no %s line in:\n%s", kind, out)
		}
		return m[1:]
	}

	out, _ := sweep("--dry-run")
	if !strings.Contains(out, "would drop (dry run, nothing changed) 38 buckets") {
		t.Errorf("dry run output:\n%s", out)
	}
	// acme: days 31-39 ago (9); brief: days 11-39 ago (29). Two rows each.
	if got, want := strings.Join(row(out, "readings"), " "), "38 38 76 1368 0"; got != want {
		t.Errorf("dry run readings line: %s, want %s", got, want)
	}
	if got := remaining(); got["acme"] != 40 || got["brief"] != 40 {
		t.Fatalf("dry run changed the data: %v", got)
	}

	out, errOut := sweep("--tenant", "acme")
	if got, want := strings.Join(row(out, "readings"), " "), "9 9 18 324 18"; got != want {
		t.Errorf("acme readings line: %s, want %s (9 days, 9 partitions, 18 rows, 324 bytes, 2 range deletes a day)\n%s", got, want, out)
	}
	if !strings.Contains(errOut, "9/9 readings/acme/") {
		t.Errorf("no progress bar on stderr: %q", errOut)
	}
	if got := remaining(); got["acme"] != 31 || got["brief"] != 40 {
		t.Fatalf("after sweeping acme: %v, want acme 31 days, brief 40", got)
	}
	sweep()
	if got := remaining(); got["acme"] != 31 || got["brief"] != 11 {
		t.Fatalf("after the full sweep: %v, want acme 31 days, brief 11", got)
	}
}

func writeFile(t *testing.T, name, content string) {
	t.Helper()
	if err := os.WriteFile(name, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
}
