package pebblestore_test

import (
	"encoding/binary"
	"fmt"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"

	"github.com/sluicehq/sluice/internal/store/pebblestore"
)

// The store writes each table's index as one block (see indexBlockSize):
// a table of a few hundred data blocks, which Pebble's default would give
// a two-level index, has one, so a lookup that misses the cache reads no
// second-level index block.
func TestTablesHaveOneLevelIndex(t *testing.T) {
	db, err := pebblestore.OpenDB(t.TempDir(), pebblestore.Options{CacheBytes: 1 << 20}, discard)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	b := db.NewBatch()
	val := make([]byte, 100)
	for i := range 20_000 {
		key := fmt.Appendf(nil, "c-series-%08d", i)
		binary.BigEndian.PutUint64(val, uint64(i)*0x9e3779b97f4a7c15) // values differ (blocks are counted uncompressed)
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
	tables := 0
	for _, level := range levels {
		for _, tb := range level {
			tables++
			p := tb.Properties
			if p.NumDataBlocks < 200 {
				t.Errorf("table %s has %d data blocks: too few to test the index", tb.FileNum, p.NumDataBlocks)
			}
			if p.IndexPartitions != 0 {
				t.Errorf("table %s (%d data blocks) has a two-level index of %d partitions", tb.FileNum, p.NumDataBlocks, p.IndexPartitions)
			}
		}
	}
	if tables == 0 {
		t.Fatal("the flush wrote no table")
	}
}

// Level 0 gathers several flushes before Pebble compacts it (see
// l0CompactionThreshold): three flushes that each span the whole key range,
// which Pebble's default would compact from the second on, stay three tables
// in level 0.
func TestLevelZeroGathersFlushes(t *testing.T) {
	db, err := pebblestore.OpenDB(t.TempDir(), pebblestore.Options{CacheBytes: 1 << 20}, discard)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	const flushes = 3
	for f := range flushes {
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
	}
	// A compaction Pebble scheduled would have begun by now; give it time
	// to finish so that the check below sees what it left.
	time.Sleep(500 * time.Millisecond)
	m := db.Metrics()
	if n := m.Levels[0].TablesCount; n != flushes {
		t.Errorf("level 0 holds %d tables after %d flushes (%d compactions): want them all, uncompacted", n, flushes, m.Compact.Count)
	}
}
