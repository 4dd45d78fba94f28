// Package chstoretest gives tests a rollup table of their own on the test
// ClickHouse: a scratch database, created with chstore's own migration and
// dropped when the test ends.
package chstoretest

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"

	"github.com/sluicehq/sluice/internal/chstore"
)

// Scratch opens a store on a new database named prefix_<ns> at addr and
// migrates it. The caller holds the ClickHouse test lock
// (testenv.LockClickHouse) and has checked the server is there.
func Scratch(t testing.TB, addr, prefix string) *chstore.Store {
	t.Helper()
	cfg := chstore.DefaultConfig()
	cfg.Addr = addr
	cfg.Database = fmt.Sprintf("%s_%d", prefix, time.Now().UnixNano())
	s, err := chstore.Open(cfg, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = s.Close()
		if err := Drop(addr, cfg.Database); err != nil {
			t.Errorf("drop database %s: %v", cfg.Database, err)
		}
	})
	if _, err := s.Migrate(context.Background()); err != nil {
		t.Fatal(err)
	}
	return s
}

// Drop drops a database of the test ClickHouse at addr.
func Drop(addr, database string) error {
	conn, err := clickhouse.Open(&clickhouse.Options{Addr: []string{addr}})
	if err != nil {
		return err
	}
	defer conn.Close()
	return conn.Exec(context.Background(), "DROP DATABASE IF EXISTS "+database)
}
