package rollupfeed

import (
	"cmp"
	"context"
	"math"
	"testing"
	"time"

	gocmp "github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/sluicehq/sluice/internal/model"
	"github.com/sluicehq/sluice/internal/rollup"
	"github.com/sluicehq/sluice/internal/sink"
)

// TestTypedRollups: int, bool and string readings written through the
// sink become typed rollups in each backend, with int sums exact past
// int64; verify is clean, finds damage that keeps every count (an int sum,
// a true count: what comparing counts alone missed) and rebuild restores
// the live rows.
var sortRows = cmpopts.SortSlices(func(a, b rollup.Row) bool {
	return cmp.Compare(a.Metric, b.Metric)*2+cmp.Compare(a.Minute, b.Minute) < 0
})

func TestTypedRollups(t *testing.T) {
	backends(t, func(t *testing.T, dst Backend) {
		ctx := context.Background()
		r := newRig(t, dst)
		var readings []model.Reading
		for i := range 90 {
			ms := []model.Metric{
				model.IntMetric("n", math.MaxInt64-int64(i)),
				model.BoolMetric("on", i%3 == 0),
				model.StringMetric("state", []string{"idle", "run", "stop"}[i%3]),
			}
			// A metric whose type changes every 10 s.
			switch i / 10 % 4 {
			case 0:
				ms = append(ms, model.Metric{Name: "mix", Value: float64(i) / 2})
			case 1:
				ms = append(ms, model.IntMetric("mix", int64(i)))
			case 2:
				ms = append(ms, model.BoolMetric("mix", i%2 == 0))
			default:
				ms = append(ms, model.StringMetric("mix", "s"))
			}
			readings = append(readings, model.Reading{DeviceID: "d", TS: base.Add(time.Duration(i) * time.Second).UnixMilli(), Metrics: ms})
		}
		if err := r.sink.Write(ctx, &sink.Request{Tenant: "acme", Readings: readings}); err != nil {
			t.Fatal(err)
		}
		r.close(t)
		from, to := base.UnixMilli(), base.Add(time.Hour).UnixMilli()
		f := rollup.Filter{Tenant: "acme", Device: "d", From: from, To: to}
		live, err := dst.Rows(ctx, f)
		if err != nil {
			t.Fatal(err)
		}
		want := rollup.Compute("acme", "d", readings, 0)
		ignoreVersion := gocmp.Transformer("noVersion", func(r rollup.Row) rollup.Row { r.Version = 0; return r })
		if diff := gocmp.Diff(want, rollup.Latest(live), ignoreVersion, sortRows); diff != "" {
			t.Fatalf("live typed rollups (-want +got):\n%s", diff)
		}
		var n, on rollup.Bucket
		for _, x := range live {
			switch x.Metric {
			case "n":
				n.Merge(x)
			case "on":
				on.Merge(x)
			}
		}
		// 90×MaxInt64 − (0+…+89), exactly.
		if got, want := n.IntSum.String(), "830103483316929818625"; got != want || n.IntCount != 90 || n.Count != 90 {
			t.Errorf("n: int sum %s (want %s), int count %d, count %d", got, want, n.IntCount, n.Count)
		}
		if on.BoolCount != 90 || on.TrueCount != 30 || !on.BoolFirst || on.BoolLast {
			t.Errorf("on: %+v, want 90 bools, 30 true, first true, last false", on.Typed)
		}

		day := model.DayOf(from)
		res, err := Verify(ctx, r.raw, dst, "acme", day)
		if err != nil {
			t.Fatal(err)
		}
		if len(res.Mismatches) != 0 || res.RawRows != 4*90 || res.RollupRows != 4*90 || res.Metrics != 4 {
			t.Fatalf("verify of the live rollups: %+v", res)
		}

		// Damage that keeps every count: a wrong int sum, a wrong true count.
		var damage []rollup.Row
		for _, x := range live {
			switch {
			case x.Metric == "n" && x.Minute == from:
				x.IntSum = x.IntSum.Add(rollup.Int128Of(1))
			case x.Metric == "on" && x.Minute == from:
				x.TrueCount--
			default:
				continue
			}
			x.Version++
			damage = append(damage, x)
		}
		if err := dst.Insert(ctx, damage); err != nil {
			t.Fatal(err)
		}
		res, err = Verify(ctx, r.raw, dst, "acme", day)
		if err != nil {
			t.Fatal(err)
		}
		wantMis := []Mismatch{
			{Device: "d", Metric: "n", Raw: 90, Rollup: 90, Diffs: []string{"int_sum: raw 830103483316929818625, rollup 830103483316929818626"}},
			{Device: "d", Metric: "on", Raw: 90, Rollup: 90, Diffs: []string{"true_count: raw 30, rollup 29"}},
		}
		if diff := gocmp.Diff(wantMis, res.Mismatches); diff != "" {
			t.Errorf("mismatches after damage (-want +got):\n%s", diff)
		}

		if _, err := Rebuild(ctx, r.raw, dst, "acme", "", from, to, Version(time.Now()), nil); err != nil {
			t.Fatal(err)
		}
		res, err = Verify(ctx, r.raw, dst, "acme", day)
		if err != nil || len(res.Mismatches) != 0 {
			t.Errorf("verify after rebuild: %+v, %v", res, err)
		}
		rebuilt, err := dst.Rows(ctx, f)
		if err != nil {
			t.Fatal(err)
		}
		if diff := gocmp.Diff(want, rollup.Latest(rebuilt), ignoreVersion, sortRows); diff != "" {
			t.Errorf("rebuilt typed rollups (-want +got):\n%s", diff)
		}
	})
}
