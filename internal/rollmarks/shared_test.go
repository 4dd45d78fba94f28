package rollmarks

import (
	"fmt"
	"io"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"testing"

	"github.com/cockroachdb/pebble/v2"
	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/sluicehq/sluice/internal/pebblelog"
)

// openShared opens a Pebble database, as the raw store's, and the marks in
// its range 'm'. The caller closes the database.
func openShared(t *testing.T, dir string) (*pebble.DB, *Store) {
	t.Helper()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	db, err := pebble.Open(dir, &pebble.Options{Logger: pebblelog.New(quiet, "test")})
	if err != nil {
		t.Fatal(err)
	}
	return db, In(db, []byte{'m'})
}

// neighbours are keys of the database's other user, on both sides of the
// marks' range.
var neighbours = [][]byte{[]byte("l\xff\xff"), []byte("n"), []byte("n\x00\x00")}

// markKeys counts the keys of db's marks' range 'm' (openShared).
func markKeys(t *testing.T, db *pebble.DB) int {
	t.Helper()
	it, err := db.NewIter(&pebble.IterOptions{LowerBound: []byte{'m'}, UpperBound: []byte{'n'}})
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for ok := it.First(); ok; ok = it.Next() {
		n++
	}
	if err := it.Close(); err != nil {
		t.Fatal(err)
	}
	return n
}

func checkNeighbours(t *testing.T, db *pebble.DB) {
	t.Helper()
	for _, k := range neighbours {
		v, closer, err := db.Get(k)
		if err != nil {
			t.Errorf("key %q of the database's other user: %v", k, err)
			continue
		}
		if string(v) != "other" {
			t.Errorf("key %q = %q, want other", k, v)
		}
		closer.Close()
	}
}

// TestShared keeps marks in a database shared with other keys: marks
// staged in the sharer's own write are durable with it, and nothing the
// marks do (Each, Forget of every generation, the version, Close) reads
// or touches a key outside their range.
func TestShared(t *testing.T) {
	dir := t.TempDir()
	db, s := openShared(t, dir)
	for _, k := range neighbours {
		if err := db.Set(k, []byte("other"), pebble.Sync); err != nil {
			t.Fatal(err)
		}
	}
	b := db.NewBatch()
	if err := b.Set([]byte("n\x01"), []byte("row"), nil); err != nil {
		t.Fatal(err)
	}
	if err := s.Stage(pebbleSetter{b}, 4, []Minute{{"acme", "pump-1", 60_000}, {"acme", "fan", 0}}); err != nil {
		t.Fatal(err)
	}
	if got := all(t, s); len(got) != 0 {
		t.Fatalf("marks staged in an uncommitted write are visible: %v", got)
	}
	if err := b.Commit(pebble.Sync); err != nil {
		t.Fatal(err)
	}
	if err := s.Add(7, []Minute{{"acme", "pump-1", 120_000}}); err != nil {
		t.Fatal(err)
	}
	if err := s.SetVersion(99); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	db, s = openShared(t, dir)
	defer db.Close()
	want := []mark{{4, Minute{"acme", "pump-1", 60_000}}, {4, Minute{"acme", "fan", 0}}, {7, Minute{"acme", "pump-1", 120_000}}}
	if diff := cmp.Diff(want, all(t, s)); diff != "" {
		t.Errorf("marks after reopen (-want +got):\n%s", diff)
	}
	if v, err := s.Version(); err != nil || v != 99 {
		t.Errorf("Version = %d, %v; want 99", v, err)
	}
	if err := s.Forget(math.MaxUint64); err != nil {
		t.Fatal(err)
	}
	if got := all(t, s); len(got) != 0 {
		t.Errorf("marks after forgetting every generation: %v", got)
	}
	if v, err := s.Version(); err != nil || v != 99 {
		t.Errorf("Version after Forget = %d, %v; want 99", v, err)
	}
	checkNeighbours(t, db)
}

