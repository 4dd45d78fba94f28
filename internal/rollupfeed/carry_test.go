package rollupfeed

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	gocmp "github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice/internal/model"
	"github.com/sluicehq/sluice/internal/rollmarks"
	"github.com/sluicehq/sluice/internal/rollup"
	"github.com/sluicehq/sluice/internal/rollupstore"
	"github.com/sluicehq/sluice/internal/sink"
)

// The rollups of minutes summed from the commit that wrote them
// (WithCarriedMinutes) are the rollups a recompute from the raw store
// makes of the same writes, whatever the writes: a minute written by
// several requests, a late reading, a reading sent twice, two values of
// one cell in one request, typed values. A verify against the raw store
// finds them exact.
func TestCarriedRowsAsRecomputed(t *testing.T) {
	at := func(min, sec int) int64 {
		return base.Add(time.Duration(min)*time.Minute + time.Duration(sec)*time.Second).UnixMilli()
	}
	reading := func(dev string, ts int64, ms ...model.Metric) model.Reading {
		return model.Reading{DeviceID: dev, TS: ts, Metrics: ms}
	}
	f := func(name string, v float64) model.Metric { return model.Metric{Name: name, Value: v} }
	tests := []struct {
		name     string
		requests [][]model.Reading
		carried  int  // minutes summed from their commit
		live     bool // the readings are days ahead of the clock, not in the past
	}{
		{name: "a reading a minute", requests: [][]model.Reading{
			{reading("a", at(0, 5), f("t", 1), f("h", 2)), reading("b", at(0, 7), f("t", 3))},
			{reading("a", at(1, 5), f("t", 4))},
			{reading("a", at(2, 5), f("t", 5)), reading("b", at(2, 9), f("t", 6))},
		}, carried: 5},
		{name: "a minute written by several requests", requests: [][]model.Reading{
			{reading("a", at(0, 5), f("t", 1))},
			{reading("a", at(0, 15), f("t", 2))},
			{reading("a", at(0, 25), f("t", 9), f("h", 1))},
		}, carried: 1},
		{name: "a late reading into a carried minute", requests: [][]model.Reading{
			{reading("a", at(3, 5), f("t", 1))},
			{reading("a", at(5, 5), f("t", 2))},
			{reading("a", at(3, 1), f("t", 7))},
		}, carried: 2},
		{name: "a request sent twice", requests: [][]model.Reading{
			{reading("a", at(0, 5), f("t", 1)), reading("a", at(1, 5), f("t", 2))},
			{reading("a", at(0, 5), f("t", 1)), reading("a", at(1, 5), f("t", 2))},
		}, carried: 2},
		{name: "one cell twice in a request", requests: [][]model.Reading{
			{reading("a", at(0, 5), f("t", 1), f("h", 5)), reading("a", at(0, 5), f("t", 8)), reading("a", at(0, 9), f("t", 2))},
		}, carried: 1},
		{name: "typed values", requests: [][]model.Reading{
			{reading("a", at(0, 1), model.IntMetric("n", 7), model.BoolMetric("on", true), model.StringMetric("s", "idle")),
				reading("a", at(0, 2), model.IntMetric("n", -3), model.BoolMetric("on", false), model.StringMetric("s", "run"))},
			{reading("a", at(1, 1), model.StringMetric("s", "stop"), f("t", 0.5))},
		}, carried: 2},
		{name: "minutes of two days", requests: [][]model.Reading{
			{reading("a", at(-1, 0), f("t", 1)), reading("a", at(0, 0), f("t", 2))},
		}, carried: 2},
		// Minutes that have not ended (here: a device's clock ahead). A
		// device that wrote the minute before waits for its recompute;
		// one whose minute before had no write is carried.
		{name: "live minutes", live: true, requests: [][]model.Reading{
			{reading("a", at(0, 0), f("t", 1)), reading("b", at(0, 0), f("t", 1))},
			{reading("a", at(0, 10), f("t", 2)), reading("b", at(2, 0), f("t", 2))},
			{reading("a", at(0, 20), f("t", 3)), reading("b", at(3, 0), f("t", 3))},
			{reading("a", at(1, 0), f("t", 4)), reading("b", at(3, 30), f("t", 4))},
		}, carried: 3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := context.Background()
			var shift int64
			if tt.live {
				// Days ahead, so that a minute and the one before are on
				// one day as for the others.
				shift = time.Now().Add(48 * time.Hour).Truncate(24 * time.Hour).Sub(base).Milliseconds()
			}
			at := func(min, sec int) int64 { return at(min, sec) + shift }
			rows := func(carry bool) []rollup.Row {
				dst, err := rollupstore.Open(t.TempDir(), quiet)
				if err != nil {
					t.Fatal(err)
				}
				defer dst.Close()
				r := newRigWith(t, dst, carry, 0)
				for _, req := range tt.requests {
					req = slices.Clone(req)
					for i := range req {
						req[i].TS += shift
					}
					if err := r.sink.Write(ctx, &sink.Request{Tenant: "acme", Readings: req}); err != nil {
						t.Fatal(err)
					}
				}
				r.close(t)
				if got, want := int(testutil.ToFloat64(r.feed.m.carried)), map[bool]int{true: tt.carried}[carry]; got != want {
					t.Errorf("carry %t: %d minutes carried, want %d", carry, got, want)
				}
				for _, day := range []model.Day{model.DayOf(at(-1, 0)), model.DayOf(at(0, 0))} {
					res, err := Verify(ctx, r.raw, dst, "acme", day)
					if err != nil {
						t.Fatal(err)
					}
					if len(res.Mismatches) != 0 {
						t.Errorf("carry %t: verify of day %d: %+v", carry, day, res.Mismatches)
					}
				}
				got, err := dst.Rows(ctx, rollup.Filter{Tenant: "acme", From: at(-60, 0), To: at(60, 0)})
				if err != nil {
					t.Fatal(err)
				}
				return rollup.Latest(got)
			}
			ignoreVersion := gocmp.Transformer("noVersion", func(r rollup.Row) rollup.Row { r.Version = 0; return r })
			want, got := rows(false), rows(true)
			if len(want) == 0 {
				t.Fatal("no rollups recomputed")
			}
			byKey := cmpopts.SortSlices(func(a, b rollup.Row) bool {
				return cmp.Or(strings.Compare(a.Device, b.Device), strings.Compare(a.Metric, b.Metric), cmp.Compare(a.Minute, b.Minute)) < 0
			})
			if diff := gocmp.Diff(want, got, ignoreVersion, byKey); diff != "" {
				t.Errorf("carried rollups differ from recomputed ones (-recomputed +carried):\n%s", diff)
			}
		})
	}
}

