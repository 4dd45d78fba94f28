package broker

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/mochi-mqtt/server/v2/hooks/storage"
	"github.com/mochi-mqtt/server/v2/packets"
	"go.etcd.io/bbolt"
)

// legacySessions is the session store that gateways kept under Options.Dir
// before the broker stored messages in its publish hook. The messages it
// holds for the gateway's subscriber were acknowledged to devices already:
// they must be stored before anything else happens.
const (
	legacySessions = "sessions.bolt"
	legacyBucket   = "sluice"
)

// drainLegacySessions hands every message still queued in a legacy session
// store to receive, then renames the file (.drained) so that it is not read
// again. A failure leaves the file in place: the next start tries again, and
// messages stored twice overwrite themselves.
func drainLegacySessions(ctx context.Context, dir string, receive ReceiveFunc, logger *slog.Logger) error {
	path := filepath.Join(dir, legacySessions)
	if _, err := os.Stat(path); errors.Is(err, fs.ErrNotExist) {
		return nil
	} else if err != nil {
		return fmt.Errorf("inspect old broker session store: %w", err)
	}
	msgs, err := readLegacyMessages(path)
	if err != nil {
		return err
	}
	for _, m := range msgs {
		if err := receive(ctx, m.TopicName, m.Payload); err != nil {
			return fmt.Errorf("store message %s of the old broker session store %s: %w", m.ID, path, err)
		}
	}
	if err := os.Rename(path, path+".drained"); err != nil {
		return fmt.Errorf("set aside the drained broker session store: %w", err)
	}
	logger.Info("stored the messages an older gateway's broker still held for it; its session store is kept as "+legacySessions+".drained",
		"messages", len(msgs), "path", path)
	return nil
}

// readLegacyMessages returns the messages in flight or queued (PUBLISH
// packets) of a mochi bbolt store.
func readLegacyMessages(path string) ([]storage.Message, error) {
	db, err := bbolt.Open(path, 0o600, &bbolt.Options{Timeout: 2 * time.Second, ReadOnly: true})
	if err != nil {
		return nil, fmt.Errorf("open old broker session store %s: %w", path, err)
	}
	defer db.Close()
	var msgs []storage.Message
	err = db.View(func(tx *bbolt.Tx) error {
		b := tx.Bucket([]byte(legacyBucket))
		if b == nil {
			return nil
		}
		return b.ForEach(func(k, v []byte) error {
			if !bytes.HasPrefix(k, []byte(storage.InflightKey+"_")) {
				return nil
			}
			var m storage.Message
			if err := m.UnmarshalBinary(v); err != nil {
				return fmt.Errorf("record %q: %w", k, err)
			}
			if m.FixedHeader.Type == packets.Publish {
				msgs = append(msgs, m)
			}
			return nil
		})
	})
	if err != nil {
		return nil, fmt.Errorf("read old broker session store %s: %w", path, err)
	}
	return msgs, nil
}
