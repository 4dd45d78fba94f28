package pebblestore

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestProbe makes the store's directory unwritable for the probe (its file
// is taken by a directory, which even root cannot open for writing) and
// writable again.
func TestProbe(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(dir, Options{CacheBytes: 1 << 20}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := s.Probe(ctx); err != nil {
		t.Fatalf("Probe of a healthy store: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, ProbeFile)); !os.IsNotExist(err) {
		t.Fatalf("probe file left behind: %v", err)
	}
	blocker := filepath.Join(dir, ProbeFile, "x")
	if err := os.MkdirAll(blocker, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := s.Probe(ctx); err == nil || !strings.Contains(err.Error(), "not writable") {
		t.Fatalf("Probe with the directory unwritable = %v, want not writable", err)
	}
	if err := os.RemoveAll(filepath.Join(dir, ProbeFile)); err != nil {
		t.Fatal(err)
	}
	if err := s.Probe(ctx); err != nil {
		t.Fatalf("Probe once writable again: %v", err)
	}
}