// TestTakeOver moves the marks and the version of an earlier Sluice's
// marks database into the shared store and deletes its directory.
func TestTakeOver(t *testing.T) {
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	dir := t.TempDir()
	oldDir := filepath.Join(dir, "rollmarks")
	old, err := Open(oldDir, quiet)
	if err != nil {
		t.Fatal(err)
	}
	marks := []mark{{1, Minute{"acme", "a", 0}}, {3, Minute{"acme", "b", 60_000}}}
	for _, m := range marks {
		if err := old.Add(m.Gen, []Minute{m.M}); err != nil {
			t.Fatal(err)
		}
	}
	if err := old.SetVersion(500); err != nil {
		t.Fatal(err)
	}
	if err := old.Close(); err != nil {
		t.Fatal(err)
	}
	db, s := openShared(t, filepath.Join(dir, "raw"))
	defer db.Close()
	// A copy of the old database, as a crash before it was set aside
	// would leave it.
	copyTree(t, oldDir, filepath.Join(dir, "copy"))
	if err := s.Add(2, []Minute{{"acme", "c", 0}}); err != nil {
		t.Fatal(err)
	}
	n, err := s.TakeOver(oldDir, quiet)
	if err != nil || n != 2 {
		t.Fatalf("TakeOver = %d, %v; want 2 marks moved", n, err)
	}
	want := []mark{marks[0], {2, Minute{"acme", "c", 0}}, marks[1]}
	if diff := cmp.Diff(want, all(t, s)); diff != "" {
		t.Errorf("marks after the take-over (-want +got):\n%s", diff)
	}
	if v, err := s.Version(); err != nil || v != 500 {
		t.Errorf("Version = %d, %v; want the old database's 500", v, err)
	}
	if _, err := os.Stat(oldDir); !os.IsNotExist(err) {
		t.Errorf("old marks directory still there: %v", err)
	}
	if n, err := s.TakeOver(oldDir, quiet); err != nil || n != 0 {
		t.Errorf("TakeOver with no old database = %d, %v; want 0, nil", n, err)
	}

	// The crash came before the old database was set aside: the next
	// start moves the same marks again, and a version the store reached
	// since stays.
	if err := os.Rename(filepath.Join(dir, "copy"), oldDir); err != nil {
		t.Fatal(err)
	}
	if err := s.SetVersion(900); err != nil {
		t.Fatal(err)
	}
	if n, err := s.TakeOver(oldDir, quiet); err != nil || n != 2 {
		t.Fatalf("TakeOver again = %d, %v; want the 2 marks moved again", n, err)
	}
	// Moved twice, each of them is there twice now: the feed takes a
	// minute marked more than once up once (pendingSet.compactAll).
	want = []mark{marks[0], marks[0], {2, Minute{"acme", "c", 0}}, marks[1], marks[1]}
	if diff := cmp.Diff(want, all(t, s)); diff != "" {
		t.Errorf("marks after the second take-over (-want +got):\n%s", diff)
	}
	if v, err := s.Version(); err != nil || v != 900 {
		t.Errorf("Version = %d, %v; want 900, not lowered", v, err)
	}
	// The crash came while the set-aside copy was being removed.
	aside := oldDir + ".taken-over"
	if err := os.MkdirAll(filepath.Join(aside, "half"), 0o755); err != nil {
		t.Fatal(err)
	}
	if n, err := s.TakeOver(oldDir, quiet); err != nil || n != 0 {
		t.Errorf("TakeOver with a set-aside copy left = %d, %v; want 0, nil", n, err)
	}
	if _, err := os.Stat(aside); !os.IsNotExist(err) {
		t.Errorf("set-aside copy still there: %v", err)
	}
}

// TestTakeOverUnpacked moves marks written as an earlier Sluice wrote
// them (a key per mark, empty values) out of a database of their own:
// several in a generation, generation 0 first, and more than one packed
// value holds in one generation, which the take-over then packs.
func TestTakeOverUnpacked(t *testing.T) {
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	dir := t.TempDir()
	oldDir := filepath.Join(dir, "rollmarks")
	db, err := pebble.Open(oldDir, &pebble.Options{Logger: pebblelog.New(quiet, "test")})
	if err != nil {
		t.Fatal(err)
	}
	var want []mark
	put := func(gen uint64, m Minute) {
		if err := db.Set(appendKey(nil, gen, m), nil, pebble.NoSync); err != nil {
			t.Fatal(err)
		}
		want = append(want, mark{gen, m})
	}
	put(0, Minute{"acme", "a", 0})
	put(0, Minute{"acme", "b", 60_000})
	for i := range maxPacked + 5 {
		put(1, Minute{"acme", fmt.Sprintf("dev-%05d", i), 0})
	}
	put(3, Minute{"beta", "c", -60_000})
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	raw, s := openShared(t, filepath.Join(dir, "raw"))
	defer raw.Close()
	n, err := s.TakeOver(oldDir, quiet)
	if err != nil || n != len(want) {
		t.Fatalf("TakeOver = %d, %v; want %d marks moved", n, err, len(want))
	}
	if diff := cmp.Diff(want, all(t, s), cmpopts.SortSlices(markLess)); diff != "" {
		t.Errorf("marks after the take-over (-want +got):\n%s", diff)
	}
	// Generation 0, generation 1 in two, generation 3.
	if keys := markKeys(t, raw); keys != 4 {
		t.Errorf("%d keys hold the moved marks, want 4", keys)
	}
}

// copyTree copies the regular files of directory from into to.
func copyTree(t *testing.T, from, to string) {
	t.Helper()
	if err := os.CopyFS(to, os.DirFS(from)); err != nil {
		t.Fatal(err)
	}
}

// TestForgetDeletesOnlyNewGenerations: each Forget deletes the generations
// from where the one before it stopped, so that the range deletions it
// leaves do not nest (nested ones made every read of the database slower
// with each roll). What shows it: a mark written afterwards in a
// generation an earlier Forget already covered (which the feed never
// does) outlives the next Forget.
func TestForgetDeletesOnlyNewGenerations(t *testing.T) {
	db, s := openShared(t, t.TempDir())
	defer db.Close()
	m := Minute{"acme", "pump-1", 0}
	for gen := range uint64(6) {
		if err := s.Add(gen, []Minute{m}); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Forget(5); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]mark{{5, m}}, all(t, s)); diff != "" {
		t.Fatalf("after Forget(5) (-want +got):\n%s", diff)
	}
	if err := s.Add(2, []Minute{m}); err != nil {
		t.Fatal(err)
	}
	if err := s.Forget(3); err != nil { // below where the last one stopped: nothing
		t.Fatal(err)
	}
	if err := s.Forget(7); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]mark{{2, m}}, all(t, s)); diff != "" {
		t.Fatalf("after Forget(7) (-want +got):\n%s", diff)
	}
}
