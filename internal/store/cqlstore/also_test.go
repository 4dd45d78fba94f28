package cqlstore

import (
	"context"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/internal/store"
)

// TestCommitRefusesAlso: Cassandra writes no batch atomically, so a batch
// that asks for keys written with it (store.Batch.Also) is refused before
// anything is written (here, with no session to write to at all).
func TestCommitRefusesAlso(t *testing.T) {
	called := false
	b := &store.Batch{Also: func(store.Setter) error { called = true; return nil }}
	err := (&Store{}).Commit(context.Background(), b)
	if err == nil || !strings.Contains(err.Error(), "atomically") || called {
		t.Fatalf("Commit with Also: %v (Also called: %v), want a refusal", err, called)
	}
}
