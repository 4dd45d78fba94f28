package mqttingest

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	mqtt "github.com/eclipse/paho.mqtt.golang"
	"golang.org/x/net/proxy"
)

// dialBroker opens the network connection to one broker URL, as paho would
// (tcp and mqtt through any proxy of the environment, TLS for ssl, tls and
// mqtts, websockets for ws and wss).
func dialBroker(u *url.URL, o mqtt.ClientOptions) (net.Conn, error) {
	d := &net.Dialer{Timeout: o.ConnectTimeout}
	switch u.Scheme {
	case "tcp", "mqtt":
		return proxy.FromEnvironmentUsing(d).Dial("tcp", u.Host)
	case "ssl", "tls", "mqtts":
		if os.Getenv("all_proxy") == "" {
			return (&tls.Dialer{NetDialer: d, Config: o.TLSConfig}).Dial("tcp", u.Host)
		}
		// Through the proxy of the environment, then TLS over it.
		c, err := proxy.FromEnvironmentUsing(d).Dial("tcp", u.Host)
		if err != nil {
			return nil, err
		}
		cfg := &tls.Config{}
		if o.TLSConfig != nil {
			cfg = o.TLSConfig.Clone()
		}
		if cfg.ServerName == "" {
			cfg.ServerName = u.Hostname()
		}
		tc := tls.Client(c, cfg)
		ctx := context.Background()
		if o.ConnectTimeout > 0 {
			var cancel context.CancelFunc
			ctx, cancel = context.WithTimeout(ctx, o.ConnectTimeout)
			defer cancel()
		}
		if err := tc.HandshakeContext(ctx); err != nil {
			_ = c.Close()
			return nil, err
		}
		return tc, nil
	case "ws", "wss":
		target := *u
		target.User = nil
		var tc *tls.Config
		if u.Scheme == "wss" {
			tc = o.TLSConfig
		}
		return mqtt.NewWebsocket(target.String(), tc, o.ConnectTimeout, o.HTTPHeaders, o.WebsocketOptions)
	}
	return nil, fmt.Errorf("mqtt: no dialer for scheme %q", u.Scheme)
}

// Sizes of a bufConn's buffers: reads, and writes queued before Write waits.
const (
	connReadBuffer  = 64 << 10
	connWriteBuffer = 64 << 10
)

// errConnClosed is what Write returns once the connection was closed.
var errConnClosed = errors.New("mqtt: connection closed")

// bufConn cuts the system calls that paho makes per packet. paho reads a
// packet's fixed header a byte at a time and writes every packet (each
// PUBACK) with its own call; at tens of thousands of messages a second
// those calls cost more CPU than decoding the messages. bufConn reads
// through a buffer, and Write only queues the bytes: one goroutine writes
// out whatever was queued while its previous write was in progress, so
// acknowledgements that come together leave in one call and a lone one
// leaves at once. Each of its writes has the write timeout; paho's own
// write deadlines are not needed and are ignored. Close sends what is
// queued first (a DISCONNECT), for at most closeGrace.
type bufConn struct {
	net.Conn
	r       *bufio.Reader
	timeout time.Duration

	mu      sync.Mutex
	room    *sync.Cond // queue drained, or err set
	queued  []byte
	spare   []byte
	writing bool
	err     error // the first write error, or errConnClosed
	wake    chan struct{}
	done    chan struct{}
	closing sync.Once
	closed  atomic.Bool // Close was called, or a write failed
}

func newBufConn(c net.Conn, writeTimeout time.Duration) *bufConn {
	b := &bufConn{
		Conn: c, r: bufio.NewReaderSize(c, connReadBuffer), timeout: writeTimeout,
		wake: make(chan struct{}, 1), done: make(chan struct{}),
	}
	b.room = sync.NewCond(&b.mu)
	go b.writer()
	return b
}

func (b *bufConn) Read(p []byte) (int, error) {
	if b.closed.Load() {
		return 0, errConnClosed
	}
	return b.r.Read(p)
}

// Write queues p; it waits only while the queue is full.
func (b *bufConn) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for b.err == nil && len(b.queued) > 0 && len(b.queued)+len(p) > connWriteBuffer {
		b.room.Wait()
	}
	if b.err != nil {
		return 0, b.err
	}
	b.queued = append(b.queued, p...)
	select {
	case b.wake <- struct{}{}:
	default:
	}
	return len(p), nil
}

// writer writes out the queue until the connection fails or is closed.
func (b *bufConn) writer() {
	for {
		select {
		case <-b.wake:
		case <-b.done:
			return
		}
		// Let the goroutine that woke us queue what it has at hand (a run
		// of acknowledgements) before writing.
		runtime.Gosched()
		b.mu.Lock()
		for len(b.queued) > 0 && b.err == nil {
			out := b.queued
			b.queued, b.spare = b.spare[:0], nil
			b.writing = true
			b.room.Broadcast() // the queue has room again
			b.mu.Unlock()
			err := b.Conn.SetWriteDeadline(time.Now().Add(b.timeout))
			if err == nil {
				_, err = b.Conn.Write(out)
			}
			b.mu.Lock()
			b.writing = false
			b.spare = out[:0]
			failed := err != nil && b.err == nil
			if failed {
				b.err = err
			}
			b.room.Broadcast()
			if failed {
				// The reader sees the failure too, and paho reconnects.
				// Closed without the lock: a TLS close may block to send
				// its alert.
				b.mu.Unlock()
				b.closed.Store(true)
				_ = b.Conn.Close()
				b.mu.Lock()
			}
		}
		b.mu.Unlock()
	}
}

// SetWriteDeadline is a no-op: writes are timed by the writer.
func (b *bufConn) SetWriteDeadline(time.Time) error { return nil }

// SetDeadline sets the read deadline only (see SetWriteDeadline).
func (b *bufConn) SetDeadline(t time.Time) error { return b.Conn.SetReadDeadline(t) }

// closeGrace bounds how long Close waits for the queue to be written out
// (a DISCONNECT after a run of acknowledgements): a broker that stopped
// reading must not hold a lost connection open for the whole write timeout.
const closeGrace = time.Second

// Close writes out what is queued, for at most closeGrace, then closes the
// connection. Reads fail from then on, even of bytes already buffered:
// paho must not route messages whose acknowledgements can no longer leave.
func (b *bufConn) Close() error {
	b.closed.Store(true)
	stop := time.AfterFunc(min(closeGrace, b.timeout), func() {
		// Abort a write that is stuck; the writer then records the error.
		_ = b.Conn.SetWriteDeadline(time.Now())
		b.mu.Lock()
		if b.err == nil && !b.writing {
			b.err = errConnClosed // nothing in progress: drop the queue
		}
		b.room.Broadcast()
		b.mu.Unlock()
	})
	defer stop.Stop()
	b.mu.Lock()
	for b.err == nil && (len(b.queued) > 0 || b.writing) {
		b.room.Wait()
	}
	if b.err == nil {
		b.err = errConnClosed
	}
	b.room.Broadcast()
	b.mu.Unlock()
	var err error
	b.closing.Do(func() {
		close(b.done)
		err = b.Conn.Close()
	})
	return err
}
