package auditlog

import (
	"context"
	"errors"
	"log/slog"
	"testing"
	"time"
)

// A seal waiting for this process's seal in progress stops with its
// context, touching no store (the Log here has none).
func TestSealWaitsWithItsContext(t *testing.T) {
	l := New(DefaultConfig(), nil, nil, time.Now, slog.New(slog.DiscardHandler), nil)
	l.sealing <- struct{}{} // a seal in progress
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() {
		_, err := l.Seal(ctx, "acme", "ops", 20_000)
		done <- err
	}()
	cancel()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("Seal after its context ended: %v, want context.Canceled", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Seal kept waiting for the seal in progress after its context ended")
	}
	<-l.sealing
}
