// Package readiness answers /readyz: whether this gateway should be sent
// traffic now. It combines named checks (store writable, broker connected,
// pipeline not saturated for too long) and a shutdown flag, and bounds and
// caches the checks that cost a round trip, so that a load balancer
// polling /readyz does not load the store.
package readiness

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Check reports nil when its part of the gateway is fit to take traffic,
// else why not.
type Check struct {
	Name  string
	Check func() error
}

// State is the gateway's readiness: unready once shutdown began, or while
// any check fails.
type State struct {
	stopping atomic.Bool
	checks   []Check
}

// New returns a State made of checks, evaluated in order.
func New(checks ...Check) *State { return &State{checks: checks} }

// Stop marks the gateway as shutting down: Ready fails from now on.
func (s *State) Stop() { s.stopping.Store(true) }

// Ready returns nil when the gateway is ready, else an error naming every
// reason ("store: ...; mqtt: ...").
func (s *State) Ready() error {
	if s.stopping.Load() {
		return errors.New("shutting down")
	}
	var reasons []string
	for _, c := range s.checks {
		if err := c.Check(); err != nil {
			reasons = append(reasons, c.Name+": "+err.Error())
		}
	}
	if len(reasons) > 0 {
		return errors.New(strings.Join(reasons, "; "))
	}
	return nil
}

// Probe runs a check that costs a round trip (a write to the store) at most
// once per TTL and for at most Timeout, and serves its last answer in
// between. Only one probe runs at a time: one that outlives its timeout is
// reported as unanswered until it returns, and no other is started beside
// it, so a hung store does not pile up probes.
type Probe struct {
	run     func(context.Context) error
	ttl     time.Duration
	timeout time.Duration
	now     func() time.Time

	mu      sync.Mutex
	at      time.Time // when last was taken; zero: never
	last    error
	started time.Time     // when the probe in flight started
	done    chan struct{} // closed when the probe in flight ends; nil: none
}

// NewProbe returns a Probe of run.
func NewProbe(run func(context.Context) error, ttl, timeout time.Duration, now func() time.Time) *Probe {
	return &Probe{run: run, ttl: ttl, timeout: timeout, now: now}
}

// Check returns the probe's answer, at most TTL old.
func (p *Probe) Check() error {
	p.mu.Lock()
	if !p.at.IsZero() && p.now().Sub(p.at) < p.ttl {
		err := p.last
		p.mu.Unlock()
		return err
	}
	if p.done != nil {
		// A probe is running: wait for it, but no longer than its timeout.
		done, started := p.done, p.started
		p.mu.Unlock()
		return p.await(done, started)
	}
	done := make(chan struct{})
	started := p.now()
	p.done, p.started = done, started
	p.mu.Unlock()
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), p.timeout)
		err := p.run(ctx)
		cancel()
		if err != nil && errors.Is(err, context.DeadlineExceeded) {
			err = fmt.Errorf("no answer within %s: %w", p.timeout, err)
		}
		p.mu.Lock()
		p.last, p.at, p.done = err, p.now(), nil
		p.mu.Unlock()
		close(done)
	}()
	return p.await(done, started)
}

func (p *Probe) await(done chan struct{}, started time.Time) error {
	wait := p.timeout - p.now().Sub(started)
	t := time.NewTimer(max(wait, 0))
	defer t.Stop()
	select {
	case <-done:
		p.mu.Lock()
		defer p.mu.Unlock()
		return p.last
	case <-t.C:
		return fmt.Errorf("no answer for %s (timeout %s)", p.now().Sub(started).Round(time.Millisecond), p.timeout)
	}
}
