// Package bytebudget bounds the memory that requests in flight may hold: a
// gateway-wide budget of bytes, charged before the bytes are allocated and
// given back when the request is done with them. A charge that does not fit
// waits a bounded time and then fails, so that the caller can answer "busy"
// instead of growing without bound.
package bytebudget

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// ErrBusy is returned when a charge could not be had within the wait.
var ErrBusy = errors.New("byte budget exhausted")

// Budget is a pool of bytes shared by all requests. Its zero value is not
// usable: create it with New.
type Budget struct {
	size int64
	wait time.Duration
	pool *pool
	m    *metrics
}

// Metrics are what a budget reports: the bytes charged now, and the charges
// refused because the budget stayed full. The owner names and registers
// them; either may be nil.
type Metrics struct {
	Inflight prometheus.Gauge
	Busy     prometheus.Counter
}

// New returns a budget of size bytes (at least 1). A charge waits at most
// wait for room; 0 means "do not wait".
func New(size int64, wait time.Duration, m Metrics) *Budget {
	size = max(size, 1)
	if m.Inflight == nil {
		m.Inflight = prometheus.NewGauge(prometheus.GaugeOpts{Name: "unregistered"})
	}
	if m.Busy == nil {
		m.Busy = prometheus.NewCounter(prometheus.CounterOpts{Name: "unregistered"})
	}
	return &Budget{size: size, wait: wait, pool: newPool(size), m: &metrics{inflight: m.Inflight, busy: m.Busy}}
}

// Charge is what one request holds of a budget. It is not safe for
// concurrent use; give it back with Release once the bytes are no longer
// needed.
type Charge struct {
	b    *Budget
	held int64
}

// Charge returns an empty charge on b.
func (b *Budget) Charge() *Charge { return &Charge{b: b} }

// Held returns the bytes the charge holds.
func (c *Charge) Held() int64 { return c.held }

// Grow makes the charge hold n more bytes. An empty charge waits at most the
// budget's wait for them; a charge that already holds bytes does not wait at
// all, since two growing charges waiting for each other's bytes would both
// hold theirs until they time out, and every smaller charge would queue
// behind them. Instead it takes bytes that are free ahead of the charges
// waiting for room. It fails with ErrBusy, or with ctx's error if ctx ends first;
// the charge then holds what it held before. A charge can never hold more
// than the whole budget: that fails at once with an error saying so.
func (c *Charge) Grow(ctx context.Context, n int64) error {
	if n <= 0 {
		return nil
	}
	if n > c.b.size-c.held {
		return fmt.Errorf("%d more bytes would take the charge past the whole budget of %d bytes: %w", n, c.b.size, ErrBusy)
	}
	if err := c.b.acquire(ctx, n, c.held == 0); err != nil {
		return err
	}
	c.held += n
	c.b.m.inflight.Add(float64(n))
	return nil
}

// TryGrow makes the charge hold n more bytes if the budget has them now,
// and reports whether it did. It never waits, leaves free bytes to the
// charges waiting for room, and a refusal is not counted as busy: it is for
// bytes the caller can do without.
func (c *Charge) TryGrow(n int64) bool {
	if n <= 0 {
		return true
	}
	if n > c.b.size-c.held || !c.b.pool.take(n, false) {
		return false
	}
	c.held += n
	c.b.m.inflight.Add(float64(n))
	return true
}

// Shrink gives back n bytes of the charge (at most what it holds).
func (c *Charge) Shrink(n int64) {
	n = min(n, c.held)
	if n <= 0 {
		return
	}
	c.held -= n
	c.b.pool.release(n)
	c.b.m.inflight.Sub(float64(n))
}

// Release gives back everything the charge holds. It may be called more
// than once.
func (c *Charge) Release() { c.Shrink(c.held) }

func (b *Budget) acquire(ctx context.Context, n int64, wait bool) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	// A charge that holds bytes takes free ones past the line: it is part
	// way through a body, and cannot wait.
	if b.pool.take(n, !wait) {
		return nil
	}
	if wait && b.wait > 0 {
		wctx, cancel := context.WithTimeout(ctx, b.wait)
		defer cancel()
		if b.pool.wait(wctx, n) == nil {
			return nil
		}
		if err := ctx.Err(); err != nil {
			return err
		}
	}
	b.m.busy.Inc()
	return ErrBusy
}

type metrics struct {
	inflight prometheus.Gauge
	busy     prometheus.Counter
}
