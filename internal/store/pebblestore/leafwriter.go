package pebblestore

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"

	"github.com/cockroachdb/pebble/v2/objstorage/objstorageprovider"
	"github.com/cockroachdb/pebble/v2/sstable"
	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/sluicehq/sluice/internal/model"
	"github.com/sluicehq/sluice/internal/store"
)

// leavesDir is the directory, inside the store's, where a seal writes a
// stream-day's leaves as a table before the database ingests it.
const leavesDir = "audit-leaves.tmp"

// resetLeavesDir empties the leaves directory of the store in dir: a
// table found there at open was never ingested.
func resetLeavesDir(dir string) error {
	p := filepath.Join(dir, leavesDir)
	if err := os.RemoveAll(p); err != nil {
		return fmt.Errorf("empty %s: %w", p, err)
	}
	if err := os.Mkdir(p, 0o755); err != nil {
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
	path := filepath.Join(s.dir, leavesDir, strconv.FormatUint(s.leafFiles.Add(1), 10)+".sst")
	f, err := vfs.Default.Create(path, vfs.WriteCategoryUnspecified)
	if err != nil {
		return nil, fmt.Errorf("store leaves of %s/%s/%s: %w", tenant, stream, d, err)
	}
	prefix := leavesPrefix(nil, tenant, stream, d)
	wo := s.po.MakeWriterOptions(0, s.db.TableFormat())
	// Leaves are mostly hashes, which do not compress: trying costs the
	// seal a tenth of its CPU and would save little space.
	wo.Compression = sstable.NoCompression
	return &leafTable{
		s:    s,
		path: path,
		name: tenant + "/" + stream + "/" + d.String(),
		w:    sstable.NewWriter(objstorageprovider.NewFileWritable(f), wo),
		key:  prefix,
		n:    len(prefix),
	}, nil
}

// leafTable is a stream-day's leaves being written as a table to ingest.
type leafTable struct {
	s      *Store
	path   string
	name   string // tenant/stream/day, for errors
	w      *sstable.Writer
	key    []byte // the leaves' prefix, then the last chunk's number
	n      int    // length of the prefix
	val    []byte // reused for each chunk's encoding
	chunks int
	done   bool
}

var errLeavesDone = errors.New("leaf writer already committed or aborted")

func (t *leafTable) Put(ctx context.Context, chunk uint32, leaves []store.AuditLeaf) error {
	if t.done {
		return fmt.Errorf("store leaves of %s: %w", t.name, errLeavesDone)
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	t.key = binary.BigEndian.AppendUint32(t.key[:t.n], chunk)
	t.val = store.AppendAuditLeaves(slices.Grow(t.val[:0], store.AuditLeavesSize(leaves)), leaves)
	if err := t.w.Set(t.key, t.val); err != nil {
		return fmt.Errorf("store leaves of %s, chunk %d: %w", t.name, chunk, err)
	}
	t.chunks++
	return nil
}

// Commit finishes the table (synced) and ingests it; the database then
// removes the file from the leaves directory. With no chunk put it
// ingests nothing.
func (t *leafTable) Commit(ctx context.Context) error {
	if t.done {
		return fmt.Errorf("store leaves of %s: %w", t.name, errLeavesDone)
	}
	t.done = true
	err := t.w.Close()
	if err == nil && t.chunks > 0 {
		err = t.s.db.Ingest(ctx, []string{t.path})
		if err == nil {
			return nil
		}
	}
	t.remove()
	if err != nil {
		return fmt.Errorf("store leaves of %s: %w", t.name, err)
	}
	return nil
}

func (t *leafTable) Abort() {
	if t.done {
		return
	}
	t.done = true
	_ = t.w.Close()
	t.remove()
}

func (t *leafTable) remove() {
	if err := os.Remove(t.path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		t.s.logger.Warn("could not remove an audit leaves table that was not ingested", "path", t.path, "err", err)
	}
}
