package rollupfeed

import (
	"context"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/sluicehq/sluice/internal/buckets"
	"github.com/sluicehq/sluice/internal/chstore"
	"github.com/sluicehq/sluice/internal/chstore/chstoretest"
	"github.com/sluicehq/sluice/internal/model"
	"github.com/sluicehq/sluice/internal/outbox"
	"github.com/sluicehq/sluice/internal/reader"
	"github.com/sluicehq/sluice/internal/rollmarks"
	"github.com/sluicehq/sluice/internal/rollup"
	"github.com/sluicehq/sluice/internal/rollupstore"
	"github.com/sluicehq/sluice/internal/sink"
	"github.com/sluicehq/sluice/internal/store"
	"github.com/sluicehq/sluice/internal/store/pebblestore"
	"github.com/sluicehq/sluice/internal/testenv"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

func testLogger() *slog.Logger {
	if os.Getenv("SLUICE_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, nil))
	}
	return quiet
}

func chAddr() string {
	if a := os.Getenv("SLUICE_ROLLUPS_CLICKHOUSE_ADDR"); a != "" {
		return a
	}
	return "127.0.0.1:9000"
}

// requireServer skips (or, under CI=true, fails) when ClickHouse does not
// answer. exclusive is for the test that stops ClickHouse (see
// testenv.LockClickHouse).
func requireServer(t testing.TB, exclusive bool) {
	t.Helper()
	testenv.LockClickHouse(t, exclusive)
	testenv.Require(t, "clickhouse", chAddr())
}

func openCH(t testing.TB) *chstore.Store {
	return chstoretest.Scratch(t, chAddr(), "sluice_feed")
}

// servers runs scripts/servers.sh.
func servers(t *testing.T, args ...string) {
	t.Helper()
	_, file, _, _ := runtime.Caller(0)
	script := filepath.Join(filepath.Dir(file), "..", "..", "scripts", "servers.sh")
	if s := os.Getenv("SLUICE_SERVERS_SH"); s != "" {
		script = s
	}
	out, err := exec.Command("bash", append([]string{script}, args...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("servers.sh %v: %v\n%s", args, err, out)
	}
}

// rig is a gateway's write path with rollups: raw store, sink, feed.
type rig struct {
	raw  *pebblestore.Store
	ob   *outbox.Outbox
	feed *Feed
	sink *sink.Sink
	reg  *prometheus.Registry
}

func newRig(t *testing.T, dst Inserter) *rig { return newRigWith(t, dst, false, 0) }

// newRigWith is newRig, with minutes one commit wrote whole summed from
// that commit (WithCarriedMinutes, sink.WithNewMinutes) if carry is set,
// as the gateway runs on the embedded store, and each commit held up to
// jitter before it is written, so that commits finish out of order.
func newRigWith(t *testing.T, dst Inserter, carry bool, jitter time.Duration) *rig {
	dir := t.TempDir()
	raw, err := pebblestore.Open(filepath.Join(dir, "raw"), pebblestore.Options{NoSync: true}, quiet)
	if err != nil {
		t.Fatal(err)
	}
	ob, err := outbox.Open(filepath.Join(dir, "outbox"), 64<<20, quiet)
	if err != nil {
		t.Fatal(err)
	}
	cfg := testConfig()
	cfg.BatchRows = 500
	reg := prometheus.NewRegistry()
	var opts []Option
	if _, ok := dst.(*rollupstore.Store); ok {
		opts = append(opts, WithLocalBackend()) // as the gateway runs it
	}
	sinkOpts := []sink.Option{}
	if carry {
		opts = append(opts, WithCarriedMinutes())
		sinkOpts = append(sinkOpts, sink.WithNewMinutes())
	}
	// Recomputes read through sessions, as the gateway runs them on Pebble.
	feed := newFeed(t, cfg, sessionStore{raw}, filepath.Join(dir, "marks"), ob, dst, reg, opts...)
	scfg := sink.DefaultConfig()
	var st sink.Store = raw
	bcfg := buckets.DefaultConfig()
	if jitter > 0 {
		st = &jitteredCommits{Store: raw, max: jitter}
		// Entries ahead of their partitions, as the gateway runs: a batch
		// that writes new minutes needs no entry of its own, so that no
		// catalogue dependency orders the commits.
		bcfg.Reserve = buckets.DefaultReserve(bcfg)
	}
	sk := sink.New(scfg, bcfg, st, quiet, reg, append(sinkOpts, sink.WithCommitHook(feed), sink.WithInFlightCheck())...)
	r := &rig{raw: raw, ob: ob, feed: feed, sink: sk, reg: reg}
	t.Cleanup(func() {
		r.close(t)
		_ = r.ob.Close()
		_ = r.raw.Close()
	})
	return r
}

// jitteredCommits holds each commit up to max before writing it.
type jitteredCommits struct {
	*pebblestore.Store
	max time.Duration
}

func (j *jitteredCommits) Commit(ctx context.Context, b *store.Batch) error {
	time.Sleep(rand.N(j.max))
	return j.Store.Commit(ctx, b)
}

func (r *rig) close(t *testing.T) {
	if r.sink == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := r.sink.Close(ctx); err != nil {
		t.Error(err)
	}
	if err := r.feed.Close(ctx); err != nil {
		t.Error(err)
	}
	r.sink = nil
}

// write stores readings of devices at 1 Hz over [start, start+secs) with
// two metrics whose values follow from device and second.
func (r *rig) write(t *testing.T, tenant string, devices []string, start time.Time, from, to int) {
	t.Helper()
	for s := from; s < to; s += 30 {
		req := &sink.Request{Tenant: tenant}
		for _, d := range devices {
			for i := s; i < min(s+30, to); i++ {
				req.Readings = append(req.Readings, model.Reading{DeviceID: d, TS: start.Add(time.Duration(i) * time.Second).UnixMilli(),
					Metrics: []model.Metric{{Name: "power", Value: float64(i % 7)}, {Name: "temp", Value: float64(len(d)) + float64(i%60)/4}}})
			}
		}
		if err := r.sink.Write(context.Background(), req); err != nil {
			t.Fatalf("write seconds %d..%d: %v", s, s+30, err)
		}
	}
}

// testConfig is the default configuration with minutes recomputed as soon
// as their commit is durable, on a fast tick.
func testConfig() Config {
	cfg := DefaultConfig()
	cfg.RollDelay, cfg.PastRollDelay, cfg.FlushInterval = 0, 0, 20*time.Millisecond
	return cfg
}

// newFeed starts a feed whose marks live in marksDir (closed when the test
// ends; the feed is not).
func newFeed(t *testing.T, cfg Config, raw reader.Store, marksDir string, ob Outbox, dst Inserter, reg prometheus.Registerer, opts ...Option) *Feed {
	t.Helper()
	marks := openMarks(t, marksDir)
	t.Cleanup(func() { _ = marks.Close() })
	return startFeed(t, cfg, time.Now, raw, marks, ob, dst, reg, opts...)
}

// openMarks opens a marks database in dir; the caller closes it.
func openMarks(t *testing.T, dir string) *rollmarks.Store {
	t.Helper()
	marks, err := rollmarks.Open(dir, quiet)
	if err != nil {
		t.Fatal(err)
	}
	return marks
}

// startFeed starts a feed on marks with the clock now.
func startFeed(t *testing.T, cfg Config, now func() time.Time, raw reader.Store, marks Marks, ob Outbox, dst Inserter, reg prometheus.Registerer, opts ...Option) *Feed {
	t.Helper()
	feed, err := New(cfg, raw, marks, ob, dst, now, testLogger(), reg, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return feed
}

// eventually polls cond until it holds or a generous deadline passes.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("gave up waiting: %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

var base = time.Now().UTC().Add(-3 * time.Hour).Truncate(time.Hour)

// TestOutboxDrainsAfterClickHouseRestart stops the shared ClickHouse of
// scripts/servers.sh; it holds the ClickHouse test lock exclusively
// (testenv.LockClickHouse), so no test of another package runs meanwhile.
func TestOutboxDrainsAfterClickHouseRestart(t *testing.T) {
	requireServer(t, true)
	ch := openCH(t)
	r := newRig(t, ch)
	devices := []string{"pump-1", "pump-2", "fan-3"}

	r.write(t, "acme", devices, base, 0, 120)
	eventually(t, "first two minutes shipped", func() bool {
		rows, err := ch.Rows(context.Background(), rollup.Filter{Tenant: "acme", From: base.UnixMilli(), To: base.Add(time.Hour).UnixMilli()})
		return err == nil && len(rows) == 2*2*len(devices)
	})

	servers(t, "stop", "clickhouse")
	stopped := true
	defer func() {
		if stopped {
			servers(t, "start", "clickhouse")
		}
	}()
	// Raw ingest goes on while ClickHouse is down; rollups wait in the outbox.
	r.write(t, "acme", devices, base, 120, 300)
	eventually(t, "rows of the last minutes waiting in the outbox", func() bool {
		return r.ob.Depth().Rows >= 2*len(devices)
	})
	depth := r.ob.Depth()
	t.Logf("outbox while ClickHouse is down: %+v", depth)

	servers(t, "start", "clickhouse")
	stopped = false
	eventually(t, "outbox drained", func() bool { return r.ob.Depth().Records == 0 })
	r.close(t)

	res, err := Verify(context.Background(), r.raw, ch, "acme", model.DayOf(base.UnixMilli()))
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Mismatches) != 0 || res.RawRows != int64(300*2*len(devices)) || res.RollupRows != res.RawRows {
		t.Errorf("verify after the restart: %+v", res)
	}
	// Exact values for one device: every minute of power has the same sum.
	got, err := ch.Series(context.Background(), rollup.Filter{Tenant: "acme", Device: "pump-1", Metric: "power", From: base.UnixMilli(), To: base.Add(time.Hour).UnixMilli()}, rollup.StepMinute)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 5 {
		t.Fatalf("%d minutes, want 5", len(got))
	}
	for i, b := range got {
		var sum float64
		mn, mx := 7.0, -1.0
		for s := i * 60; s < i*60+60; s++ {
			v := float64(s % 7)
			sum += v
			mn, mx = min(mn, v), max(mx, v)
		}
		want := rollup.Bucket{Start: base.Add(time.Duration(i) * time.Minute).UnixMilli(), Count: 60, Sum: sum, Min: mn, Max: mx,
			FirstTS: base.Add(time.Duration(i*60) * time.Second).UnixMilli(), FirstValue: float64(i * 60 % 7),
			LastTS: base.Add(time.Duration(i*60+59) * time.Second).UnixMilli(), LastValue: float64((i*60 + 59) % 7)}
		if diff := cmp.Diff(want, b); diff != "" {
			t.Errorf("minute %d (-want +got):\n%s", i, diff)
		}
	}
}

// backends runs a test against ClickHouse and the embedded rollup store.
func backends(t *testing.T, fn func(t *testing.T, dst Backend)) {
	t.Run("clickhouse", func(t *testing.T) {
		requireServer(t, false)
		fn(t, openCH(t))
	})
	t.Run("embedded", func(t *testing.T) {
		s, err := rollupstore.Open(t.TempDir(), quiet)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = s.Close() })
		fn(t, s)
	})
}