// versionFailingMarks fails SetVersion while fail is set.
type versionFailingMarks struct {
	*rollmarks.Store
	fail atomic.Bool
}

func (m *versionFailingMarks) SetVersion(v uint64) error {
	if m.fail.Load() {
		return errors.New("disk full")
	}
	return m.Store.SetVersion(v)
}

// Carried rows whose roll cannot keep its version are kept for the next
// roll, with their marks, and stored once it can: nothing is lost, and
// the marks go only then.
func TestCarriedRowsWaitForTheVersion(t *testing.T) {
	emb, ob := openLocal(t)
	defer ob.Close()
	dir := t.TempDir()
	raw := openRaw(t, dir)
	marks := &versionFailingMarks{Store: openMarks(t, filepath.Join(dir, "marks"))}
	defer marks.Store.Close()
	marks.fail.Store(true)
	feed := startFeed(t, testConfig(), time.Now, raw, marks, ob, emb, prometheus.NewRegistry(), WithLocalBackend(), WithCarriedMinutes())
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for i, dev := range []string{"a", "b"} {
		b := minuteBatch(dev, 5+i)
		pw := &b.Partitions[0]
		pw.NewFrom = math.MinInt64 // as the sink says of a series-day's first write
		ts := pw.Readings[0].TS
		b.Catalogue = []model.PartitionInfo{{Key: pw.Key, Rows: 1, Bytes: pw.Readings[0].Size(), MinTS: ts, MaxTS: ts, State: "single"}}
		if err := feed.BeforeCommit(b); err != nil {
			t.Fatal(err)
		}
		if err := raw.Commit(ctx, b); err != nil {
			t.Fatal(err)
		}
		feed.AfterCommit(b, nil)
		time.Sleep(100 * time.Millisecond) // a few rolls, all failing
	}
	if got := markedMinutes(t, marks.Store); len(got) != 2 {
		t.Fatalf("marks while the version cannot be kept: %v, want both minutes", got)
	}
	stored := func() int {
		rows, err := emb.Rows(ctx, rollup.Filter{Tenant: "acme", From: base.UnixMilli(), To: base.Add(time.Hour).UnixMilli()})
		if err != nil {
			t.Fatal(err)
		}
		return len(rows)
	}
	if n := stored(); n != 0 {
		t.Fatalf("%d rows stored while the version cannot be kept", n)
	}
	marks.fail.Store(false)
	eventually(t, "both carried minutes stored", func() bool { return stored() == 2 })
	eventually(t, "their marks forgotten", func() bool { return len(markedMinutes(t, marks.Store)) == 0 })
	if got, rolled := testutil.ToFloat64(feed.m.carried), testutil.ToFloat64(feed.m.rolled); got != 2 || rolled != 0 {
		t.Errorf("%v minutes carried and %v recomputed, want 2 and 0", got, rolled)
	}
	closeFeed(t, feed)
	res, err := Verify(ctx, raw, emb, "acme", model.DayOf(base.UnixMilli()))
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Mismatches) != 0 || res.RollupRows != 2 {
		t.Errorf("verify: %+v", res)
	}
}

