package bytebudget

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
)

func TestCharge(t *testing.T) {
	b := New(100, 20*time.Millisecond, Metrics{})
	ctx := context.Background()
	a := b.Charge()
	if err := a.Grow(ctx, 60); err != nil {
		t.Fatal(err)
	}
	c := b.Charge()
	steps := []struct {
		name string
		do   func() error
		want error
		held int64 // c's
	}{
		{"fits what is left", func() error { return c.Grow(ctx, 40) }, nil, 40},
		{"full: busy after the wait", func() error { return c.Grow(ctx, 1) }, ErrBusy, 40},
		{"zero is free", func() error { return c.Grow(ctx, 0) }, nil, 40},
		{"shrink gives back", func() error { c.Shrink(30); return nil }, nil, 10},
		{"shrink past what is held", func() error { c.Shrink(1000); return nil }, nil, 0},
		{"past the whole budget fails at once", func() error { return c.Grow(ctx, 101) }, ErrBusy, 0},
		{"cancelled", func() error {
			cctx, cancel := context.WithCancel(ctx)
			cancel()
			return c.Grow(cctx, 1)
		}, context.Canceled, 0},
		{"room again", func() error { return c.Grow(ctx, 40) }, nil, 40},
	}
	for _, s := range steps {
		err := s.do()
		if !errors.Is(err, s.want) || (s.want == nil && err != nil) {
			t.Fatalf("%s: %v, want %v", s.name, err, s.want)
		}
		if c.Held() != s.held {
			t.Fatalf("%s: holds %d, want %d", s.name, c.Held(), s.held)
		}
	}
	if got := testutil.ToFloat64(b.m.inflight); got != 100 {
		t.Errorf("inflight gauge %v, want 100", got)
	}
	if got := testutil.ToFloat64(b.m.busy); got != 1 {
		t.Errorf("busy counter %v, want 1 (the charge past the whole budget is not a wait)", got)
	}
	a.Release()
	c.Release()
	c.Release()
	if got := testutil.ToFloat64(b.m.inflight); got != 0 {
		t.Errorf("inflight gauge %v after every charge is released, want 0", got)
	}
}

// A charge waiting for room gets it as soon as another gives it back.
func TestChargeWaits(t *testing.T) {
	b := New(10, 5*time.Second, Metrics{})
	a := b.Charge()
	if err := a.Grow(context.Background(), 10); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- b.Charge().Grow(context.Background(), 5) }()
	select {
	case err := <-done:
		t.Fatalf("Grow with the budget full returned %v at once", err)
	case <-time.After(20 * time.Millisecond):
	}
	a.Shrink(5)
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("waiting Grow not served after room was given back")
	}
}
