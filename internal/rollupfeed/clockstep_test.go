package rollupfeed

import (
	"testing"
	"time"
	"unsafe"

	"github.com/sluicehq/sluice/internal/rollmarks"
)

// stepWall moves t's wall clock reading by d (whole seconds), keeping its
// monotonic one: what time.Now returns after the system clock was stepped.
// It writes time.Time's wall field (hasMonotonic flag, 33 bits of
// seconds, 30 of nanoseconds), as the time package lays it out.
func stepWall(t *testing.T, tm time.Time, d time.Duration) time.Time {
	t.Helper()
	type layout struct {
		wall uint64
		ext  int64
		loc  *time.Location
	}
	p := (*layout)(unsafe.Pointer(&tm))
	if p.wall&(1<<63) == 0 {
		t.Fatal("setup: the time has no monotonic reading")
	}
	p.wall = uint64(int64(p.wall) + int64(d/time.Second)<<30)
	return tm
}

// A step of the wall clock does not reorder the pending set: a device that
// became pending before the clock was set back an hour is taken when it is
// due, although devices pending since carry earlier wall times.
func TestPendingClockStepBack(t *testing.T) {
	p := newPendingSet()
	t0 := time.Now()
	const delay = time.Minute
	p.add(rollmarks.Minute{Tenant: "t", Device: "old"}, 1, t0)
	t1 := stepWall(t, t0.Add(30*time.Second), -time.Hour)
	if !t1.After(t0) || t1.UnixNano() >= t0.UnixNano() {
		t.Fatalf("setup: the stepped time is not later by the monotonic clock and earlier by the wall clock")
	}
	p.add(rollmarks.Minute{Tenant: "t", Device: "new"}, 1, t1)
	p.check(t)
	now := t0.Add(delay + 10*time.Second) // old is due, new is not
	if got := p.take(now, now.Add(-delay), 1<<20, 100, false); len(got) != 1 || got[0].device != "old" {
		t.Fatalf("took %v, want old (due 10 s ago)", names(got))
	}
	later := t0.Add(delay + 40*time.Second)
	if got := p.take(later, later.Add(-delay), 1<<20, 100, false); len(got) != 1 || got[0].device != "new" {
		t.Fatalf("took %v, want new", names(got))
	}
}
