package broker

import (
	"bytes"
	"encoding/binary"
	"encoding/gob"
	"fmt"
	"sync"
	"time"

	mqtt "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/packets"
	"go.etcd.io/bbolt"
)

// journal closes a loss window of mochi (v2.7.9): it acknowledges a QoS 1
// PUBLISH to the device before it hands the message to the subscribers'
// sessions, where the storage hook makes it durable. A crash in between
// loses a message the device was told the broker holds. The journal writes
// each QoS 1 message a device publishes to its own bbolt file before the
// acknowledgement (OnPublish runs before it), removes it once the message
// reached the subscribers' sessions (OnPublished), and publishes again, at
// start-up, what a crash left in it. A message replayed that had already
// reached a session is delivered twice, which at-least-once allows.
type journal struct {
	mqtt.HookBase
	db      *bbolt.DB
	mu      sync.Mutex
	seq     uint64
	pending map[string]uint64 // client id and packet id -> journal key
}

var journalBucket = []byte("published")

type journalRecord struct {
	Topic   string
	Payload []byte
	QoS     byte
}

func openJournal(path string) (*journal, error) {
	db, err := bbolt.Open(path, 0o600, &bbolt.Options{Timeout: 2 * time.Second})
	if err != nil {
		return nil, fmt.Errorf("open broker journal %s: %w", path, err)
	}
	// Batch groups the writes of concurrent publishers; do not let a lone
	// publisher wait the default 10 ms for company on every message.
	db.MaxBatchDelay = 500 * time.Microsecond
	j := &journal{db: db, pending: map[string]uint64{}}
	err = db.Update(func(tx *bbolt.Tx) error {
		b, err := tx.CreateBucketIfNotExists(journalBucket)
		if err == nil {
			j.seq = b.Sequence()
		}
		return err
	})
	if err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("open broker journal %s: %w", path, err)
	}
	return j, nil
}

func (j *journal) ID() string { return "sluice-journal" }

func (j *journal) Provides(b byte) bool { return b == mqtt.OnPublish || b == mqtt.OnPublished }

func pendingKey(cl *mqtt.Client, pk packets.Packet) string {
	return cl.ID + "\x00" + pk.FormatID()
}

// OnPublish makes a device's QoS 1 or 2 message durable before the broker
// acknowledges it. If that fails, the message is refused (not acknowledged)
// and the device sends it again.
func (j *journal) OnPublish(cl *mqtt.Client, pk packets.Packet) (packets.Packet, error) {
	if cl.Net.Inline || pk.FixedHeader.Qos == 0 {
		return pk, nil
	}
	var buf bytes.Buffer
	if err := gob.NewEncoder(&buf).Encode(journalRecord{Topic: pk.TopicName, Payload: pk.Payload, QoS: pk.FixedHeader.Qos}); err != nil {
		return pk, packets.ErrRejectPacket
	}
	var key uint64
	err := j.db.Batch(func(tx *bbolt.Tx) error {
		b := tx.Bucket(journalBucket)
		n, err := b.NextSequence()
		if err != nil {
			return err
		}
		key = n
		return b.Put(binary.BigEndian.AppendUint64(nil, n), buf.Bytes())
	})
	if err != nil {
		j.Log.Error("embedded broker: journal a published message; refusing it", "client", cl.ID, "topic", pk.TopicName, "err", err)
		return pk, packets.ErrRejectPacket
	}
	j.mu.Lock()
	j.pending[pendingKey(cl, pk)] = key
	j.mu.Unlock()
	return pk, nil
}

// OnPublished runs once the message is in the subscribers' sessions.
func (j *journal) OnPublished(cl *mqtt.Client, pk packets.Packet) {
	if cl.Net.Inline || pk.FixedHeader.Qos == 0 {
		return
	}
	k := pendingKey(cl, pk)
	j.mu.Lock()
	key, ok := j.pending[k]
	delete(j.pending, k)
	j.mu.Unlock()
	if !ok {
		return
	}
	err := j.db.Batch(func(tx *bbolt.Tx) error {
		return tx.Bucket(journalBucket).Delete(binary.BigEndian.AppendUint64(nil, key))
	})
	if err != nil {
		j.Log.Warn("embedded broker: clear a journalled message (it will be delivered again after a restart)", "err", err)
	}
}

// replay publishes again the messages a crash left in the journal, then
// clears them. It runs after the stored sessions were loaded, before
// clients connect.
func (j *journal) replay(srv *mqtt.Server) (int, error) {
	var recs []journalRecord
	var keys [][]byte
	err := j.db.View(func(tx *bbolt.Tx) error {
		return tx.Bucket(journalBucket).ForEach(func(k, v []byte) error {
			var r journalRecord
			if err := gob.NewDecoder(bytes.NewReader(v)).Decode(&r); err != nil {
				return fmt.Errorf("decode journal record %x: %w", k, err)
			}
			recs = append(recs, r)
			keys = append(keys, bytes.Clone(k))
			return nil
		})
	})
	if err != nil {
		return 0, err
	}
	for _, r := range recs {
		if err := srv.Publish(r.Topic, r.Payload, false, r.QoS); err != nil {
			return 0, fmt.Errorf("publish journalled message to %s: %w", r.Topic, err)
		}
	}
	err = j.db.Update(func(tx *bbolt.Tx) error {
		b := tx.Bucket(journalBucket)
		for _, k := range keys {
			if err := b.Delete(k); err != nil {
				return err
			}
		}
		return nil
	})
	return len(recs), err
}

func (j *journal) Stop() error { return j.db.Close() }
