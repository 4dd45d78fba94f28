package rollupfeed

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/sluicehq/sluice/internal/buckets"
	"github.com/sluicehq/sluice/internal/model"
	"github.com/sluicehq/sluice/internal/outbox"
	"github.com/sluicehq/sluice/internal/reader"
	"github.com/sluicehq/sluice/internal/rollmarks"
	"github.com/sluicehq/sluice/internal/rollup"
	"github.com/sluicehq/sluice/internal/rollupstore"
	"github.com/sluicehq/sluice/internal/sink"
	"github.com/sluicehq/sluice/internal/store"
	"github.com/sluicehq/sluice/internal/store/pebblestore"
)

// openLocal opens an embedded rollup store, closed when the test ends, and
// an outbox, which the caller closes.
func openLocal(t *testing.T) (*rollupstore.Store, *outbox.Outbox) {
	t.Helper()
	dir := t.TempDir()
	emb, err := rollupstore.Open(filepath.Join(dir, "rollups"), quiet)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = emb.Close() })
	ob, err := outbox.Open(filepath.Join(dir, "outbox"), 64<<20, quiet)
	if err != nil {
		t.Fatal(err)
	}
	return emb, ob
}

// openRaw opens an embedded raw store (without fsync) in dir, closed when
// the test ends.
func openRaw(t *testing.T, dir string) *pebblestore.Store {
	t.Helper()
	raw, err := pebblestore.Open(filepath.Join(dir, "raw"), pebblestore.Options{NoSync: true}, quiet)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = raw.Close() })
	return raw
}

// openMarked opens in dir a raw store (openRaw), a marks database
// (dir/marks), and an embedded rollup store and outbox (openLocal), all
// closed when the test ends.
func openMarked(t *testing.T, dir string) (*pebblestore.Store, *rollupstore.Store, *outbox.Outbox, *rollmarks.Store) {
	t.Helper()
	raw := openRaw(t, dir)
	emb, ob := openLocal(t)
	t.Cleanup(func() { _ = ob.Close() })
	marks := openMarks(t, filepath.Join(dir, "marks"))
	t.Cleanup(func() { _ = marks.Close() })
	return raw, emb, ob, marks
}

// gatedRaw is a raw store whose catalogue reads wait for gate to close,
// saying on entered when one starts: a roller stuck on a slow store.
type gatedRaw struct {
	reader.Store
	entered chan struct{}
	gate    chan struct{}
}

func (g *gatedRaw) Catalogue(ctx context.Context, sd model.SeriesDay) ([]model.PartitionInfo, error) {
	select {
	case g.entered <- struct{}{}:
	default:
	}
	<-g.gate
	return g.Store.Catalogue(ctx, sd)
}

func minuteBatch(device string, minute int) *store.Batch {
	ts := base.Add(time.Duration(minute) * time.Minute).UnixMilli()
	key := model.SeriesDay{Kind: model.KindReadings, Tenant: "acme", Series: device, Day: model.DayOf(ts)}.Partition(0)
	return &store.Batch{Partitions: []store.PartitionWrite{{Key: key, Readings: []model.ReadingRow{{TS: ts, Metric: "m", Value: 1}}}}}
}

// Past twice rollups.max_pending pending minutes, a commit waits for the
// roller (the write pipeline pushes back) instead of holding more, and the
// wait is counted.
func TestCommitWaitsWhenPendingFull(t *testing.T) {
	emb, ob := openLocal(t)
	defer ob.Close()
	raw := openRaw(t, t.TempDir())
	gated := &gatedRaw{Store: raw, entered: make(chan struct{}, 1), gate: make(chan struct{})}
	cfg := testConfig()
	cfg.MaxPending = 1000
	feed := newFeed(t, cfg, gated, filepath.Join(t.TempDir(), "marks"), ob, emb, prometheus.NewRegistry(), WithLocalBackend())
	// Each minute of a device of its own: the set weighs its minutes.
	commit := func(i int) {
		b := minuteBatch(fmt.Sprintf("d%d", i), i)
		if err := feed.BeforeCommit(b); err != nil {
			t.Error(err)
		}
		feed.AfterCommit(b, nil)
	}
	commit(0)
	<-gated.entered // the roller is stuck reading minute 0
	done := make(chan int)
	go func() {
		i := 1
		for ; i <= 2*cfg.MaxPending+10; i++ {
			commit(i)
		}
		done <- i
	}()
	eventually(t, "pending minutes at twice max_pending", func() bool { return pendingMinutes(feed) > 2*cfg.MaxPending })
	select {
	case n := <-done:
		t.Fatalf("%d commits went through while the roller was stuck with max_pending %d", n, cfg.MaxPending)
	case <-time.After(300 * time.Millisecond):
	}
	if got := pendingMinutes(feed); got != 2*cfg.MaxPending+1 {
		t.Errorf("%d minutes pending while commits wait, want %d", got, 2*cfg.MaxPending+1)
	}
	close(gated.gate)
	<-done
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := feed.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if got := testutil.ToFloat64(feed.m.queueWait); got <= 0 {
		t.Errorf("sluice_rollup_queue_wait_seconds_total = %v, want the wait counted", got)
	}
	if got := pendingMinutes(feed); got != 0 {
		t.Errorf("%d minutes pending after Close, want 0", got)
	}
}

