package retention_test

import (
	"context"
	"fmt"
	"net"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/store/cqlstore"
	"github.com/sluicehq/sluice/internal/testenv"
)

// The Cassandra tests run against a real server (bash scripts/servers.sh up
// cassandra) at SLUICE_TEST_CASSANDRA or 127.0.0.1:9042, in a keyspace of
// their own, created by the first test that needs it and dropped by TestMain
// at the end. The tests of this
// package run one after the other and keep apart by tenant names.

var (
	cqlCfg     cqlstore.Config
	cqlOnce    sync.Once
	cqlUsable  error // why Cassandra cannot be used; nil when it can
	cqlCreated bool
)

func cassandraAddr() string {
	if a := os.Getenv("SLUICE_TEST_CASSANDRA"); a != "" {
		return a
	}
	return "127.0.0.1:9042"
}

func TestMain(m *testing.M) {
	code := m.Run()
	if cqlCreated {
		if err := cqlstore.DropKeyspace(context.Background(), cqlCfg, discard); err != nil {
			fmt.Fprintln(os.Stderr, "drop test keyspace:", err)
		}
	}
	os.Exit(code)
}

// setupCassandra creates the test keyspace the first time a test needs it
// (unit tests and fuzzing never do).
func setupCassandra() {
	cfg := cqlstore.DefaultConfig()
	cfg.Hosts = []string{cassandraAddr()}
	cfg.Keyspace = fmt.Sprintf("sluice_retention_%d_%d", os.Getpid(), time.Now().UnixNano()%1_000_000)
	cfg.ReplicationClass, cfg.ReplicationFactor = "SimpleStrategy", 1
	cfg.WriteConsistency, cfg.ReadConsistency = "ONE", "ONE"
	cfg.Timeout = 30 * time.Second
	cqlCfg = cfg
	conn, err := net.DialTimeout("tcp", cassandraAddr(), 2*time.Second)
	if err != nil {
		cqlUsable = err
		return
	}
	_ = conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if err := cqlstore.Migrate(ctx, cfg, discard); err != nil {
		cqlUsable = fmt.Errorf("migrate: %w", err)
		return
	}
	cqlCreated = true
}

// requireCassandra skips when Cassandra is not usable, or fails under
// CI=true, where a missing server is an error.
func requireCassandra(t testing.TB) {
	t.Helper()
	cqlOnce.Do(setupCassandra)
	if cqlUsable == nil {
		return
	}
	msg := fmt.Sprintf("Cassandra at %s is not usable (%v); start it with: bash scripts/servers.sh up cassandra", cassandraAddr(), cqlUsable)
	testenv.Missing(t, msg)
}

func openCassandra(t *testing.T) *cqlstore.Store {
	t.Helper()
	requireCassandra(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	st, err := cqlstore.Open(ctx, cqlCfg, discard, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	return st
}
