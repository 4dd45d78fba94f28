package pebblestore

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"testing"

	"github.com/sluicehq/sluice/internal/model"
	"github.com/sluicehq/sluice/internal/store"
)

func testLeaves(n int, seed byte) []store.AuditLeaf {
	out := make([]store.AuditLeaf, n)
	for i := range out {
		out[i] = store.AuditLeaf{TS: int64(1_700_000_000_000 + i), EventID: "ev-" + string(rune('a'+i%26)) + string(rune('a'+i/26%26))}
		out[i].Hash[0], out[i].Hash[1], out[i].Hash[31] = seed, byte(i), byte(i>>8)
	}
	return out
}

func readLeaves(t *testing.T, s *Store, d model.Day) []store.AuditLeaf {
	t.Helper()
	var got []store.AuditLeaf
	if err := s.AuditLeaves(context.Background(), "acme", "admin", d, func(l store.AuditLeaf) error {
		got = append(got, l)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return got
}

func leavesDirEntries(t *testing.T, dir string) int {
	t.Helper()
	es, err := os.ReadDir(filepath.Join(dir, leavesDir))
	if err != nil {
		t.Fatal(err)
	}
	return len(es)
}

func TestLeafWriterIngests(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	s, err := Open(dir, Options{}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	d := model.Day(20000)
	want := testLeaves(300, 1)
	w, err := s.AuditLeafWriter(ctx, "acme", "admin", d)
	if err != nil {
		t.Fatal(err)
	}
	// One slice reused for every chunk, as the seal does: each Put must
	// have taken what it needs.
	buf := make([]store.AuditLeaf, 0, 100)
	for c := range 3 {
		buf = append(buf[:0], want[c*100:(c+1)*100]...)
		if err := w.Put(ctx, uint32(c), buf); err != nil {
			t.Fatal(err)
		}
		clear(buf[:cap(buf)])
	}
	if got := readLeaves(t, s, d); len(got) != 0 {
		t.Fatalf("%d leaves readable before Commit", len(got))
	}
	walBefore := s.db.Metrics().WAL.BytesIn
	if err := w.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	m := s.db.Metrics()
	if m.Ingest.Count != 1 {
		t.Fatalf("%d ingestions, want 1", m.Ingest.Count)
	}
	if m.WAL.BytesIn != walBefore {
		t.Fatalf("the leaves went through the WAL (%d bytes)", m.WAL.BytesIn-walBefore)
	}
	if n := leavesDirEntries(t, dir); n != 0 {
		t.Fatalf("%d files left in %s", n, leavesDir)
	}
	if err := w.Commit(ctx); !errors.Is(err, errLeavesDone) {
		t.Fatalf("second Commit: %v", err)
	}
	w.Abort() // after Commit: nothing to do
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	// Durable, and in order, after the store is reopened.
	s, err = Open(dir, Options{}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	got := readLeaves(t, s, d)
	if len(got) != len(want) {
		t.Fatalf("read %d leaves, want %d", len(got), len(want))
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("leaf %d: %+v, want %+v", i, got[i], want[i])
		}
	}

	// A chunk written again replaces the stored one, though the new table
	// overlaps the ingested one.
	again := testLeaves(100, 2)
	w, err = s.AuditLeafWriter(ctx, "acme", "admin", d)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Put(ctx, 1, again); err != nil {
		t.Fatal(err)
	}
	if err := w.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	got = readLeaves(t, s, d)
	if len(got) != 300 || got[0] != want[0] || got[100] != again[0] || got[299] != want[299] {
		t.Fatalf("after chunk 1 was written again: %d leaves, [100] = %+v", len(got), got[100])
	}
}

func TestLeafWriterAbort(t *testing.T) {
	ctx := context.Background()
	s := openAuditStore(t)
	d := model.Day(20000)
	w, err := s.AuditLeafWriter(ctx, "acme", "admin", d)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Put(ctx, 0, testLeaves(10, 1)); err != nil {
		t.Fatal(err)
	}
	w.Abort()
	if got := readLeaves(t, s, d); len(got) != 0 {
		t.Fatalf("%d leaves stored after Abort", len(got))
	}
	if n := leavesDirEntries(t, s.dir); n != 0 {
		t.Fatalf("%d files left after Abort", n)
	}
	if err := w.Put(ctx, 1, testLeaves(10, 1)); !errors.Is(err, errLeavesDone) {
		t.Fatalf("Put after Abort: %v", err)
	}

	// Chunks out of order are refused, naming the chunk.
	w, err = s.AuditLeafWriter(ctx, "acme", "admin", d)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Put(ctx, 5, testLeaves(1, 1)); err != nil {
		t.Fatal(err)
	}
	if err := w.Put(ctx, 4, testLeaves(1, 1)); err == nil {
		t.Fatal("chunk 4 after chunk 5 was taken")
	}
	w.Abort()

	// Nothing put: Commit ingests nothing and leaves no file.
	w, err = s.AuditLeafWriter(ctx, "acme", "admin", d+1)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if c := s.db.Metrics().Ingest.Count; c != 0 {
		t.Fatalf("%d ingestions of nothing", c)
	}
	if n := leavesDirEntries(t, s.dir); n != 0 {
		t.Fatalf("%d files in %s after a commit of nothing, want none", n, leavesDir)
	}
}

// A table a crash left unfinished is removed when the store opens again.
func TestOpenEmptiesLeavesDir(t *testing.T) {
	dir := t.TempDir()
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	s, err := Open(dir, Options{}, logger)
	if err != nil {
		t.Fatal(err)
	}
	w, err := s.AuditLeafWriter(context.Background(), "acme", "admin", 20000)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Abort()
	if err := w.Put(context.Background(), 0, testLeaves(10, 1)); err != nil {
		t.Fatal(err)
	}
	if n := leavesDirEntries(t, dir); n != 1 {
		t.Fatalf("%d files in %s while a writer is open, want 1", n, leavesDir)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s, err = Open(dir, Options{}, logger)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if n := leavesDirEntries(t, dir); n != 0 {
		t.Fatalf("%d files left in %s after reopening", n, leavesDir)
	}
}
