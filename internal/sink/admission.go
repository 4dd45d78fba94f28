package sink

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Write stores the request's rows and returns once they are durable.
func (s *Sink) Write(ctx context.Context, req *Request) error {
	rows := req.Rows()
	if rows == 0 {
		return nil
	}
	// Admitted here rather than through Reserve: no Reservation is
	// allocated for every message.
	weight := min(int64(rows), int64(s.cfg.QueueRows))
	if err := s.admit(ctx, weight); err != nil {
		return s.refuse(ctx)
	}
	return s.writeAdmitted(ctx, req, weight)
}

// Reservation is a share of the row budget taken before the rows it is for
// exist, so that a transport can refuse a request before it spends memory
// decoding it. Pass it to WriteReserved, or give it back with Release.
type Reservation struct {
	s      *Sink
	weight int64
	done   bool
}

// Reserve takes room for up to rows rows, as Write would for a request of
// that many, waiting at most Config.AdmissionTimeout; when the budget stays
// full it returns a *BusyError. A reservation larger than the whole budget
// takes all of it.
func (s *Sink) Reserve(ctx context.Context, rows int) (*Reservation, error) {
	weight := min(int64(max(rows, 1)), int64(s.cfg.QueueRows))
	if err := s.admit(ctx, weight); err != nil {
		return nil, s.refuse(ctx)
	}
	return &Reservation{s: s, weight: weight}, nil
}

// refuse is the error of a failed admission: ctx's if it ended, else a
// *BusyError.
func (s *Sink) refuse(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	return s.busyError()
}

func (s *Sink) busyError() *BusyError {
	s.m.busy.Inc()
	s.sat.refused(time.Now())
	return &BusyError{RetryAfter: time.Second, Reason: fmt.Sprintf("more than %d rows waiting to be written", s.cfg.QueueRows)}
}

// Release gives back a reservation that was not passed to WriteReserved. It
// is safe to call more than once, and after WriteReserved (it then does
// nothing).
func (r *Reservation) Release() {
	if r == nil || r.done {
		return
	}
	r.done = true
	r.s.budget.Release(r.weight)
}

// WriteReserved is Write for a request whose rows were reserved with
// Reserve; it consumes res whatever it returns. Room reserved beyond the
// request's rows is given back at once; a request with more rows than
// reserved is admitted for the rest as Write would, and gets a *BusyError
// if that fails.
func (s *Sink) WriteReserved(ctx context.Context, res *Reservation, req *Request) error {
	if res == nil || res.done || res.s != s {
		return errors.New("sink: WriteReserved needs an unused reservation of this sink")
	}
	res.done = true
	return s.writeAdmitted(ctx, req, res.weight)
}

// writeAdmitted writes req, for which held of the budget is already
// admitted, and consumes held whatever it returns: room beyond the
// request's rows is given back at once; a request with more rows than held
// is admitted for the rest, and gets a *BusyError if that fails.
func (s *Sink) writeAdmitted(ctx context.Context, req *Request, held int64) error {
	if s.gate != nil {
		for i := range req.Audit {
			if err := s.gate(&req.Audit[i]); err != nil {
				s.budget.Release(held)
				return err
			}
		}
	}
	rows := req.Rows()
	weight := min(int64(rows), int64(s.cfg.QueueRows))
	switch {
	case weight < held:
		s.budget.Release(held - weight)
	case weight > held:
		if err := s.admit(ctx, weight-held); err != nil {
			s.budget.Release(held)
			return s.refuse(ctx)
		}
	}
	if rows == 0 {
		return nil
	}
	s.sat.admitted()
	p := &pending{req: req, rows: rows, weight: weight, done: make(chan error, 1)}

	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		s.budget.Release(weight)
		return ErrClosed
	}
	s.sends.Add(1)
	s.mu.Unlock()
	s.m.queued.Add(float64(rows))
	s.in <- p // cannot block for long: the budget bounds what is queued
	s.sends.Done()

	select {
	case err := <-p.done:
		return err
	case <-ctx.Done():
		// The rows may still become durable; the caller will not know, and
		// retries are idempotent.
		return ctx.Err()
	}
}

// admit takes weight from the budget, waiting at most AdmissionTimeout. A
// zero timeout means "do not wait", not "never admit": a context that is
// already expired would make Acquire fail even with the budget free.
func (s *Sink) admit(ctx context.Context, weight int64) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	// Room now, and no one waiting before us (TryAcquire keeps the queue's
	// order): no timer to set up, which is most requests.
	if s.budget.TryAcquire(weight) {
		return nil
	}
	if s.cfg.AdmissionTimeout <= 0 {
		return context.DeadlineExceeded
	}
	actx, cancel := context.WithTimeout(ctx, s.cfg.AdmissionTimeout)
	defer cancel()
	return s.budget.Acquire(actx, weight)
}
