package bytebudget

import (
	"container/list"
	"context"
	"sync"
)

// pool is the budget's bytes: a counting semaphore whose waiters are
// served first come, first served, but which a charge that already holds
// bytes may take from past them. golang.org/x/sync/semaphore, which it
// replaces, refuses every TryAcquire while anyone waits: a body half read
// then failed to grow its buffer, with room to spare, because a new
// request was waiting, and was answered 503 so that the newcomer could
// have its bytes.
type pool struct {
	mu      sync.Mutex
	free    int64
	waiters list.List // of *waiter, oldest first
}

type waiter struct {
	n     int64
	ready chan struct{} // closed once the bytes are the waiter's
}

func newPool(size int64) *pool { return &pool{free: size} }

// take takes n bytes if they are free now: past any waiter when barge is
// set, else only if nobody waits.
func (p *pool) take(n int64, barge bool) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.takeLocked(n, barge)
}

// takeLocked is take with p.mu held.
func (p *pool) takeLocked(n int64, barge bool) bool {
	if p.free < n || !barge && p.waiters.Len() > 0 {
		return false
	}
	p.free -= n
	return true
}

// wait takes n bytes, waiting in line for them until ctx ends. Bytes
// granted as ctx ends are kept (it returns nil).
func (p *pool) wait(ctx context.Context, n int64) error {
	p.mu.Lock()
	if p.takeLocked(n, false) {
		p.mu.Unlock()
		return nil
	}
	w := &waiter{n: n, ready: make(chan struct{})}
	e := p.waiters.PushBack(w)
	p.mu.Unlock()
	select {
	case <-w.ready:
		return nil
	case <-ctx.Done():
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	select {
	case <-w.ready:
		return nil
	default:
	}
	first := p.waiters.Front() == e
	p.waiters.Remove(e)
	if first {
		// Those behind it may fit in what it was waiting for.
		p.grant()
	}
	return ctx.Err()
}

// release gives n bytes back and hands them to the waiters in line.
func (p *pool) release(n int64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.free += n
	p.grant()
}

// grant serves the waiters in order while the first fits. A large waiter
// at the front holds back smaller ones behind it, so that it is not
// starved.
func (p *pool) grant() {
	for e := p.waiters.Front(); e != nil; e = p.waiters.Front() {
		w := e.Value.(*waiter)
		if p.free < w.n {
			return
		}
		p.free -= w.n
		p.waiters.Remove(e)
		close(w.ready)
	}
}
