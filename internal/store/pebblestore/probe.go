package pebblestore

import (
	"context"
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"time"
)

// ProbeFile is the file Probe writes (and removes) in the store's directory.
const ProbeFile = ".sluice-probe"

// probeKey is the one key Probe writes; its first byte is no table's, so no
// scan ever meets it.
var probeKey = []byte("~probe")

// Probe checks that the store takes a durable write now, for readiness: a
// small file is written, synced and removed in its directory (a full or
// read-only file system fails here), then one key of its own is written
// through the write-ahead log with a sync (a store that is stalled, e.g.
// behind on compactions, makes it slow). The write cannot be interrupted, so
// Probe returns only once it is done, whatever ctx says: the caller bounds
// its own wait, and must not start another Probe before this one returns
// (readiness.Probe does both), or a hung disk would pile up probes. Do not
// call it after Close.
func (s *Store) Probe(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	return s.probe()
}

func (s *Store) probe() error {
	name := filepath.Join(s.dir, ProbeFile)
	f, err := os.OpenFile(name, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o600)
	if err != nil {
		return fmt.Errorf("data directory not writable: %w", err)
	}
	now := binary.BigEndian.AppendUint64(nil, uint64(time.Now().UnixNano()))
	_, err = f.Write(now)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		_ = os.Remove(name)
		return fmt.Errorf("data directory not writable: %w", err)
	}
	if err := os.Remove(name); err != nil {
		return fmt.Errorf("data directory: %w", err)
	}
	if err := s.db.Set(probeKey, now, s.wo); err != nil {
		return fmt.Errorf("write: %w", err)
	}
	return nil
}
