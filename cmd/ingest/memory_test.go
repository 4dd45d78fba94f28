package main

import (
	"log/slog"
	"runtime/debug"
	"testing"

	"github.com/sluicehq/sluice/internal/config"
)

// applyMemoryBudget sets the Go heap's soft limit and the collector's
// percentage from the configuration, leaves each alone when its variable
// (GOMEMLIMIT, GOGC) is in the environment, and restores what was there.
func TestApplyMemoryBudget(t *testing.T) {
	current := func() (limit int64, percent int) {
		percent = debug.SetGCPercent(100)
		debug.SetGCPercent(percent)
		return debug.SetMemoryLimit(-1), percent
	}
	// Known values before each case, whatever the test binary started with.
	prevLimit, prevPercent := debug.SetMemoryLimit(1<<40), debug.SetGCPercent(77)
	defer func() { debug.SetMemoryLimit(prevLimit); debug.SetGCPercent(prevPercent) }()
	cfg := config.Default()
	cfg.Memory.GCPercent = 300
	quiet := slog.New(slog.DiscardHandler)
	for _, c := range []struct {
		name        string
		env         map[string]string
		wantLimit   int64
		wantPercent int
	}{
		{"from the configuration", nil, cfg.Plan().GoLimit, 300},
		{"GOMEMLIMIT set", map[string]string{"GOMEMLIMIT": "1GiB"}, 1 << 40, 300},
		{"GOGC set", map[string]string{"GOGC": "50"}, cfg.Plan().GoLimit, 77},
	} {
		restore := applyMemoryBudget(cfg, quiet, func(k string) string { return c.env[k] })
		if limit, percent := current(); limit != c.wantLimit || percent != c.wantPercent {
			t.Errorf("%s: heap limit %d, GC percent %d; want %d, %d", c.name, limit, percent, c.wantLimit, c.wantPercent)
		}
		restore()
		if limit, percent := current(); limit != 1<<40 || percent != 77 {
			t.Errorf("%s: restored heap limit %d, GC percent %d; want %d, 77", c.name, limit, percent, int64(1<<40))
		}
	}
}