// Requests written at once by many clients, to a few devices, with late
// readings, repeats and minutes shared between requests, committed out of
// order (each held up to 30 ms, entries ahead as the gateway runs): the
// rollups of minutes summed from their commit and of those read back add
// up to the raw store, minute by minute. (The order the sink keeps after
// a claim is tested deterministically in package sink: without it this
// test failed once in ten runs.)
func TestCarriedRowsUnderConcurrentWrites(t *testing.T) {
	ctx := context.Background()
	dst, err := rollupstore.Open(t.TempDir(), quiet)
	if err != nil {
		t.Fatal(err)
	}
	defer dst.Close()
	r := newRigWith(t, dst, true, 30*time.Millisecond)
	const clients, requests, devices = 8, 60, 6
	var wg sync.WaitGroup
	for c := range clients {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(c), 7))
			for i := range requests {
				var rs []model.Reading
				for range 1 + rng.IntN(8) {
					// Mostly forward in time, request by request; now and
					// then late, or on a second already written.
					sec := (i*clients+c)*7 + rng.IntN(20)
					if rng.IntN(8) == 0 {
						sec = rng.IntN(max(1, sec))
					}
					rs = append(rs, model.Reading{DeviceID: fmt.Sprint("d", rng.IntN(devices)), TS: base.Add(time.Duration(sec) * time.Second).UnixMilli(),
						Metrics: []model.Metric{{Name: "v", Value: float64(rng.IntN(1000)) / 8}, model.IntMetric("n", int64(rng.IntN(50)))}})
				}
				if err := r.sink.Write(ctx, &sink.Request{Tenant: "acme", Readings: rs}); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	r.close(t)
	carried, rolled := testutil.ToFloat64(r.feed.m.carried), testutil.ToFloat64(r.feed.m.rolled)
	if carried == 0 || rolled == 0 {
		t.Fatalf("%v minutes carried, %v recomputed: the test wants both", carried, rolled)
	}
	res, err := Verify(ctx, r.raw, dst, "acme", model.DayOf(base.UnixMilli()))
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Mismatches) != 0 {
		t.Errorf("verify: %d mismatches of %d devices: %+v", len(res.Mismatches), res.Devices, res.Mismatches)
	}
}
