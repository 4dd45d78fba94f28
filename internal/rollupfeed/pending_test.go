package rollupfeed

import (
	"fmt"
	"math/rand/v2"
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
	for _, q := range []*queue{&p.due, &p.retry} {
		for i, e := range q.es {
			d := e.d
			if e.key != q.keyOf(d) {
				t.Fatalf("device %s queued on a stale key", d.device)
			}
			if d.index != i {
				t.Fatalf("device %s at %d of its queue knows index %d", d.device, i, d.index)
			}
			if d.retrying != q.byRetry {
				t.Fatalf("device %s (retrying %t) in the wrong queue", d.device, d.retrying)
			}
			if i > 0 && e.key < q.es[(i-1)/arity].key {
				t.Fatalf("device %s due before its parent in the queue", d.device)
			}
			if p.byDevice[deviceKey{d.tenant, d.device}] != d {
				t.Fatalf("device %s queued but not in the map", d.device)
			}
			n += len(d.minutes)
			devs++
			gens[d.gen]++
		}
	}
	if devs != len(p.byDevice) || n != p.minutes {
		t.Fatalf("queues of %d devices and %d minutes, map of %d, count %d", devs, n, len(p.byDevice), p.minutes)
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
	p.add(m("a", 1), 5, at(0))
	p.add(m("b", 1), 6, at(1))
	p.add(m("a", 2), 7, at(2))  // a: one minute old enough, one not
	p.add(m("c", 1), 4, at(10)) // c: generation 4, but late
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
	if !slices.Equal(names(listed(&p)), []string{"a", "c"}) || p.minutes != 2 {
		t.Errorf("left %v (%d minutes), want a's minute 2 and c", names(listed(&p)), p.minutes)
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
	if got := p.take(at(20), at(20), 1000, 1000, false); !slices.Equal(names(got), []string{"a", "c"}) {
		t.Errorf("before b's retry time took %v, want a and c", names(got))
	}
	if got := p.take(at(31), at(31), 1000, 1000, false); !slices.Equal(names(got), []string{"b"}) {
		t.Errorf("after b's retry time took %v, want b", names(got))
	}
	p.check(t)
	// Overlapping batches of one device: each minute counted once.
	for range 100 {
		p.add(m("d", 1), 9, at(40))
		p.add(m("d", 2), 9, at(40))
	}
	p.check(t)
	if p.minutes > 16 {
		t.Errorf("%d minutes counted for a device with 2", p.minutes)
	}
	// Over the bound, the oldest are taken early (d, leaving e); force
	// takes everything (e and f).
	p.add(m("e", 1), 9, at(41))
	if got := p.take(at(42), at(0), 1, 1000, false); len(got) == 0 {
		t.Error("nothing taken over the bound")
	}
	p.add(m("f", 1), 9, at(43))
	if got := p.take(at(44), at(0), 1000, 1000, true); len(got) != 2 || p.minutes != 0 {
		t.Errorf("force took %v and left %d minutes", names(got), p.minutes)
	}
	p.check(t)
	if _, ok := p.oldestGen(); ok {
		t.Error("an oldest generation with nothing pending")
	}
}

// A minute long past is taken when it is due even when it became pending
// after minutes of the present that are not due yet, and in one device's
// queue place: joining minutes of the present, it brings its device
// forward; a minute that joined after its device's due time stays pending
// until its own.
func TestPendingPastJoinsLive(t *testing.T) {
	t0 := time.Unix(1_000_000, 0)
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	m := func(dev string, minute int64) rollmarks.Minute {
		return rollmarks.Minute{Tenant: "t", Device: dev, Minute: minute * 60_000}
	}
	const delay, past = 30, 5
	p := newPendingSet()
	p.add(m("live", 100), 1, at(0))
	p.add(m("both", 100), 1, at(1))          // a minute of the present first,
	p.add(m("both", 1), 1, at(2-delay+past)) // then one long past, committed at 2: due at 7
	p.add(m("both", 101), 1, at(5))          // and another of the present
	p.add(m("late", 2), 1, at(3-delay+past)) // long past, committed at 3: due at 8
	p.check(t)
	if got := p.take(at(6), at(6-delay), 1000, 1000, false); len(got) != 0 {
		t.Fatalf("took %v before anything was due", names(got))
	}
	got := p.take(at(8), at(8-delay), 1000, 1000, false)
	p.check(t)
	if !slices.Equal(names(got), []string{"both", "late"}) {
		t.Fatalf("took %v at 8, want both's past minute, then late", names(got))
	}
	if ms := got[0].sortedMinutes(); !slices.Equal(ms, []int64{60_000}) {
		t.Errorf("took both's minutes %v, want only the one long past", ms)
	}
	if got := p.take(at(30), at(30-delay), 1000, 1000, false); !slices.Equal(names(got), []string{"live"}) {
		t.Errorf("took %v at 30, want live", names(got))
	}
	got = p.take(at(35), at(35-delay), 1000, 1000, false)
	if !slices.Equal(names(got), []string{"both"}) || !p.empty() {
		t.Errorf("took %v at 35 (%d minutes left), want both's minutes of the present", names(got), p.minutes)
	}
	p.check(t)
}

// A backfill written over many ticks beside a fleet of live devices: every
// minute is taken on the first roll at or after its own due time, neither
// held behind devices that became pending after it nor taken before it is
// due, whatever mix of minutes long past and of the present each device
// writes and however its minutes were split by earlier rolls.
func TestPendingBackfillBesideLive(t *testing.T) {
	t0 := time.Unix(1_000_000, 0)
	const delay, past = 30 * time.Second, 5 * time.Second
	tick := func(i int) time.Time { return t0.Add(time.Duration(i) * time.Second) }
	type key struct {
		dev    string
		minute int64
	}
	latest := map[key]time.Time{} // when each minute's latest commit counts as pending from
	p := newPendingSet()
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range 200 {
		now := tick(i)
		// Writes of this second, committed at now.
		for j := range 40 {
			dev := fmt.Sprint("d", rng.IntN(60))
			var minute int64
			at := now
			if rng.IntN(3) == 0 { // a backfill's minute, long past
				minute = int64(rng.IntN(50)) * 60_000
				at = now.Add(past - delay)
			} else {
				minute = (1_000_000+int64(i))/60*60_000 + 60_000*int64(j%2)
			}
			p.add(rollmarks.Minute{Tenant: "t", Device: dev, Minute: minute}, 1, at)
			latest[key{dev, minute}] = at
		}
		p.check(t)
		for _, d := range p.take(now, now.Add(-delay), 1<<20, 1<<20, false) {
			for _, m := range d.minutes {
				if m.at.Add(delay).After(now) {
					t.Fatalf("second %d: took %s's minute %d due at %s, early", i, d.device, m.minute, m.at.Add(delay).Sub(t0))
				}
				if k := (key{d.device, m.minute}); latest[k].Equal(m.at) {
					delete(latest, k)
				}
			}
		}
		p.check(t)
		held := map[key]bool{}
		for _, d := range p.byDevice {
			for _, m := range d.minutes {
				if !m.at.Add(delay).After(now) {
					t.Fatalf("second %d: %s's minute %d due at %s still pending", i, d.device, m.minute, m.at.Add(delay).Sub(t0))
				}
				held[key{d.device, m.minute}] = true
			}
		}
		for k := range latest {
			if !held[k] {
				t.Fatalf("second %d: %v lost: neither taken nor pending", i, k)
			}
		}
	}
	if len(latest) == 0 {
		t.Fatal("setup: nothing pending at the end")
	}
}

func listed(p *pendingSet) []*pendingDevice {
	var out []*pendingDevice
	for _, e := range p.due.es {
		out = append(out, e.d)
	}
	slices.SortFunc(out, func(a, b *pendingDevice) int { return a.since.Compare(b.since) })
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
				p.add(rollmarks.Minute{Tenant: "t", Device: fmt.Sprint("d", d), Minute: int64(m) * 60_000}, 1, now)
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
		one.add(rollmarks.Minute{Tenant: "t", Device: "d", Minute: int64(m) * 60_000}, 1, now)
	}
	if one.minutes <= max || one.weight() > max {
		t.Fatalf("setup: %d minutes of weight %d against max %d", one.minutes, one.weight(), max)
	}
	if got := one.take(now, due, max, 1<<20, false); len(got) != 0 {
		t.Errorf("one device of %d minutes (weight %d) was taken early under max %d", minutes, one.weight(), max)
	}
	many := newPendingSet()
	for d := range minutes {
		many.add(rollmarks.Minute{Tenant: "t", Device: fmt.Sprint("d", d), Minute: 0}, 1, now)
	}
	if got := many.take(now, due, max, 1<<20, false); len(got) == 0 {
		t.Errorf("%d devices of a minute each (weight %d) were not taken early under max %d", minutes, minutes, max)
	}
}

// A minute is long past when it ended rollups.roll_delay or more before its
// commit; it then counts as pending since roll_delay - past_roll_delay
// before the commit (past_roll_delay at most roll_delay).
func TestPastDue(t *testing.T) {
	now := time.UnixMilli(1_800_000_000_000) // on a minute
	const minute = 60_000
	cases := []struct {
		name       string
		roll, past time.Duration
		minute     int64
		wantAt     time.Time
	}{
		{"ended roll_delay before", 30 * time.Second, time.Second, now.UnixMilli() - 30_000 - minute, now.Add(-29 * time.Second)},
		{"ended just under roll_delay before", 30 * time.Second, time.Second, now.UnixMilli() - 29_999 - minute, now},
		{"the current minute", 30 * time.Second, time.Second, now.UnixMilli(), now},
		{"a minute ahead", 30 * time.Second, time.Second, now.UnixMilli() + minute, now},
		{"two days ago", 30 * time.Second, 0, now.UnixMilli() - 2*86_400_000, now.Add(-30 * time.Second)},
		{"past_roll_delay above roll_delay", 5 * time.Second, time.Minute, now.UnixMilli() - 10*minute, now},
		{"roll_delay 0", 0, time.Second, now.UnixMilli() - minute, now},
	}
	for _, c := range cases {
		f := &Feed{cfg: Config{RollDelay: c.roll, PastRollDelay: c.past}}
		if at := f.pastDue(c.minute, now); !at.Equal(c.wantAt) {
			t.Errorf("%s: pending from %s, want %s", c.name, at.Sub(now), c.wantAt.Sub(now))
		}
	}
	cfg := DefaultConfig()
	cfg.PastRollDelay = -time.Second
	if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "rollups.past_roll_delay") {
		t.Errorf("a negative past_roll_delay: %v, want an error naming it", err)
	}
}

