package pebblestore_test

import (
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/cockroachdb/pebble/v2"

	"github.com/sluicehq/sluice/internal/store/pebblestore"
)

// The store writes each table's index as one block (see indexBlockSize):
// a table of a few hundred data blocks, which Pebble's default would give
// a two-level index, has one, so a lookup that misses the cache reads no
// second-level index block. Its data blocks are of dataBlockSize (32 KiB)
// before compression, not Pebble's 4 KiB.
func TestTablesHaveOneLevelIndex(t *testing.T) {
	db, err := pebblestore.OpenDB(t.TempDir(), pebblestore.Options{CacheBytes: 1 << 20}, discard)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	b := db.NewBatch()
	val := make([]byte, 104)
	rng := rand.New(rand.NewPCG(1, 2))
	// Keys with a long common prefix make long index entries (the separator
	// between two blocks runs to the first byte that differs), so that a
	// table of a few dozen 32 KiB blocks has an index past the 32 KiB at
	// which Pebble's default (the data block size) would split it.
	prefix := "c-" + strings.Repeat("p", 1000)
	for i := range 20_000 {
		key := fmt.Appendf(nil, "%s%08d", prefix, i)
		for j := 0; j < len(val); j += 8 {
			binary.LittleEndian.PutUint64(val[j:], rng.Uint64()) // values that do not compress
		}
		if err := b.Set(key, val, nil); err != nil {
			t.Fatal(err)
		}
	}
	if err := b.Commit(pebble.Sync); err != nil {
		t.Fatal(err)
	}
	if err := db.Flush(); err != nil {
		t.Fatal(err)
	}
	levels, err := db.SSTables(pebble.WithProperties())
	if err != nil {
		t.Fatal(err)
	}
	largest := uint64(0)
	for _, level := range levels {
		for _, tb := range level {
			p := tb.Properties
			if p.NumDataBlocks > 1 {
				largest = max(largest, p.IndexSize)
			}
			if p.IndexPartitions != 0 {
				t.Errorf("table %s (%d data blocks) has a two-level index of %d partitions", tb.FileNum, p.NumDataBlocks, p.IndexPartitions)
			}
			if avg := p.DataSize / max(p.NumDataBlocks, 1); p.NumDataBlocks > 1 && avg < 28<<10 {
				t.Errorf("table %s: data blocks of %d bytes on average, want about 32 KiB", tb.FileNum, avg)
			}
		}
	}
	if largest < 40<<10 {
		t.Fatalf("the largest index is of %d bytes: too small to test it (Pebble's default splits past 32 KiB)", largest)
	}
}

// Level 0 gathers several flushes before Pebble compacts it (see
// l0CompactionThreshold): Pebble scores level 0 at twice its depth over the
// threshold and compacts it from a score of 1, so three flushes that each
// span the whole key range score 0.75 (Pebble's default would score them
// 1.5, and compact them).
func TestLevelZeroGathersFlushes(t *testing.T) {
	db, err := pebblestore.OpenDB(t.TempDir(), pebblestore.Options{CacheBytes: 1 << 20}, discard)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	for f := range 3 {
		b := db.NewBatch()
		for i := range 100 {
			if err := b.Set(fmt.Appendf(nil, "r-series-%04d", i), fmt.Appendf(nil, "flush %d", f), nil); err != nil {
				t.Fatal(err)
			}
		}
		if err := b.Commit(pebble.Sync); err != nil {
			t.Fatal(err)
		}
		if err := db.Flush(); err != nil {
			t.Fatal(err)
		}
		m := db.Metrics()
		if got, want := m.Levels[0].FillFactor, float64(2*(f+1))/8; got != want {
			t.Errorf("after %d flushes level 0 scores %v (%d tables), want %v", f+1, got, m.Levels[0].TablesCount, want)
		}
	}
}