func TestRebuildAndVerifyAfterDamage(t *testing.T) {
	backends(t, func(t *testing.T, dst Backend) {
		ctx := context.Background()
		r := newRig(t, dst)
		devices := []string{"a", "b", "c"}
		r.write(t, "acme", devices, base, 0, 180)
		// A late reading for the first minute, after it was emitted.
		eventually(t, "first minute emitted", func() bool { return r.ob.Depth().Records == 0 && testutil.ToFloat64(r.feed.m.shipped) >= 18 })
		if err := r.sink.Write(ctx, &sink.Request{Tenant: "acme", Readings: []model.Reading{
			{DeviceID: "a", TS: base.Add(500 * time.Millisecond).UnixMilli(), Metrics: []model.Metric{{Name: "power", Value: 100}}}}}); err != nil {
			t.Fatal(err)
		}
		r.close(t)
		day := model.DayOf(base.UnixMilli())
		from, to := base.UnixMilli(), base.Add(time.Hour).UnixMilli()
		series := func(device string) []rollup.Bucket {
			rows, err := dst.Rows(ctx, rollup.Filter{Tenant: "acme", Device: device, Metric: "power", From: from, To: to})
			if err != nil {
				t.Fatal(err)
			}
			return rollup.Combine(rows, rollup.StepMinute)
		}
		before := series("a")
		if before[0].Count != 61 || before[0].Max != 100 {
			t.Errorf("first minute of a after the late reading: %+v", before[0])
		}

		res, err := Verify(ctx, r.raw, dst, "acme", day)
		if err != nil {
			t.Fatal(err)
		}
		if len(res.Mismatches) != 0 || res.RawRows != 3*180*2+1 {
			t.Fatalf("verify before damage: %+v", res)
		}

		// Damage: delete a's power rows, corrupt b's temp count, add a
		// double-counted part for c.
		rows, err := dst.Rows(ctx, rollup.Filter{Tenant: "acme", From: from, To: to})
		if err != nil {
			t.Fatal(err)
		}
		var damage []rollup.Row
		for _, x := range rows {
			switch {
			case x.Device == "a" && x.Metric == "power":
				damage = append(damage, rollup.Row{Key: x.Key, Writer: x.Writer, Part: x.Part, Version: x.Version + 1})
				if x.Minute == base.Add(time.Minute).UnixMilli() {
					// Rollups of devices with no raw readings, named between
					// two that have some, and after the last.
					x.Device = "bb"
					damage = append(damage, x)
					x.Device = "d"
					damage = append(damage, x)
				}
			case x.Device == "b" && x.Metric == "temp" && x.Minute == base.UnixMilli():
				x.Count += 5
				x.Version++
				damage = append(damage, x)
			case x.Device == "c" && x.Metric == "power" && x.Minute == base.Add(time.Minute).UnixMilli():
				x.Part++
				damage = append(damage, x)
			}
		}
		if err := dst.Insert(ctx, damage); err != nil {
			t.Fatal(err)
		}
		res, err = Verify(ctx, r.raw, dst, "acme", day)
		if err != nil {
			t.Fatal(err)
		}
		want := []Mismatch{
			{Device: "a", Metric: "power", Raw: 181, Rollup: 0, Diffs: []string{"count: raw 181, rollup 0", "float_count: raw 181, rollup 0"}},
			{Device: "b", Metric: "temp", Raw: 180, Rollup: 185, Diffs: []string{"count: raw 180, rollup 185", "float_count: raw 180, rollup 185"}},
			{Device: "bb", Metric: "power", Raw: 0, Rollup: 60, Diffs: []string{"count: raw 0, rollup 60", "float_count: raw 0, rollup 60"}},
			{Device: "c", Metric: "power", Raw: 180, Rollup: 240, Diffs: []string{"count: raw 180, rollup 240", "float_count: raw 180, rollup 240"}},
			{Device: "d", Metric: "power", Raw: 0, Rollup: 60, Diffs: []string{"count: raw 0, rollup 60", "float_count: raw 0, rollup 60"}},
		}
		if diff := cmp.Diff(want, res.Mismatches); diff != "" {
			t.Errorf("mismatches after damage (-want +got):\n%s", diff)
		}
		// A device or two at a time, each slice of names read on its own,
		// finds the same.
		opened := 0
		sessions := func(ctx context.Context) (ReadSession, error) { opened++; return r.raw.NewReads(ctx) }
		for _, chunk := range []int{1, 2, 1000} {
			counted := &rowsCounter{Backend: dst}
			open := sessions
			if chunk == 2 {
				open = nil // through the store itself
			}
			opened = 0
			got, err := verify(ctx, r.raw, counted, "acme", day, chunk, open)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(res, got); diff != "" {
				t.Errorf("verify %d devices at a time differs (-all +chunked):\n%s", chunk, diff)
			}
			if counted.most > chunk {
				t.Errorf("verify %d devices at a time read the rollups of %d devices at once", chunk, counted.most)
			}
			if open != nil && opened == 0 {
				t.Errorf("verify %d devices at a time opened no read session", chunk)
			}
		}
		// Devices whose first rollups come after the list of devices was
		// read (here: left out of it) are verified with their range.
		for _, chunk := range []int{1, 2} {
			got, err := verify(ctx, r.raw, &hideDevices{Backend: dst, hide: []string{"bb", "d"}}, "acme", day, chunk, nil)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(res, got); diff != "" {
				t.Errorf("verify %d at a time, bb and d missing from the list, differs (-all +chunked):\n%s", chunk, diff)
			}
		}

		var steps []Progress
		rb, err := Rebuild(ctx, r.raw, dst, "acme", "", from, to, Version(time.Now()), func(p Progress) { steps = append(steps, p) })
		if err != nil {
			t.Fatal(err)
		}
		// bb and d, with rollups and no readings, are rebuilt too: to
		// nothing.
		if rb.DeviceDays != 5 || rb.Readings != 3*180*2+1 || len(steps) != 5 || steps[4].Done != 5 || steps[4].Total != 5 {
			t.Errorf("rebuild result %+v, progress %+v", rb, steps)
		}
		res, err = Verify(ctx, r.raw, dst, "acme", day)
		if err != nil {
			t.Fatal(err)
		}
		if len(res.Mismatches) != 0 || res.RollupRows != res.RawRows {
			t.Errorf("verify after rebuild: %+v", res)
		}
		if diff := cmp.Diff(before, series("a")); diff != "" {
			t.Errorf("a's power after rebuild differs from the live rollups (-live +rebuilt):\n%s", diff)
		}
		// Rebuilding again changes nothing.
		if _, err := Rebuild(ctx, r.raw, dst, "acme", "b", from, to, Version(time.Now()), nil); err != nil {
			t.Fatal(err)
		}
		if res, _ := Verify(ctx, r.raw, dst, "acme", day); len(res.Mismatches) != 0 {
			t.Errorf("verify after a second rebuild: %+v", res.Mismatches)
		}
	})
}

