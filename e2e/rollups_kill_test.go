package e2e

import (
	"fmt"
	"io"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/rollmarks"
	"github.com/sluicehq/sluice/internal/store/pebblestore"
)

// TestEmbeddedRollupMarksSurviveKill kills, with SIGKILL, a gateway on the
// embedded store that has stored the rollups of none of the minutes it
// acknowledged (rollups.roll_delay and past_roll_delay 10m; the minutes
// each request wrote first are summed from it, and wait in memory for the
// roller's next tick, rollups.flush_interval 1m). Its marks are written with
// each commit, in the store's own database (no data_dir/rollmarks): the
// restarted gateway finds every marked minute, recomputes them, and the
// rollups of the day count every reading once, though every request was
// sent twice.
func TestEmbeddedRollupMarksSurviveKill(t *testing.T) {
	data := t.TempDir()
	minutes, cells := killUnrolled(t, data)
	if _, err := os.Stat(filepath.Join(data, "rollmarks")); !os.IsNotExist(err) {
		t.Fatalf("a marks database of its own beside the embedded store: %v", err)
	}

	g := startGateway(t, data)
	g.waitLog(fmt.Sprintf("minutes=%d", minutes))
	waitRollupsExact(t, g, cells)
}

// killUnrolled starts a gateway on data that stores no rollup for a
// minute (rollups.roll_delay and past_roll_delay 10m, flush_interval 1m:
// the minutes summed from their commit wait for the first tick), posts
// it, twice each, ten minutes at 1 Hz of readings of three devices, and
// kills it with SIGKILL. It returns how many device-minutes and values
// (raw rows) that is.
func killUnrolled(t *testing.T, data string) (minutes int, cells int64) {
	t.Helper()
	g := startGateway(t, data, "SLUICE_ROLLUPS_ROLL_DELAY=10m", "SLUICE_ROLLUPS_PAST_ROLL_DELAY=10m", "SLUICE_ROLLUPS_FLUSH_INTERVAL=1m")
	devices := []string{"pump-1", "pump-2", "fan-3"}
	base := day(1).Add(10 * time.Hour)
	const seconds = 600
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
	cells = int64(len(devices) * seconds * 2)
	if v := verifyRollups(t, g, day(1)); v.RawRows != cells || v.RollupRows != 0 {
		t.Fatalf("before the kill: %d raw rows, %d counted by rollups; want %d and none stored yet", v.RawRows, v.RollupRows, cells)
	}
	g.kill()
	return len(devices) * seconds / 60, cells
}

// waitRollupsExact waits until the rollups of day(1) count cells values,
// as the raw store holds.
func waitRollupsExact(t *testing.T, g *gateway, cells int64) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		v := verifyRollups(t, g, day(1))
		if v.RawRows == cells && v.RollupRows == cells && len(v.Mismatches) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("after the restart: %d raw rows, %d counted by rollups, %d mismatches; want %d, %d, none\n%s",
				v.RawRows, v.RollupRows, len(v.Mismatches), cells, cells, g.logs())
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// TestUpgradeTakesOverRollupMarks starts this Sluice on a data_dir laid
// out as an earlier one left it, killed with minutes not yet recomputed:
// the embedded store's rollup marks in a database of their own,
// data_dir/rollmarks (made here by moving a killed gateway's marks there).
// The gateway moves them into the store, deletes the directory, and
// recomputes those minutes.
func TestUpgradeTakesOverRollupMarks(t *testing.T) {
	data := t.TempDir()
	minutes, cells := killUnrolled(t, data)

	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	raw, err := pebblestore.Open(data, pebblestore.Options{}, quiet)
	if err != nil {
		t.Fatal(err)
	}
	in := rollmarks.In(raw.MarksIn())
	old, err := rollmarks.Open(filepath.Join(data, "rollmarks"), quiet)
	if err != nil {
		t.Fatal(err)
	}
	// A minute written by several commits has a mark from each.
	moved, distinct := 0, map[rollmarks.Minute]bool{}
	err = in.Each(func(gen uint64, m rollmarks.Minute) error {
		moved++
		distinct[m] = true
		return old.Add(gen, []rollmarks.Minute{m})
	})
	if err == nil {
		err = in.Forget(math.MaxUint64)
	}
	if err != nil {
		t.Fatal(err)
	}
	if err := old.Close(); err != nil {
		t.Fatal(err)
	}
	if err := raw.Close(); err != nil {
		t.Fatal(err)
	}
	if len(distinct) != minutes {
		t.Fatalf("%d minutes marked after the kill (%d marks), want %d", len(distinct), moved, minutes)
	}

	g := startGateway(t, data)
	g.waitLog(fmt.Sprintf("marks=%d", moved))
	g.waitLog(fmt.Sprintf("minutes=%d", minutes))
	waitRollupsExact(t, g, cells)
	if _, err := os.Stat(filepath.Join(data, "rollmarks")); !os.IsNotExist(err) {
		t.Fatalf("the earlier marks database is still there: %v", err)
	}
}
