package broker

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	mqtt "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/hooks/storage"
	"github.com/mochi-mqtt/server/v2/packets"
	"go.etcd.io/bbolt"
)

func testLogger() *slog.Logger {
	if testing.Verbose() {
		return slog.New(slog.NewTextHandler(os.Stderr, nil))
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

// startBroker runs a broker that lets anonymous clients publish to any
// topic under "devices/" and hands messages to receive.
func startBroker(t *testing.T, dir string, receive ReceiveFunc) *Broker {
	t.Helper()
	b, err := Start(Config{Enabled: true, Listen: "127.0.0.1:0", AllowAnonymous: true}, Options{
		Dir:       dir,
		TopicOf:   func(u User) string { return "devices/" + u.DeviceID },
		Anonymous: func(topic string) bool { return len(topic) > 8 && topic[:8] == "devices/" },
		Receive:   receive,
	}, testLogger())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	return b
}

// rawClient speaks MQTT 3.1.1 (version 4) or 5 on a bare connection, so a
// test sees exactly which packets the broker sends.
type rawClient struct {
	conn    net.Conn
	r       *bufio.Reader
	version byte
}

func dialRaw(t *testing.T, addr string, version byte, id string) *rawClient {
	t.Helper()
	conn, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	return connectRaw(t, conn, version, id)
}

// connectRaw sends CONNECT on conn and expects a CONNACK accepting it.
func connectRaw(t *testing.T, conn net.Conn, version byte, id string) *rawClient {
	t.Helper()
	t.Cleanup(func() { _ = conn.Close() })
	c := &rawClient{conn: conn, r: bufio.NewReader(conn), version: version}
	pk := packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Connect}, ProtocolVersion: version,
		Connect: packets.ConnectParams{ProtocolName: []byte("MQTT"), Clean: true, Keepalive: 60, ClientIdentifier: id}}
	var buf bytes.Buffer
	if err := pk.ConnectEncode(&buf); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Write(buf.Bytes()); err != nil {
		t.Fatal(err)
	}
	typ, body, err := c.read()
	if err != nil || typ != packets.Connack || len(body) < 2 || body[1] != 0 {
		t.Fatalf("connect (MQTT version %d): got packet type %d %x, err %v; want a CONNACK accepting it", version, typ, body, err)
	}
	return c
}

func (c *rawClient) publish(t *testing.T, topic, payload string, id uint16) {
	t.Helper()
	pk := packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Publish, Qos: 1}, ProtocolVersion: c.version,
		TopicName: topic, PacketID: id, Payload: []byte(payload)}
	var buf bytes.Buffer
	if err := pk.PublishEncode(&buf); err != nil {
		t.Fatal(err)
	}
	if _, err := c.conn.Write(buf.Bytes()); err != nil {
		t.Fatal(err)
	}
}

// read returns the next packet's type and body. The deadline only stops a
// broken test from hanging.
func (c *rawClient) read() (byte, []byte, error) {
	_ = c.conn.SetReadDeadline(time.Now().Add(30 * time.Second))
	h, err := c.r.ReadByte()
	if err != nil {
		return 0, nil, err
	}
	n, mul := 0, 1
	for {
		b, err := c.r.ReadByte()
		if err != nil {
			return 0, nil, err
		}
		n += int(b&0x7f) * mul
		if b&0x80 == 0 {
			break
		}
		mul *= 128
	}
	body := make([]byte, n)
	if _, err := io.ReadFull(c.r, body); err != nil {
		return 0, nil, err
	}
	return h >> 4, body, nil
}

