package cqlstore_test

import (
	"context"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/store/storetest"
)

// TestConformance runs the backend conformance suite. Each of its tests
// wants an empty store: the tables are truncated before each.
func TestConformance(t *testing.T) {
	requireCassandra(t)
	storetest.Run(t, func(t *testing.T) storetest.Backend {
		st := openStore(t, nil)
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		start := time.Now()
		if err := st.Truncate(ctx); err != nil {
			t.Fatalf("truncate: %v", err)
		}
		t.Logf("truncate took %s", time.Since(start))
		return st
	}, storetest.NotAtomic())
}
