package cqlstore_test

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/store/cqlstore"
	"github.com/sluicehq/sluice/internal/testenv"
)

// The tests run against a real Cassandra (bash scripts/servers.sh up
// cassandra), at SLUICE_TEST_CASSANDRA or 127.0.0.1:9042. TestMain creates
// one keyspace with a unique name for the whole test binary (schema changes
// are slow) and drops it at the end; tests keep apart by tenant names.

var (
	testCfg    cqlstore.Config
	reachable  error // why Cassandra cannot be used, nil if it can
	discard    = slog.New(slog.DiscardHandler)
	keyspaceOK bool
)

func cassandraAddr() string {
	if a := os.Getenv("SLUICE_TEST_CASSANDRA"); a != "" {
		return a
	}
	return "127.0.0.1:9042"
}

func TestMain(m *testing.M) {
	os.Exit(testMain(m))
}

func testMain(m *testing.M) int {
	addr := cassandraAddr()
	cfg := cqlstore.DefaultConfig()
	cfg.Hosts = []string{addr}
	cfg.Keyspace = fmt.Sprintf("sluice_test_%d_%d", os.Getpid(), time.Now().UnixNano()%1_000_000)
	cfg.ReplicationClass, cfg.ReplicationFactor = "SimpleStrategy", 1
	cfg.Timeout = 30 * time.Second
	testCfg = cfg
	conn, err := net.DialTimeout("tcp", addr, 2*time.Second)
	if err != nil {
		reachable = err
		return m.Run()
	}
	_ = conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if err := cqlstore.Migrate(ctx, cfg, discard); err != nil {
		reachable = fmt.Errorf("migrate: %w", err)
		return m.Run()
	}
	keyspaceOK = true
	code := m.Run()
	if err := cqlstore.DropKeyspace(context.Background(), cfg, discard); err != nil {
		fmt.Fprintln(os.Stderr, "drop test keyspace:", err)
	}
	return code
}

// requireCassandra skips the test when Cassandra is not reachable, or fails
// it under CI=true, where a missing server is an error.
func requireCassandra(t testing.TB) {
	t.Helper()
	if reachable == nil {
		return
	}
	msg := fmt.Sprintf("Cassandra at %s is not usable (%v); start it with: bash scripts/servers.sh up cassandra", cassandraAddr(), reachable)
	testenv.Missing(t, msg)
}

// openStore opens a store on the test keyspace, closed at the end of t.
func openStore(t testing.TB, mod func(*cqlstore.Config)) *cqlstore.Store {
	t.Helper()
	requireCassandra(t)
	cfg := testCfg
	if mod != nil {
		mod(&cfg)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	st, err := cqlstore.Open(ctx, cfg, discard, nil)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() {
		if err := st.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return st
}

// unique returns a name no other test uses, for tenants and series.
func unique(t testing.TB) string {
	return strings.NewReplacer("/", "-", " ", "_").Replace(t.Name()) + fmt.Sprintf("-%d", time.Now().UnixNano()%1_000_000_000)
}