// BenchmarkPendingSet measures the pending set's own work per device-minute
// of a large fleet: each of 100,000 devices adds a minute (one in eight a
// minute long past, so that the queue's order differs from arrival order),
// and the rolls take them when due.
func BenchmarkPendingSet(b *testing.B) {
	const devices = 100_000
	names := make([]string, devices)
	for i := range names {
		names[i] = fmt.Sprint("device-", i)
	}
	t0 := time.Unix(1_000_000, 0)
	const delay, past = 30 * time.Second, 5 * time.Second
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		p := newPendingSet()
		for i, name := range names {
			now := t0.Add(time.Duration(i) * time.Millisecond)
			at := now
			if i%8 == 0 {
				at = now.Add(past - delay)
			}
			p.add(rollmarks.Minute{Tenant: "t", Device: name, Minute: 60_000}, 1, at)
			if i%1000 == 999 {
				p.take(now, now.Add(-delay), 1<<30, 1<<30, false)
			}
		}
		end := t0.Add(devices*time.Millisecond + delay)
		p.take(end, end.Add(-delay), 1<<30, 1<<30, false)
		if !p.empty() {
			b.Fatal("left pending")
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*devices), "ns/device-minute")
}

// Marks taken up at start may name a minute once in each generation that
// wrote it, not in order: compactAll counts each minute once and keeps the
// count the write pipeline waits on exact.
func TestCompactAllCountsDistinctMinutes(t *testing.T) {
	p := newPendingSet()
	at := time.Unix(0, 0)
	m := func(dev string, minute int64) rollmarks.Minute {
		return rollmarks.Minute{Tenant: "acme", Device: dev, Minute: minute * 60_000}
	}
	for _, mk := range []rollmarks.Minute{
		m("a", 0), m("a", 1), m("b", 0), // generation 1
		m("a", 0), m("a", 1), m("a", 2), m("b", 0), // generation 2
	} {
		p.add(mk, 1, at)
	}
	if n := p.compactAll(); n != 4 {
		t.Errorf("compactAll = %d, want 4 distinct minutes", n)
	}
	if p.minutes != 4 {
		t.Errorf("minutes counted %d after compactAll, want 4", p.minutes)
	}
	p.check(t)
}