// untilClosed reads packets until the broker closes the connection.
func (c *rawClient) untilClosed(t *testing.T) []packet {
	t.Helper()
	var out []packet
	for {
		typ, body, err := c.read()
		if errors.Is(err, io.EOF) || errors.Is(err, net.ErrClosed) || (err != nil && !isTimeout(err)) {
			return out
		}
		if err != nil {
			t.Fatalf("the broker kept the connection open: %v (packets so far %v)", err, out)
		}
		out = append(out, packet{typ, body})
	}
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

type packet struct {
	typ  byte
	body []byte
}

func (p packet) String() string { return fmt.Sprintf("type %d %x", p.typ, p.body) }

// The publish hook: the device is acknowledged only when Receive stored the
// message; otherwise it gets no PUBACK and its connection is closed (MQTT
// 5: after a DISCONNECT naming the reason), and a broker closing while a
// message is being stored does not wait for the store.
func TestPublishHook(t *testing.T) {
	errStore := errors.New("store unavailable")
	tests := []struct {
		name string
		// receive is the store's behaviour; started is closed when called.
		receive func(ctx context.Context, started chan<- struct{}) error
		// closeBroker closes the broker once Receive started.
		closeBroker bool
		wantAck     bool
		wantReason  byte // MQTT 5 DISCONNECT reason, when not acknowledged
	}{
		{name: "stored", receive: func(context.Context, chan<- struct{}) error { return nil }, wantAck: true},
		{name: "store fails", receive: func(context.Context, chan<- struct{}) error { return errStore }, wantReason: packets.ErrServerBusy.Code},
		{name: "shutdown while storing", closeBroker: true, wantReason: packets.ErrServerShuttingDown.Code,
			receive: func(ctx context.Context, started chan<- struct{}) error {
				close(started)
				<-ctx.Done() // a store that never answers
				return ctx.Err()
			}},
	}
	for _, tt := range tests {
		for _, version := range []byte{4, 5} {
			t.Run(fmt.Sprintf("%s/mqtt%d", tt.name, version), func(t *testing.T) {
				var mu sync.Mutex
				var got []string
				started := make(chan struct{})
				b := startBroker(t, t.TempDir(), func(ctx context.Context, topic string, payload []byte) error {
					mu.Lock()
					got = append(got, topic+" "+string(payload))
					mu.Unlock()
					return tt.receive(ctx, started)
				})
				c := dialRaw(t, b.Addr(), version, "dev-1")
				c.publish(t, "devices/dev-1", `{"ts":1,"metrics":{"v":1}}`, 7)
				if tt.closeBroker {
					<-started
					closed := make(chan error, 1)
					go func() { closed <- b.Close() }()
					select {
					case err := <-closed:
						if err != nil {
							t.Fatal(err)
						}
					case <-time.After(30 * time.Second):
						t.Fatal("Close hangs while a message is being stored")
					}
				}
				var pks []packet
				if tt.wantAck {
					typ, body, err := c.read()
					if err != nil {
						t.Fatal(err)
					}
					pks = append(pks, packet{typ, body})
				} else {
					pks = c.untilClosed(t)
				}
				acked := slices.ContainsFunc(pks, func(p packet) bool {
					return p.typ == packets.Puback && len(p.body) >= 2 && p.body[0] == 0 && p.body[1] == 7
				})
				if acked != tt.wantAck {
					t.Errorf("acknowledged = %v, want %v (packets from the broker: %v)", acked, tt.wantAck, pks)
				}
				if !tt.wantAck && version == 5 {
					if !slices.ContainsFunc(pks, func(p packet) bool {
						return p.typ == packets.Disconnect && len(p.body) >= 1 && p.body[0] == tt.wantReason
					}) {
						t.Errorf("MQTT 5 client got %v, want a DISCONNECT with reason %#x", pks, tt.wantReason)
					}
				}
				mu.Lock()
				defer mu.Unlock()
				if want := []string{`devices/dev-1 {"ts":1,"metrics":{"v":1}}`}; !slices.Equal(got, want) {
					t.Errorf("Receive got %q, want %q", got, want)
				}
			})
		}
	}
}

// A publish the ACL refuses never reaches Receive.
func TestPublishHookACL(t *testing.T) {
	var calls int
	var mu sync.Mutex
	b := startBroker(t, t.TempDir(), func(context.Context, string, []byte) error {
		mu.Lock()
		calls++
		mu.Unlock()
		return nil
	})
	c := dialRaw(t, b.Addr(), 5, "dev-1")
	c.publish(t, "elsewhere/dev-1", `{}`, 3)
	typ, body, err := c.read()
	if err != nil || typ != packets.Puback || len(body) < 3 || body[2] != packets.ErrNotAuthorized.Code {
		t.Errorf("publish outside the ACL: got type %d %x, err %v; want PUBACK not authorized", typ, body, err)
	}
	mu.Lock()
	defer mu.Unlock()
	if calls != 0 {
		t.Errorf("Receive called %d times for a refused publish", calls)
	}
}

// writeLegacyStore writes a session store as the gateways before the
// publish hook left it: messages queued for the gateway's subscriber, and
// a device's QoS 2 receipt that is not a message.
func writeLegacyStore(t *testing.T, dir string, msgs ...storage.Message) {
	t.Helper()
	db, err := bbolt.Open(filepath.Join(dir, legacySessions), 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	err = db.Update(func(tx *bbolt.Tx) error {
		bk, err := tx.CreateBucketIfNotExists([]byte(legacyBucket))
		if err != nil {
			return err
		}
		if err := bk.Put([]byte("CL_sluice-gw"), []byte(`{"id":"sluice-gw"}`)); err != nil {
			return err
		}
		for _, m := range msgs {
			v, err := m.MarshalBinary()
			if err != nil {
				return err
			}
			if err := bk.Put([]byte(m.ID), v); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// What an older gateway's broker still held for it is stored at start,
// once; a store that fails stops the start and keeps the file.
func TestDrainLegacySessions(t *testing.T) {
	msgs := []storage.Message{
		{ID: "IFM_sluice-gw:1", T: storage.InflightKey, Client: "sluice-gw", TopicName: "devices/a",
			Payload: []byte("one"), FixedHeader: packets.FixedHeader{Type: packets.Publish, Qos: 1}, PacketID: 1},
		{ID: "IFM_sluice-gw:2", T: storage.InflightKey, Client: "sluice-gw", TopicName: "devices/b",
			Payload: []byte("two"), FixedHeader: packets.FixedHeader{Type: packets.Publish, Qos: 1}, PacketID: 2},
		{ID: "IFM_dev-9:5", T: storage.InflightKey, Client: "dev-9", FixedHeader: packets.FixedHeader{Type: packets.Pubrec}, PacketID: 5},
	}
	dir := t.TempDir()
	writeLegacyStore(t, dir, msgs...)

	fail := errors.New("store down")
	if _, err := Start(Config{Enabled: true, Listen: "127.0.0.1:0", AllowAnonymous: true}, Options{
		Dir: dir, TopicOf: func(User) string { return "" }, Anonymous: func(string) bool { return true },
		Receive: func(context.Context, string, []byte) error { return fail },
	}, testLogger()); !errors.Is(err, fail) {
		t.Fatalf("start with a failing store: err = %v, want %v", err, fail)
	}
	if _, err := os.Stat(filepath.Join(dir, legacySessions)); err != nil {
		t.Fatalf("the old session store is gone after a failed drain: %v", err)
	}

	var got []string
	startBroker(t, dir, func(_ context.Context, topic string, payload []byte) error {
		got = append(got, topic+" "+string(payload))
		return nil
	})
	slices.Sort(got)
	if want := []string{"devices/a one", "devices/b two"}; !slices.Equal(got, want) {
		t.Errorf("drained %q, want %q", got, want)
	}
	if _, err := os.Stat(filepath.Join(dir, legacySessions)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the old session store is still in place after the drain (err %v)", err)
	}
	var again []string
	startBroker(t, dir, func(_ context.Context, topic string, payload []byte) error {
		again = append(again, topic+" "+string(payload))
		return nil
	})
	if len(again) != 0 {
		t.Errorf("a second start drained %q again", again)
	}
}

// A device's will is never retained: mochi publishes it past the ACL and
// the store hook, so a retained copy would sit in memory on any topic.
func TestWillNotRetained(t *testing.T) {
	h := &storeHook{}
	if !h.Provides(mqtt.OnWill) {
		t.Fatal("the store hook does not see wills")
	}
	w, err := h.OnWill(nil, mqtt.Will{TopicName: "anything/at/all", Payload: []byte("offline"), Retain: true})
	if err != nil || w.Retain {
		t.Errorf("OnWill = retain %v, %v; want the will unretained", w.Retain, err)
	}
}
