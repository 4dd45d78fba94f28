// Package testenv is what integration tests share about the real servers
// that scripts/servers.sh runs: how a test reacts when one is missing (it
// skips, saying how to start it, except under CI=true, where every server
// must be up and a missing one fails the test), and the lock that keeps a
// test that stops ClickHouse apart from the tests that use it. Only tests
// import it.
package testenv

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// Missing stops tb because its server is unusable: msg says why and how to
// start it. Under CI=true it fails tb; elsewhere it skips.
func Missing(tb testing.TB, msg string) {
	tb.Helper()
	if os.Getenv("CI") == "true" {
		tb.Fatal(msg)
	}
	tb.Skip(msg)
}

// Require stops tb (see Missing) unless something accepts TCP connections
// on addr. server is the scripts/servers.sh name: cassandra, clickhouse or
// mosquitto.
func Require(tb testing.TB, server, addr string) {
	tb.Helper()
	c, err := net.DialTimeout("tcp", addr, 2*time.Second)
	if err == nil {
		_ = c.Close()
		return
	}
	Missing(tb, fmt.Sprintf("%s is not reachable on %s (%v); start it with: bash scripts/servers.sh up %s", server, addr, err, server))
}

// LockClickHouse holds, until tb ends, a lock on the shared test ClickHouse:
// shared by tests that only use it, exclusive for a test that stops and
// restarts it, so that no test of another package sees it go away.
func LockClickHouse(tb testing.TB, exclusive bool) {
	tb.Helper()
	f, err := os.OpenFile(filepath.Join(os.TempDir(), "sluice-clickhouse-test.lock"), os.O_CREATE|os.O_RDWR, 0o666)
	if err != nil {
		tb.Fatal(err)
	}
	how := syscall.LOCK_SH
	if exclusive {
		how = syscall.LOCK_EX
	}
	if err := syscall.Flock(int(f.Fd()), how); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = f.Close() })
}

// FreeAddr returns a loopback address that nothing listens on, so that a
// server can be started (and started again) where its clients expect it.
func FreeAddr(tb testing.TB) string {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close()
	return addr
}
