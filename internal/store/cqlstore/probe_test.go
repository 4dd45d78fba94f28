package cqlstore_test

import (
	"context"
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/store/cqlstore"
)

// proxy forwards TCP connections from its own address to target until cut.
type proxy struct {
	t      *testing.T
	addr   string
	target string
	mu     sync.Mutex
	ln     net.Listener
	conns  []net.Conn
}

func (p *proxy) start() {
	p.t.Helper()
	var ln net.Listener
	var err error
	for range 100 { // the port may linger briefly after a cut
		if ln, err = net.Listen("tcp", p.addr); err == nil {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err != nil {
		p.t.Fatal(err)
	}
	p.addr = ln.Addr().String()
	p.mu.Lock()
	p.ln = ln
	p.mu.Unlock()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			u, err := net.Dial("tcp", p.target)
			if err != nil {
				_ = c.Close()
				continue
			}
			p.mu.Lock()
			p.conns = append(p.conns, c, u)
			p.mu.Unlock()
			go func() { _, _ = io.Copy(u, c); _ = u.Close() }()
			go func() { _, _ = io.Copy(c, u); _ = c.Close() }()
		}
	}()
}

// cut closes the listener and every connection through it.
func (p *proxy) cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	_ = p.ln.Close()
	for _, c := range p.conns {
		_ = c.Close()
	}
	p.conns = nil
}

func waitProbe(t *testing.T, st *cqlstore.Store, wantErr bool) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		err := st.Probe(ctx)
		cancel()
		if (err != nil) == wantErr {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("Probe = %v after 60s, want error: %v", err, wantErr)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestProbeThroughProxy runs the readiness probe against the real
// Cassandra behind a TCP proxy that is cut and restored (the shared
// Cassandra itself is never stopped).
func TestProbeThroughProxy(t *testing.T) {
	requireCassandra(t)
	p := &proxy{t: t, addr: "127.0.0.1:0", target: cassandraAddr()}
	p.start()
	defer p.cut()
	st := openStore(t, func(c *cqlstore.Config) {
		c.Hosts = []string{p.addr}
		c.Timeout = 2 * time.Second
	})
	waitProbe(t, st, false)
	p.cut()
	waitProbe(t, st, true)
	p.start()
	waitProbe(t, st, false)
}
