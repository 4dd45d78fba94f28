package sink

import (
	"math"
	"time"
)

// arrivalWindow is the time constant of groupCommit's rate estimate: about
// the last 50 ms of arrivals count.
const arrivalWindow = 50 * time.Millisecond

// groupCommit decides whether the flusher waits Config.CommitDelay for
// more requests before it plans a batch: when, at the rate requests have
// been arriving lately, at least Config.CommitSiblings more are expected
// within the delay. Requests then share a commit (and its fsync) instead
// of each few paying one; a lone client, or a quiet gateway, never waits.
// Only the flusher uses it.
type groupCommit struct {
	delay    time.Duration
	siblings int
	last     time.Time
	rate     float64 // requests a second: each adds 1/window, decaying by e every window
}

// arrived notes n requests taken at now.
func (g *groupCommit) arrived(now time.Time, n int) {
	w := arrivalWindow.Seconds()
	if !g.last.IsZero() {
		if dt := now.Sub(g.last).Seconds(); dt > 0 {
			g.rate *= math.Exp(-dt / w)
		}
	}
	g.last = now
	g.rate += float64(n) / w
}

// wait reports whether the flusher should wait for more requests.
func (g *groupCommit) wait() bool {
	return g.delay > 0 && g.rate*g.delay.Seconds() >= float64(g.siblings)
}

// expected returns how many requests are expected within the delay at the
// recent rate: the flusher stops waiting once its batch holds that many,
// so that a few clients each waiting for their answer before they send
// again are not held for the whole delay.
func (g *groupCommit) expected() int {
	return int(math.Ceil(g.rate * g.delay.Seconds()))
}
