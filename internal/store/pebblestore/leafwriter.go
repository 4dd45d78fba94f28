package pebblestore

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"slices"
	"strconv"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/objstorage/objstorageprovider"
	"github.com/cockroachdb/pebble/v2/sstable"
	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/sluicehq/sluice/internal/model"
	"github.com/sluicehq/sluice/internal/store"
)

// leavesDir is the directory, inside the store's, where a seal writes a
// stream-day's leaves as a table before the database ingests it.
const leavesDir = "audit-leaves.tmp"

// resetLeavesDir empties the leaves directory of the store in dir, whose
// database is open (and locked) with po: a table found there was never
// ingested.
func resetLeavesDir(dir string, po *pebble.Options) error {
	p := po.FS.PathJoin(dir, leavesDir)
	if err := po.FS.RemoveAll(p); err != nil {
		return fmt.Errorf("empty %s: %w", p, err)
	}
	if err := po.FS.MkdirAll(p, 0o755); err != nil {
		return fmt.Errorf("create %s: %w", p, err)
	}
	return nil
}

// AuditLeafWriter returns a writer of a stream-day's leaves that builds
// them into one table and has the database ingest it on Commit. The
// leaves never pass through the write-ahead log, a memtable, a flush or
// (as their key range is new) a compaction: a seal writes each leaf once.
// Commit returns once the table is durably part of the store.
func (s *Store) AuditLeafWriter(ctx context.Context, tenant, stream string, d model.Day) (store.AuditLeafWriter, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	prefix := leavesPrefix(nil, tenant, stream, d)
	return &leafTable{s: s, name: tenant + "/" + stream + "/" + d.String(), key: prefix, n: len(prefix)}, nil
}

// leafTable is a stream-day's leaves being written as a table to ingest.
// Its file is created with the first chunk.
type leafTable struct {
	s    *Store
	name string // tenant/stream/day, for errors
	path string // the table's file, once created
	w    *sstable.Writer
	key  []byte // the leaves' prefix, then the last chunk's number
	n    int    // length of the prefix
	val  []byte // reused for each chunk's encoding
	done bool
}

var errLeavesDone = errors.New("leaf writer already committed or aborted")

// open creates the table's file.
func (t *leafTable) open() error {
	files := t.s.po.FS
	t.path = files.PathJoin(t.s.dir, leavesDir, strconv.FormatUint(t.s.leafFiles.Add(1), 10)+".sst")
	f, err := files.Create(t.path, vfs.WriteCategoryUnspecified)
	if err != nil {
		return fmt.Errorf("create the leaves table of %s: %w", t.name, err)
	}
	wo := t.s.po.MakeWriterOptions(0, t.s.db.TableFormat())
	// Over half of a leaf is its hash, which does not compress: Snappy
	// cost the seal a tenth of its CPU for little space.
	wo.Compression = sstable.NoCompression
	t.w = sstable.NewWriter(objstorageprovider.NewFileWritable(f), wo)
	return nil
}

func (t *leafTable) Put(ctx context.Context, chunk uint32, leaves []store.AuditLeaf) error {
	if t.done {
		return fmt.Errorf("store leaves of %s: %w", t.name, errLeavesDone)
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if t.w == nil {
		if err := t.open(); err != nil {
			return err
		}
	}
	t.key = binary.BigEndian.AppendUint32(t.key[:t.n], chunk)
	t.val = store.AppendAuditLeaves(slices.Grow(t.val[:0], store.AuditLeavesSize(leaves)), leaves)
	if err := t.w.Set(t.key, t.val); err != nil {
		return fmt.Errorf("write leaves of %s, chunk %d: %w", t.name, chunk, err)
	}
	return nil
}

// Commit finishes the table (synced) and ingests it; the database then
// removes the file from the leaves directory. With no chunk put there is
// no table, and nothing to do.
func (t *leafTable) Commit(ctx context.Context) error {
	if t.done {
		return fmt.Errorf("store leaves of %s: %w", t.name, errLeavesDone)
	}
	t.done = true
	if t.w == nil {
		return ctx.Err()
	}
	if err := t.w.Close(); err != nil {
		t.remove()
		return fmt.Errorf("finish the leaves table of %s: %w", t.name, err)
	}
	if err := t.s.db.Ingest(ctx, []string{t.path}); err != nil {
		t.remove()
		return fmt.Errorf("ingest the leaves table of %s: %w", t.name, err)
	}
	return nil
}

// Abort drops the table. Its writer is closed, which finishes the file,
// before the file is removed: an abort comes only with a failed seal.
func (t *leafTable) Abort() {
	if t.done {
		return
	}
	t.done = true
	if t.w == nil {
		return
	}
	_ = t.w.Close()
	t.remove()
}

func (t *leafTable) remove() {
	if err := t.s.po.FS.Remove(t.path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		t.s.logger.Warn("could not remove an audit leaves table that was not ingested", "path", t.path, "err", err)
	}
}
