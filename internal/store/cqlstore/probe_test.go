package cqlstore_test

import (
	"context"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/store/cqlstore"
	"github.com/sluicehq/sluice/internal/testenv"
)

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
	p := testenv.StartProxy(t, cassandraAddr())
	st := openStore(t, func(c *cqlstore.Config) {
		c.Hosts = []string{p.Addr()}
		c.Timeout = 2 * time.Second
	})
	waitProbe(t, st, false)
	p.Cut()
	waitProbe(t, st, true)
	p.Restore()
	waitProbe(t, st, false)
}