// A commit after Close began (a sink still draining when the rollups stop)
// is refused, so that nothing is stored that the rollups would leave out,
// and the marks, which may be closed by then, are not touched.
func TestCommitAfterClose(t *testing.T) {
	emb, ob := openLocal(t)
	defer ob.Close()
	marks := openMarks(t, t.TempDir())
	feed := startFeed(t, testConfig(), time.Now, openRaw(t, t.TempDir()), marks, ob, emb, prometheus.NewRegistry(), WithLocalBackend())
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := feed.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if err := marks.Close(); err != nil {
		t.Fatal(err)
	}
	b := minuteBatch("d", 0)
	if err := feed.BeforeCommit(b); !errors.Is(err, ErrClosed) {
		t.Fatalf("BeforeCommit after Close: %v, want ErrClosed", err)
	}
	feed.AfterCommit(b, ErrClosed) // as the sink would not: harmless
	if got := pendingMinutes(feed); got != 0 {
		t.Errorf("%d minutes pending after a refused commit", got)
	}
}

// blockingMarks is a marks database whose Add waits for release.
type blockingMarks struct {
	Marks
	entered, release chan struct{}
}

func (b *blockingMarks) Add(gen uint64, ms []rollmarks.Minute) error {
	b.entered <- struct{}{}
	<-b.release
	return b.Marks.Add(gen, ms)
}

// Close waits for a mark write in progress, so that the caller does not
// close the marks database under it; if its context ends first it says
// so (ErrMarksBusy).
func TestCloseWaitsForMarkWrites(t *testing.T) {
	emb, ob := openLocal(t)
	defer ob.Close()
	marks := openMarks(t, t.TempDir())
	defer marks.Close()
	bm := &blockingMarks{Marks: marks, entered: make(chan struct{}), release: make(chan struct{})}
	feed := startFeed(t, testConfig(), time.Now, openRaw(t, t.TempDir()), bm, ob, emb, prometheus.NewRegistry(), WithLocalBackend())
	done := make(chan error, 1)
	go func() { done <- feed.BeforeCommit(minuteBatch("d", 0)) }()
	<-bm.entered
	short, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if err := feed.Close(short); !errors.Is(err, ErrMarksBusy) {
		t.Errorf("Close with a mark write stuck: %v, want ErrMarksBusy", err)
	}
	close(bm.release)
	if err := <-done; err != nil {
		t.Errorf("the mark write that was in progress: %v", err)
	}
}

