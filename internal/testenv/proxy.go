package testenv

import (
	"io"
	"net"
	"sync"
	"testing"
	"time"
)

// Proxy forwards TCP connections from its own loopback address to a real
// server, so that a test can cut a client off that server (Cut) and let it
// back (Restore) without stopping a server other tests share.
type Proxy struct {
	tb     testing.TB
	addr   string
	target string
	mu     sync.Mutex
	ln     net.Listener
	conns  []net.Conn
}

// StartProxy starts a proxy to target on a free loopback port; it is cut
// when tb ends.
func StartProxy(tb testing.TB, target string) *Proxy {
	tb.Helper()
	p := &Proxy{tb: tb, addr: "127.0.0.1:0", target: target}
	p.Restore()
	tb.Cleanup(p.Cut)
	return p
}

// Addr is the proxy's address, the same after Restore.
func (p *Proxy) Addr() string { return p.addr }

// Restore listens again on the proxy's address.
func (p *Proxy) Restore() {
	p.tb.Helper()
	var ln net.Listener
	var err error
	for range 100 { // the port may linger briefly after a cut
		if ln, err = net.Listen("tcp", p.addr); err == nil {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err != nil {
		p.tb.Fatal(err)
	}
	p.mu.Lock()
	p.addr, p.ln = ln.Addr().String(), ln
	p.mu.Unlock()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			u, err := net.DialTimeout("tcp", p.target, 5*time.Second)
			if err != nil {
				_ = c.Close()
				continue
			}
			p.mu.Lock()
			if p.ln != ln { // cut since Accept returned: this pair is cut too
				p.mu.Unlock()
				_ = c.Close()
				_ = u.Close()
				continue
			}
			p.conns = append(p.conns, c, u)
			p.mu.Unlock()
			go func() { _, _ = io.Copy(u, c); _ = u.Close() }()
			go func() { _, _ = io.Copy(c, u); _ = c.Close() }()
		}
	}()
}

// Cut closes the listener and every connection through it.
func (p *Proxy) Cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ln != nil {
		_ = p.ln.Close()
		p.ln = nil
	}
	for _, c := range p.conns {
		_ = c.Close()
	}
	p.conns = nil
}
