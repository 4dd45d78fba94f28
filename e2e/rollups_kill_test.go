package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestEmbeddedRollupMarksSurviveKill kills, with SIGKILL, a gateway on the
// embedded store that has recomputed none of the minutes it acknowledged
// (rollups.roll_delay and past_roll_delay 10m). Its marks are written with
// each commit, in the store's own database (no data_dir/rollmarks): the
// restarted gateway finds every marked minute, recomputes them, and the
// rollups of the day count every reading once, though every request was
// sent twice.
func TestEmbeddedRollupMarksSurviveKill(t *testing.T) {
	data := t.TempDir()
	g := startGateway(t, data, "SLUICE_ROLLUPS_ROLL_DELAY=10m", "SLUICE_ROLLUPS_PAST_ROLL_DELAY=10m")
	base := day(1).Add(10 * time.Hour)
	devices := []string{"pump-1", "pump-2", "fan-3"}
	const seconds = 600 // ten minutes at 1 Hz
	for s := 0; s < seconds; s += 100 {
		var body strings.Builder
		for _, d := range devices {
			for i := s; i < s+100; i++ {
				fmt.Fprintln(&body, reading(d, base.Add(time.Duration(i)*time.Second), i))
			}
		}
		for range 2 { // and its retry
			if status, resp := g.post("/v1/readings", "application/x-ndjson", []byte(body.String())); status != 202 {
				t.Fatalf("POST readings: %d %s", status, resp)
			}
		}
	}
	cells := int64(len(devices) * seconds * 2)
	if v := verifyRollups(t, g, day(1)); v.RawRows != cells || v.RollupRows != 0 {
		t.Fatalf("before the kill: %d raw rows, %d counted by rollups; want %d and none recomputed yet", v.RawRows, v.RollupRows, cells)
	}
	g.kill()
	if _, err := os.Stat(filepath.Join(data, "rollmarks")); !os.IsNotExist(err) {
		t.Fatalf("a marks database of its own beside the embedded store: %v", err)
	}

	g = startGateway(t, data)
	g.waitLog(fmt.Sprintf("minutes=%d", len(devices)*seconds/60))
	deadline := time.Now().Add(time.Minute)
	for {
		v := verifyRollups(t, g, day(1))
		if v.RawRows == cells && v.RollupRows == cells && len(v.Mismatches) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after the restart: %d raw rows, %d counted by rollups, %d mismatches; want %d, %d, none\n%s",
				v.RawRows, v.RollupRows, len(v.Mismatches), cells, cells, g.logs())
		}
		time.Sleep(200 * time.Millisecond)
	}
}
