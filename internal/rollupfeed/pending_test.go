package rollupfeed

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/rollmarks"
)

func names(ds []*pendingDevice) []string {
	var out []string
	for _, d := range ds {
		out = append(out, d.device)
	}
	return out
}

func (p *pendingSet) check(t *testing.T) {
	t.Helper()
	n, devs, gens := 0, 0, map[uint64]int{}
	for ln, l := range p.lanes {
		var prev *pendingDevice
		for d := l.head; d != nil; d = d.next {
			if d.prev != prev {
				t.Fatalf("device %s: broken back link", d.device)
			}
			if p.byDevice[deviceKey{d.tenant, d.device}] != d {
				t.Fatalf("device %s listed but not in the map", d.device)
			}
			if d.lane != lane(ln) {
				t.Fatalf("device %s of lane %d listed in lane %d", d.device, d.lane, ln)
			}
			n += len(d.minutes)
			devs++
			gens[d.gen]++
			prev = d
		}
		if l.tail != prev {
			t.Fatalf("lane %d: tail is not its last device", ln)
		}
	}
	if devs != len(p.byDevice) || n != p.minutes {
		t.Fatalf("list of %d devices and %d minutes, map of %d, count %d", devs, n, len(p.byDevice), p.minutes)
	}
	if len(gens) != len(p.gens) {
		t.Fatalf("generations %v, counted %v", gens, p.gens)
	}
	for g, c := range gens {
		if p.gens[g] != c {
			t.Fatalf("generations %v, counted %v", gens, p.gens)
		}
	}
}

// The pending set takes devices oldest first once due, leaves minutes
// that arrived after the due time for later, puts a failed device back in
// front with its age and a retry time, keeps its counts exact (repeated
// minutes are folded), and knows the oldest generation it still needs.
func TestPendingSet(t *testing.T) {
	t0 := time.Unix(1_000_000, 0)
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	m := func(dev string, minute int64) rollmarks.Minute {
		return rollmarks.Minute{Tenant: "t", Device: dev, Minute: minute * 60_000}
	}
	p := newPendingSet()
	p.add(m("a", 1), 5, at(0), liveLane)
	p.add(m("b", 1), 6, at(1), liveLane)
	p.add(m("a", 2), 7, at(2), liveLane)  // a: one minute old enough, one not
	p.add(m("c", 1), 4, at(10), liveLane) // c: generation 4, but late
	p.check(t)
	if g, ok := p.oldestGen(); !ok || g != 4 {
		t.Errorf("oldest generation %d (%t), want 4", g, ok)
	}
	got := p.take(at(11), at(1), 1000, 1000, false)
	p.check(t)
	if !slices.Equal(names(got), []string{"a", "b"}) {
		t.Fatalf("took %v, want a and b (c is not due)", names(got))
	}
	if ms := got[0].sortedMinutes(); !slices.Equal(ms, []int64{60_000}) {
		t.Errorf("took a's minutes %v, want only minute 1 (minute 2 arrived after the due time)", ms)
	}
	if !slices.Equal(names(listed(&p)), []string{"c", "a"}) || p.minutes != 2 {
		t.Errorf("left %v (%d minutes), want c and a's minute 2", names(listed(&p)), p.minutes)
	}
	// b's recompute failed: back in front, keeping its age; not retried
	// before its time.
	b := got[1]
	b.failures = 1
	p.put(b, at(30))
	p.check(t)
	if s := p.oldestSince(); !s.Equal(at(1)) {
		t.Errorf("oldest pending since %v, want b's %v", s, at(1))
	}
	if got := p.take(at(20), at(20), 1000, 1000, false); !slices.Equal(names(got), []string{"c", "a"}) {
		t.Errorf("before b's retry time took %v, want c and a", names(got))
	}
	if got := p.take(at(31), at(31), 1000, 1000, false); !slices.Equal(names(got), []string{"b"}) {
		t.Errorf("after b's retry time took %v, want b", names(got))
	}
	p.check(t)
	// Overlapping batches of one device: each minute counted once.
	for range 100 {
		p.add(m("d", 1), 9, at(40), liveLane)
		p.add(m("d", 2), 9, at(40), liveLane)
	}
	p.check(t)
	if p.minutes > 16 {
		t.Errorf("%d minutes counted for a device with 2", p.minutes)
	}
	// Over the bound, the oldest are taken early (d, leaving e); force
	// takes everything (e and f).
	p.add(m("e", 1), 9, at(41), liveLane)
	if got := p.take(at(42), at(0), 1, 1000, false); len(got) == 0 {
		t.Error("nothing taken over the bound")
	}
	p.add(m("f", 1), 9, at(43), liveLane)
	if got := p.take(at(44), at(0), 1000, 1000, true); len(got) != 2 || p.minutes != 0 {
		t.Errorf("force took %v and left %d minutes", names(got), p.minutes)
	}
	p.check(t)
	if _, ok := p.oldestGen(); ok {
		t.Error("an oldest generation with nothing pending")
	}
}