// copyDir copies the files of a Pebble directory as a crash would leave
// them (every synced write is in them).
func copyDir(t *testing.T, from, to string) {
	t.Helper()
	if err := os.MkdirAll(to, 0o755); err != nil {
		t.Fatal(err)
	}
	entries, err := os.ReadDir(from)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if e.IsDir() || e.Name() == "LOCK" {
			continue
		}
		b, err := os.ReadFile(filepath.Join(from, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(to, e.Name()), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// A gateway killed after its commits were durable and before their minutes
// were recomputed leaves marks; the next start recomputes those minutes, so
// the rollups count every committed reading exactly once.
func TestMarksTakenUpAfterCrash(t *testing.T) {
	dir := t.TempDir()
	raw, emb, ob, marks := openMarked(t, dir)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	devices := writeUnrolled(ctx, t, raw, marks, ob, emb, WithLocalBackend())
	// The crash: what is on disk now is all the next start has.
	copyDir(t, filepath.Join(dir, "marks"), filepath.Join(dir, "marks-after-crash"))
	stored, err := emb.Rows(ctx, rollup.Filter{Tenant: "acme", From: base.UnixMilli(), To: base.Add(time.Hour).UnixMilli()})
	if err != nil || len(stored) != 0 {
		t.Fatalf("rollups before the restart: %d rows (%v), want none", len(stored), err)
	}

	second := newFeed(t, testConfig(), raw, filepath.Join(dir, "marks-after-crash"), ob, emb, prometheus.NewRegistry(), WithLocalBackend())
	checkTakenUp(ctx, t, second, raw, emb, len(devices))
}

// writeUnrolled is a gateway's life before a crash: a feed on marks that
// recomputes nothing (its minutes are due in an hour, its tick comes in a
// minute) while the sink commits 180 s of rig.write's readings of two
// devices to raw, which it returns; the sink is closed, the feed is not.
func writeUnrolled(ctx context.Context, t *testing.T, raw *pebblestore.Store, marks Marks, ob Outbox, emb *rollupstore.Store, opts ...Option) []string {
	t.Helper()
	cfg := testConfig()
	cfg.RollDelay, cfg.FlushInterval = time.Hour, time.Minute
	first := startFeed(t, cfg, time.Now, raw, marks, ob, emb, prometheus.NewRegistry(), opts...)
	sk := sink.New(sink.DefaultConfig(), buckets.DefaultConfig(), raw, quiet, prometheus.NewRegistry(), sink.WithCommitHook(first))
	r := &rig{raw: raw, sink: sk}
	devices := []string{"a", "b"}
	r.write(t, "acme", devices, base, 0, 180)
	if err := sk.Close(ctx); err != nil {
		t.Fatal(err)
	}
	return devices
}

// checkTakenUp checks that feed, started after a crash of a gateway that
// wrote 180 s of rig.write's readings of n devices and recomputed none,
// takes up their 3 minutes each, and that once it closed the rollups
// agree with the raw store.
func checkTakenUp(ctx context.Context, t *testing.T, feed *Feed, raw Raw, emb *rollupstore.Store, n int) {
	t.Helper()
	if got := pendingMinutes(feed); got != 3*n {
		t.Errorf("%d minutes taken up after the crash, want %d", got, 3*n)
	}
	if err := feed.Close(ctx); err != nil {
		t.Fatal(err)
	}
	res, err := Verify(ctx, raw, emb, "acme", model.DayOf(base.UnixMilli()))
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Mismatches) != 0 || res.RawRows != int64(180*2*n) || res.RollupRows != res.RawRows {
		t.Errorf("verify after the restart: %+v", res)
	}
}

// Two gateways (writer ids 1 and 2, each with its own marks and outbox) on
// one raw store and one rollup store receive the same readings (a load
// balancer's retries, a redelivery to another member of a shared
// subscription) besides their own, and late readings for minutes already
// recomputed: the stored rollups equal a recompute from the raw store.
func TestSameReadingsThroughTwoGateways(t *testing.T) {
	dir := t.TempDir()
	raw := openRaw(t, dir)
	emb, err := rollupstore.Open(filepath.Join(dir, "rollups"), quiet)
	if err != nil {
		t.Fatal(err)
	}
	defer emb.Close()
	type gateway struct {
		feed *Feed
		r    *rig
	}
	var gws []gateway
	for w := 1; w <= 2; w++ {
		ob, err := outbox.Open(filepath.Join(dir, "outbox", string(rune('0'+w))), 64<<20, quiet)
		if err != nil {
			t.Fatal(err)
		}
		defer ob.Close()
		feed := newFeed(t, testConfig(), raw, filepath.Join(dir, "marks", string(rune('0'+w))), ob, emb, prometheus.NewRegistry(), WithLocalBackend())
		bcfg := buckets.DefaultConfig()
		bcfg.Writer, bcfg.PerWriterSingle = w, true
		sk := sink.New(sink.DefaultConfig(), bcfg, raw, quiet, prometheus.NewRegistry(), sink.WithCommitHook(feed))
		gws = append(gws, gateway{feed: feed, r: &rig{raw: raw, sink: sk}})
	}
	a, b := gws[0].r, gws[1].r
	a.write(t, "acme", []string{"pump-1", "pump-2"}, base, 0, 120) // through A
	b.write(t, "acme", []string{"pump-2", "fan-3"}, base, 60, 180) // B repeats a minute of pump-2
	a.write(t, "acme", []string{"fan-3"}, base, 90, 150)           // A repeats B's rows of fan-3
	eventually(t, "both gateways idle", func() bool {
		return pendingMinutes(gws[0].feed) == 0 && pendingMinutes(gws[1].feed) == 0
	})
	b.write(t, "acme", []string{"pump-1"}, base, 30, 45) // retried after its minute was recomputed
	// A genuinely late reading for that minute, through the other gateway:
	// its recompute must win over the first.
	late := &sink.Request{Tenant: "acme", Readings: []model.Reading{{DeviceID: "pump-1", TS: base.Add(30500 * time.Millisecond).UnixMilli(),
		Metrics: []model.Metric{{Name: "power", Value: 100}, {Name: "temp", Value: 100}}}}}
	if err := b.sink.Write(context.Background(), late); err != nil {
		t.Fatal(err)
	}
	a.write(t, "acme", []string{"pump-1"}, base, 200, 205) // a late minute, after the others
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, g := range gws {
		if err := g.r.sink.Close(ctx); err != nil {
			t.Fatal(err)
		}
		if err := g.feed.Close(ctx); err != nil {
			t.Fatal(err)
		}
	}
	res, err := Verify(ctx, raw, emb, "acme", model.DayOf(base.UnixMilli()))
	if err != nil {
		t.Fatal(err)
	}
	// pump-1: 0..120, 30.5 and 200..205; pump-2: 0..180; fan-3: 60..180.
	wantRaw := int64((120 + 1 + 5 + 180 + 120) * 2)
	if len(res.Mismatches) != 0 || res.RawRows != wantRaw || res.RollupRows != res.RawRows {
		t.Errorf("verify: %+v, want %d raw rows counted once each in the rollups", res, wantRaw)
	}
}

// markedMinutes lists the minutes the marks database holds.
func markedMinutes(t *testing.T, m Marks) []int64 {
	t.Helper()
	var out []int64
	if err := m.Each(func(_ uint64, mk rollmarks.Minute) error {
		out = append(out, mk.Minute)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// Marks are forgotten only once their minutes are recomputed: not while a
// commit that wrote them is in flight, nor while its minutes wait for their
// due time, however many rolls pass meanwhile; each protects its own
// generation (the commit in flight comes first, or the waiting minute).
func TestMarksOutliveTheirMinutes(t *testing.T) {
	for _, inFlightFirst := range []bool{true, false} {
		t.Run(fmt.Sprintf("in_flight_first=%t", inFlightFirst), func(t *testing.T) {
			emb, ob := openLocal(t)
			defer ob.Close()
			raw, err := pebblestore.Open(filepath.Join(t.TempDir(), "raw"), pebblestore.Options{NoSync: true}, quiet)
			if err != nil {
				t.Fatal(err)
			}
			defer raw.Close()
			marks := openMarks(t, t.TempDir())
			defer marks.Close()
			now, advance := testClock(base.Add(48 * time.Hour))
			cfg := testConfig()
			cfg.RollDelay, cfg.FlushInterval = time.Minute, time.Hour // rolls only when the test calls them
			cfg.PastRollDelay = cfg.RollDelay                         // its minutes are two days old
			feed := startFeed(t, cfg, now, raw, marks, ob, emb, prometheus.NewRegistry(), WithLocalBackend())
			inFlight, waiting := minuteBatch("a", 1), minuteBatch("b", 2)
			first, second := waiting, inFlight
			if inFlightFirst {
				first, second = inFlight, waiting
			}
			// The two commits' marks land in different generations.
			if err := feed.BeforeCommit(first); err != nil {
				t.Fatal(err)
			}
			feed.roll(t.Context(), false)
			if err := feed.BeforeCommit(second); err != nil {
				t.Fatal(err)
			}
			feed.AfterCommit(waiting, nil)
			for range 5 {
				feed.roll(t.Context(), false)
			}
			want := []int64{inFlight.Partitions[0].Readings[0].TS, waiting.Partitions[0].Readings[0].TS}
			if got := markedMinutes(t, marks); !slices.Equal(got, want) {
				t.Errorf("marks after rolls with one commit in flight and one minute not due: %v, want %v", got, want)
			}
			feed.AfterCommit(inFlight, nil)
			advance(2 * time.Minute)
			feed.roll(t.Context(), false)
			feed.roll(t.Context(), false)
			if got := markedMinutes(t, marks); len(got) != 0 {
				t.Errorf("marks after both minutes were recomputed: %v, want none", got)
			}
			closeFeed(t, feed)
		})
	}
}

// A minute that ended rollups.roll_delay or more before its commit (a
// backfill) is recomputed rollups.past_roll_delay after the commit, even
// behind devices whose minutes are still being written, which wait the
// whole roll_delay.
func TestPastMinutesRolledSooner(t *testing.T) {
	emb, ob := openLocal(t)
	defer ob.Close()
	raw := openRaw(t, t.TempDir())
	marks := openMarks(t, t.TempDir())
	defer marks.Close()
	now, advance := testClock(base.Add(48 * time.Hour))
	cfg := testConfig()
	cfg.RollDelay, cfg.PastRollDelay, cfg.FlushInterval = time.Minute, time.Second, time.Hour
	feed := startFeed(t, cfg, now, raw, marks, ob, emb, prometheus.NewRegistry(), WithLocalBackend())
	sk := sink.New(sink.DefaultConfig(), buckets.DefaultConfig(), raw, quiet, prometheus.NewRegistry(), sink.WithCommitHook(feed))
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		_ = sk.Close(ctx)
	}()
	r := &rig{raw: raw, sink: sk}
	r.write(t, "acme", []string{"live"}, now(), 0, 1)  // the minute the clock is in
	r.write(t, "acme", []string{"past"}, base, 60, 61) // two days ago
	liveTS, pastTS := now().UnixMilli(), base.Add(time.Minute).UnixMilli()
	feed.roll(t.Context(), false)
	if got := markedMinutes(t, marks); len(got) != 2 {
		t.Fatalf("marks at once after the commits: %v, want both minutes", got)
	}
	advance(2 * time.Second)
	feed.roll(t.Context(), false)
	feed.roll(t.Context(), false)
	if got := pendingMinutes(feed); got != 1 {
		t.Errorf("%d minutes pending two seconds after the commits, want the live one", got)
	}
	rows, err := emb.Rows(t.Context(), rollup.Filter{Tenant: "acme", From: base.UnixMilli(), To: liveTS + rollup.MinuteMillis})
	if err != nil || len(rows) != 2 || rows[0].Device != "past" || rows[0].Minute != pastTS || rows[0].Count != 1 {
		t.Errorf("rollups two seconds after the commits: %+v (%v), want the past minute's two metrics", rows, err)
	}
	advance(time.Minute)
	feed.roll(t.Context(), false)
	if got := markedMinutes(t, marks); len(got) != 0 {
		t.Errorf("marks after roll_delay: %v, want none", got)
	}
	closeFeed(t, feed)
}

// testClock is a clock that stands at start until advanced.
func testClock(start time.Time) (now func() time.Time, advance func(time.Duration)) {
	var mu sync.Mutex
	clock := start
	now = func() time.Time { mu.Lock(); defer mu.Unlock(); return clock }
	advance = func(d time.Duration) { mu.Lock(); clock = clock.Add(d); mu.Unlock() }
	return now, advance
}

// closeFeed closes feed, allowing it a minute.
func closeFeed(t *testing.T, feed *Feed) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := feed.Close(ctx); err != nil {
		t.Fatal(err)
	}
}

// failingRaw fails every read of the devices in fail while it is set.
type failingRaw struct {
	reader.Store
	mu   sync.Mutex
	fail bool
}

func (f *failingRaw) Catalogue(ctx context.Context, sd model.SeriesDay) ([]model.PartitionInfo, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.fail {
		return nil, errors.New("store unavailable")
	}
	return f.Store.Catalogue(ctx, sd)
}

// A recompute that fails is retried, its lag shows meanwhile, its marks
// stay, and once the store reads again the minute is stored and its marks
// go.
func TestFailedRecomputeRetried(t *testing.T) {
	emb, ob := openLocal(t)
	defer ob.Close()
	dir := t.TempDir()
	raw := openRaw(t, dir)
	fr := &failingRaw{Store: raw, fail: true}
	reg := prometheus.NewRegistry()
	feed := newFeed(t, testConfig(), fr, filepath.Join(dir, "marks"), ob, emb, reg, WithLocalBackend())
	sk := sink.New(sink.DefaultConfig(), buckets.DefaultConfig(), raw, quiet, prometheus.NewRegistry(), sink.WithCommitHook(feed))
	r := &rig{raw: raw, sink: sk}
	r.write(t, "acme", []string{"a"}, base, 0, 30)
	eventually(t, "failed recomputes", func() bool { return testutil.ToFloat64(feed.m.rollErrors) >= 2 })
	if feed.lag() <= 0 {
		t.Errorf("lag %v while the recompute fails, want it counted", feed.lag())
	}
	// A device waiting to retry does not make the roller spin: about one
	// roll (a generation) a tick.
	gens := func() uint64 { feed.mu.Lock(); defer feed.mu.Unlock(); return feed.gen }
	g0 := gens()
	time.Sleep(300 * time.Millisecond)
	if n := gens() - g0; n > 200 {
		t.Errorf("%d rolls in 300ms with a tick of 20ms while a device waits to retry", n)
	}
	fr.mu.Lock()
	fr.fail = false
	fr.mu.Unlock()
	eventually(t, "the minute recomputed", func() bool { return pendingMinutes(feed) == 0 && testutil.ToFloat64(feed.m.rolled) > 0 })
	// Its marks, written again in a new generation at each retry, are
	// forgotten once it is recomputed, though no commit marked anything
	// since the first.
	eventually(t, "the retried minute's marks forgotten", func() bool {
		left := 0
		_ = feed.marks.Each(func(uint64, rollmarks.Minute) error { left++; return nil })
		return left == 0
	})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := sk.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if err := feed.Close(ctx); err != nil {
		t.Fatal(err)
	}
	res, err := Verify(ctx, raw, emb, "acme", model.DayOf(base.UnixMilli()))
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Mismatches) != 0 || res.RawRows != 60 || res.RollupRows != 60 {
		t.Errorf("verify after the store recovered: %+v", res)
	}
	if got := testutil.ToFloat64(feed.m.dropped.WithLabelValues("recompute_failed")); got != 0 {
		t.Errorf("dropped{recompute_failed} = %v, want 0", got)
	}
}

// TestMarksInCommitsTakenUpAfterCrash is TestMarksTakenUpAfterCrash with
// the marks in the raw store's database, written by each commit with its
// rows (WithMarksInCommits), as the gateway runs on the embedded store:
// a copy of the raw store's files taken while it is open (a crash) holds
// every minute its commits wrote, and the next start recomputes them. A
// commit whose marks cannot be staged stores nothing.
func TestMarksInCommitsTakenUpAfterCrash(t *testing.T) {
	dir := t.TempDir()
	// Synced, as the gateway runs it: a copy holds what a crash keeps.
	raw, err := pebblestore.Open(filepath.Join(dir, "raw"), pebblestore.Options{}, quiet)
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	emb, ob := openLocal(t)
	defer ob.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// Every mark goes with its commit, none through a write of its own.
	marks := &countingMarks{Store: rollmarks.In(raw.MarksIn()), t: t}
	marks.noAdd.Store(true)
	devices := writeUnrolled(ctx, t, raw, marks, ob, emb, WithLocalBackend(), WithMarksInCommits())
	copyDir(t, filepath.Join(dir, "raw"), filepath.Join(dir, "after-crash", "raw"))

	raw2 := openRaw(t, filepath.Join(dir, "after-crash"))
	second := startFeed(t, testConfig(), time.Now, raw2, rollmarks.In(raw2.MarksIn()), ob, emb, prometheus.NewRegistry(), WithLocalBackend(), WithMarksInCommits())
	checkTakenUp(ctx, t, second, raw2, emb, len(devices))

	// Marks that cannot be staged fail the commit: nothing is stored.
	b := minuteBatch("c", 5)
	b.Also = func(store.Setter) error { return errors.New("no room") }
	if err := raw2.Commit(ctx, b); err == nil {
		t.Fatal("commit with a failing Also succeeded")
	}
	got, err := raw2.Catalogue(ctx, b.Partitions[0].Key.SeriesDay())
	if err != nil || len(got) != 0 {
		t.Fatalf("after the failed commit: catalogue %v, %v", got, err)
	}
	if rows, err := readAll(ctx, raw2, "acme", "c", base.UnixMilli(), base.Add(time.Hour).UnixMilli()); err != nil || len(rows) != 0 {
		t.Fatalf("after the failed commit: %d readings (%v), want none", len(rows), err)
	}
}

// countingMarks counts the Forget calls that reach the marks, and fails
// the test on a mark written apart from a commit while noAdd is set.
type countingMarks struct {
	*rollmarks.Store
	t       *testing.T
	noAdd   atomic.Bool
	forgets atomic.Int64
}

func (c *countingMarks) Forget(below uint64) error {
	c.forgets.Add(1)
	return c.Store.Forget(below)
}

func (c *countingMarks) Add(gen uint64, ms []rollmarks.Minute) error {
	if c.noAdd.Load() && len(ms) > 0 {
		c.t.Errorf("%d marks written apart from a commit", len(ms))
	}
	return c.Store.Add(gen, ms)
}

// TestIdleFeedForgetsNothing: a feed that has marked nothing since its
// last Forget leaves the marks alone on its ticks (on the embedded store
// every Forget is a range deletion in the raw store), and forgets once a
// commit's minutes are recomputed; the commit's marks went with it, not
// through Add.
func TestIdleFeedForgetsNothing(t *testing.T) {
	dir := t.TempDir()
	raw := openRaw(t, dir)
	emb, ob := openLocal(t)
	defer ob.Close()
	marks := &countingMarks{Store: rollmarks.In(raw.MarksIn()), t: t}
	marks.noAdd.Store(true)
	feed := startFeed(t, testConfig(), time.Now, raw, marks, ob, emb, prometheus.NewRegistry(), WithLocalBackend(), WithMarksInCommits())
	sk := sink.New(sink.DefaultConfig(), buckets.DefaultConfig(), raw, quiet, prometheus.NewRegistry(), sink.WithCommitHook(feed))
	r := &rig{raw: raw, feed: feed, sink: sk}
	defer r.close(t)
	time.Sleep(10 * testConfig().FlushInterval)
	if n := marks.forgets.Load(); n != 0 {
		t.Fatalf("an idle feed forgot marks %d times", n)
	}
	r.write(t, "acme", []string{"a"}, base, 0, 30)
	eventually(t, "the written minute recomputed and its marks forgotten", func() bool {
		var left int
		_ = marks.Each(func(uint64, rollmarks.Minute) error { left++; return nil })
		return marks.forgets.Load() > 0 && left == 0
	})
	n := marks.forgets.Load()
	time.Sleep(10 * testConfig().FlushInterval)
	if m := marks.forgets.Load(); m != n {
		t.Fatalf("idle again, the feed forgot marks %d more times", m-n)
	}
}

// A minute marked again in a later generation (a retried request after a
// roll) is taken up at start once: the pending set counts, and the start
// logs, distinct minutes.
func TestMarksOfOneMinuteInTwoGenerationsTakenUpOnce(t *testing.T) {
	raw, emb, ob, marks := openMarked(t, t.TempDir())
	m := func(minute int64) rollmarks.Minute {
		return rollmarks.Minute{Tenant: "acme", Device: "a", Minute: base.UnixMilli() + minute*60_000}
	}
	if err := marks.Add(1, []rollmarks.Minute{m(0), m(1)}); err != nil {
		t.Fatal(err)
	}
	if err := marks.Add(2, []rollmarks.Minute{m(0), m(1)}); err != nil {
		t.Fatal(err)
	}
	feed := startFeed(t, testConfig(), time.Now, raw, marks, ob, emb, prometheus.NewRegistry(), WithLocalBackend())
	if got := pendingMinutes(feed); got != 2 {
		t.Errorf("%d minutes taken up, want 2", got)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := feed.Close(ctx); err != nil {
		t.Fatal(err)
	}
}