func TestDirtyList(t *testing.T) {
	tests := []struct {
		name  string
		marks []outbox.DirtyDay
		want  string
	}{
		{"none", nil, ""},
		{"tenant and legacy", []outbox.DirtyDay{{Tenant: "acme", Day: 20000}, {Day: 20001}}, "acme/2024-10-04, */2024-10-05"},
		{"long", slices.Repeat([]outbox.DirtyDay{{Tenant: "a", Day: 20000}}, 23), strings.Repeat("a/2024-10-04, ", 20) + "and 3 more (GET /v1/rollups/status lists a tenant's)"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := DirtyList(tc.marks); got != tc.want {
				t.Errorf("DirtyList = %q, want %q", got, tc.want)
			}
		})
	}
}

// rowsCounter records the most devices one Rows call returned rows of.
type rowsCounter struct {
	Backend
	most int
}

func (c *rowsCounter) Rows(ctx context.Context, f rollup.Filter) ([]rollup.Row, error) {
	rows, err := c.Backend.Rows(ctx, f)
	devices := map[string]bool{}
	for _, r := range rows {
		devices[r.Device] = true
	}
	c.most = max(c.most, len(devices))
	return rows, err
}

// hideDevices leaves some devices out of the list of devices with rollups,
// as if their first rollups came after it was read.
type hideDevices struct {
	Backend
	hide []string
}

func (h *hideDevices) Devices(ctx context.Context, tenant string, day model.Day) ([]string, error) {
	ds, err := h.Backend.Devices(ctx, tenant, day)
	return slices.DeleteFunc(ds, func(d string) bool { return slices.Contains(h.hide, d) }), err
}

// sessionStore offers a Pebble store's read sessions, as cmd/ingest does.
type sessionStore struct{ *pebblestore.Store }

func (s sessionStore) NewSession(ctx context.Context) (ReadSession, error) { return s.NewReads(ctx) }