// A device of the past lane, due sooner, is taken even though it became
// pending after live devices that are not due yet; a minute that joined
// it after its due time stays pending, in the live lane.
func TestPendingLanes(t *testing.T) {
	t0 := time.Unix(1_000_000, 0)
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	m := func(dev string, minute int64) rollmarks.Minute {
		return rollmarks.Minute{Tenant: "t", Device: dev, Minute: minute * 60_000}
	}
	const delay = 30
	p := newPendingSet()
	p.add(m("live", 100), 1, at(0), liveLane)
	p.add(m("past", 1), 1, at(1-delay+1), pastLane) // committed at 1, due at 2
	p.add(m("past", 100), 1, at(3), liveLane)       // joins past's device
	p.check(t)
	got := p.take(at(4), at(4-delay), 1000, 1000, false)
	if len(got) != 1 || got[0].device != "past" || len(got[0].minutes) != 1 || got[0].minutes[0].minute != 60_000 {
		t.Fatalf("took %v, want past's first minute", names(got))
	}
	p.check(t)
	if d := p.byDevice[deviceKey{"t", "past"}]; d == nil || d.lane != liveLane || len(d.minutes) != 1 {
		t.Fatalf("past's later minute: %+v, want it pending in the live lane", d)
	}
	if got := p.take(at(29), at(29-delay), 1000, 1000, false); len(got) != 0 {
		t.Errorf("took %v before the live minutes were due", names(got))
	}
	if got := p.take(at(33), at(33-delay), 1000, 1000, false); len(got) != 2 || !p.empty() {
		t.Errorf("took %v once due, %d minutes left", names(got), p.minutes)
	}
	p.check(t)
}

func listed(p *pendingSet) []*pendingDevice {
	var out []*pendingDevice
	for _, l := range p.lanes {
		for d := l.head; d != nil; d = d.next {
			out = append(out, d)
		}
	}
	return out
}

// rollups.max_pending bounds what the pending set holds: a device's further
// minutes weigh a sixth of a device's first.
func TestPendingWeight(t *testing.T) {
	now := time.Now()
	for _, tc := range []struct {
		devices, minutesEach, want int
	}{
		{1000, 1, 1000},
		{1, 1000, (168 + 1000*32) / 200},
		{100, 10, (100*168 + 1000*32) / 200},
		{0, 0, 0},
	} {
		p := newPendingSet()
		for d := range tc.devices {
			for m := range tc.minutesEach {
				p.add(rollmarks.Minute{Tenant: "t", Device: fmt.Sprint("d", d), Minute: int64(m) * 60_000}, 1, now, liveLane)
			}
		}
		if got := p.weight(); got != tc.want || p.minutes != tc.devices*tc.minutesEach {
			t.Errorf("%d devices × %d minutes: weight %d (minutes %d), want %d", tc.devices, tc.minutesEach, got, p.minutes, tc.want)
		}
	}
}

// TestPendingTakeByWeight checks that max bounds the set's weight, not its
// minutes: one device with many minutes pending is not recomputed early,
// while as many devices of a minute each are.
func TestPendingTakeByWeight(t *testing.T) {
	now := time.Now()
	due := now.Add(-time.Minute) // every minute below is newer: early
	const max, minutes = 100, 400
	one := newPendingSet()
	for m := range minutes {
		one.add(rollmarks.Minute{Tenant: "t", Device: "d", Minute: int64(m) * 60_000}, 1, now, liveLane)
	}
	if one.minutes <= max || one.weight() > max {
		t.Fatalf("setup: %d minutes of weight %d against max %d", one.minutes, one.weight(), max)
	}
	if got := one.take(now, due, max, 1<<20, false); len(got) != 0 {
		t.Errorf("one device of %d minutes (weight %d) was taken early under max %d", minutes, one.weight(), max)
	}
	many := newPendingSet()
	for d := range minutes {
		many.add(rollmarks.Minute{Tenant: "t", Device: fmt.Sprint("d", d), Minute: 0}, 1, now, liveLane)
	}
	if got := many.take(now, due, max, 1<<20, false); len(got) == 0 {
		t.Errorf("%d devices of a minute each (weight %d) were not taken early under max %d", minutes, minutes, max)
	}
}

// A minute is long past when it ended rollups.roll_delay or more before its
// commit; it then counts as pending since roll_delay - past_roll_delay
// before the commit, in the past lane (past_roll_delay at most roll_delay).
func TestPastDue(t *testing.T) {
	now := time.UnixMilli(1_800_000_000_000) // on a minute
	const minute = 60_000
	cases := []struct {
		name       string
		roll, past time.Duration
		minute     int64
		wantAt     time.Time
		wantLane   lane
	}{
		{"ended roll_delay before", 30 * time.Second, time.Second, now.UnixMilli() - 30_000 - minute, now.Add(-29 * time.Second), pastLane},
		{"ended just under roll_delay before", 30 * time.Second, time.Second, now.UnixMilli() - 29_999 - minute, now, liveLane},
		{"the current minute", 30 * time.Second, time.Second, now.UnixMilli(), now, liveLane},
		{"a minute ahead", 30 * time.Second, time.Second, now.UnixMilli() + minute, now, liveLane},
		{"two days ago", 30 * time.Second, 0, now.UnixMilli() - 2*86_400_000, now.Add(-30 * time.Second), pastLane},
		{"past_roll_delay above roll_delay", 5 * time.Second, time.Minute, now.UnixMilli() - 10*minute, now, pastLane},
		{"roll_delay 0", 0, time.Second, now.UnixMilli() - minute, now, pastLane},
	}
	for _, c := range cases {
		f := &Feed{cfg: Config{RollDelay: c.roll, PastRollDelay: c.past}}
		at, ln := f.pastDue(c.minute, now)
		if !at.Equal(c.wantAt) || ln != c.wantLane {
			t.Errorf("%s: pending from %s in lane %d, want %s in lane %d", c.name, at.Sub(now), ln, c.wantAt.Sub(now), c.wantLane)
		}
	}
	cfg := DefaultConfig()
	cfg.PastRollDelay = -time.Second
	if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "rollups.past_roll_delay") {
		t.Errorf("a negative past_roll_delay: %v, want an error naming it", err)
	}
}
