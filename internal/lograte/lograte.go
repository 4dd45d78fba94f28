// Package lograte keeps a noisy log line from flooding the log: it lets one
// line through per interval and counts the ones it held back, so that the
// next line can say how many were not logged.
package lograte

import (
	"sync"
	"time"
)

// Limiter lets one event through per Every. The zero value with Every set
// is ready to use; it is safe for concurrent use.
type Limiter struct {
	Every time.Duration

	mu      sync.Mutex
	last    time.Time
	dropped int
}

// Allow reports whether an event at now may be logged and, if so, how many
// were held back since the last one that was.
func (l *Limiter) Allow(now time.Time) (ok bool, dropped int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.last.IsZero() && now.Sub(l.last) < l.Every {
		l.dropped++
		return false, 0
	}
	n := l.dropped
	l.last, l.dropped = now, 0
	return true, n
}
