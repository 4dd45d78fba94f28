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

// Two charges that each hold bytes and need more than is left do not wait
// for each other (both would hold theirs for the whole wait, and every
// other charge would queue behind them): growing a charge that holds bytes
// fails at once, while an empty charge still waits for room.
func TestGrowingChargeDoesNotWait(t *testing.T) {
	b := New(100, 5*time.Second, Metrics{})
	ctx := context.Background()
	a, c := b.Charge(), b.Charge()
	if err := a.Grow(ctx, 40); err != nil {
		t.Fatal(err)
	}
	if err := c.Grow(ctx, 40); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if err := a.Grow(ctx, 30); !errors.Is(err, ErrBusy) {
		t.Fatalf("growing a held charge past what is left = %v, want ErrBusy at once", err)
	}
	if waited := time.Since(start); waited > 2*time.Second {
		t.Fatalf("growing a held charge waited %v for room (the budget's wait is 5s)", waited)
	}
	if a.Held() != 40 {
		t.Fatalf("a holds %d after the refused growth, want 40", a.Held())
	}
	// An empty charge still waits, and gets its room once a gives back.
	done := make(chan error, 1)
	go func() { done <- b.Charge().Grow(ctx, 30) }()
	time.Sleep(20 * time.Millisecond)
	a.Release()
	if err := <-done; err != nil {
		t.Fatalf("empty charge after room was given back: %v", err)
	}
}

// A charge part way through a body takes free bytes ahead of an empty
// charge waiting for more than is free; a TryGrow leaves them to it, and
// the waiter gets its bytes once they are given back.
func TestGrowingChargeGoesFirst(t *testing.T) {
	b := New(100, 5*time.Second, Metrics{})
	ctx := context.Background()
	a := b.Charge()
	if err := a.Grow(ctx, 50); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- b.Charge().Grow(ctx, 60) }()
	waitFor(t, b.pool, 1)
	if a.TryGrow(10) {
		t.Fatal("TryGrow took bytes ahead of a waiting charge")
	}
	if err := a.Grow(ctx, 30); err != nil {
		t.Fatalf("growing a held charge with 50 bytes free and a charge waiting for 60: %v", err)
	}
	if a.Held() != 80 {
		t.Fatalf("a holds %d, want 80", a.Held())
	}
	select {
	case err := <-done:
		t.Fatalf("the waiter got its bytes while a held 80 of 100: %v", err)
	default:
	}
	a.Release()
	if err := <-done; err != nil {
		t.Fatalf("the waiter after a gave back: %v", err)
	}
}

// Waiters are served in line, and one that gives up lets those behind it
// have what it was waiting for.
func TestWaitersInLine(t *testing.T) {
	p := newPool(100)
	if !p.take(90, false) {
		t.Fatal("take 90 of 100")
	}
	ctx, cancel := context.WithCancel(context.Background())
	big := make(chan error, 1)
	go func() { big <- p.wait(ctx, 50) }()
	waitFor(t, p, 1)
	small := make(chan error, 1)
	go func() { small <- p.wait(context.Background(), 10) }()
	waitFor(t, p, 2)
	p.release(20) // 30 free: the first in line needs 50, and holds the line
	select {
	case err := <-small:
		t.Fatalf("the second in line was served before the first: %v", err)
	case <-time.After(20 * time.Millisecond):
	}
	cancel()
	if err := <-big; !errors.Is(err, context.Canceled) {
		t.Fatalf("the first gave up: %v", err)
	}
	select {
	case err := <-small:
		if err != nil {
			t.Fatalf("the second, once the first gave up: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the second was not served once the first gave up")
	}
	if p.free != 20 {
		t.Fatalf("%d bytes free, want 20", p.free)
	}
}

// waiting returns how many wait in p's line.
func (p *pool) waiting() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.waiters.Len()
}

// waitFor waits until n charges wait in p's line.
func waitFor(t *testing.T, p *pool, n int) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); p.waiting() != n; {
		if time.Now().After(deadline) {
			t.Fatalf("%d charges wait, want %d", p.waiting(), n)
		}
		time.Sleep(time.Millisecond)
	}
}
