package sink

import (
	"context"
	"fmt"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"

	"github.com/sluicehq/sluice/internal/buckets"
	"github.com/sluicehq/sluice/internal/model"
)

// TestCommitMetrics checks the metrics of a commit: its latency and size
// histograms, the series-days held and the queue's capacity.
func TestCommitMetrics(t *testing.T) {
	cfg := testConfig()
	s := start(t, cfg, testBuckets(), tempStore(t))
	if got := testutil.ToFloat64(s.m.queueCapacity); got != float64(cfg.QueueRows) {
		t.Errorf("queue capacity %v, want sink.queue_rows %d", got, cfg.QueueRows)
	}
	for i, dev := range []string{"a", "b", "c"} {
		if err := s.Write(context.Background(), &Request{Tenant: tenant, Readings: []model.Reading{reading(dev, base+int64(i), "x", "y")}}); err != nil {
			t.Fatalf("Write: %v", err)
		}
	}
	commits := testutil.ToFloat64(s.m.commits)
	if commits < 1 {
		t.Fatalf("commits %v, want at least 1", commits)
	}
	// Each histogram observes once per commit.
	for name, h := range map[string]prometheus.Histogram{"commit_seconds": s.m.commitSeconds, "batch_rows": s.m.batchRows} {
		if n := histogramCount(t, h); float64(n) != commits {
			t.Errorf("%s observed %d times, want once per commit (%v)", name, n, commits)
		}
	}
	if sum := histogramSum(t, s.m.batchRows); sum != 6 {
		t.Errorf("batch_rows sum %v, want the 6 rows written", sum)
	}
	if got := testutil.ToFloat64(s.m.seriesDays); got != 3 {
		t.Errorf("series-days held %v, want 3", got)
	}
}

// TestSplitPartitionsMetric checks that sluice_buckets_split_partitions_max
// follows the noisiest series-day of the newest days, and that the limit it
// is compared with is exported.
func TestSplitPartitionsMetric(t *testing.T) {
	bcfg := testBuckets() // 20 rows per partition
	s := start(t, testConfig(), bcfg, tempStore(t))
	if got := testutil.ToFloat64(s.m.splitsLimit); got != buckets.MaxSplits {
		t.Errorf("split limit %v, want %d", got, buckets.MaxSplits)
	}
	write := func(dev string, ts int64, n int) {
		t.Helper()
		rs := make([]model.Reading, n)
		for i := range rs {
			rs[i] = reading(dev, ts+int64(i), "a")
		}
		if err := s.Write(context.Background(), &Request{Tenant: tenant, Readings: rs}); err != nil {
			t.Fatalf("Write: %v", err)
		}
	}
	write("quiet", base, 5)
	if got := testutil.ToFloat64(s.m.splitsMax); got != 0 {
		t.Errorf("after a quiet device: %v, want 0", got)
	}
	// 20 rows fill the single partition, then 90 rows fill 4 splits and
	// open a fifth.
	write("noisy", base, 110)
	if got := testutil.ToFloat64(s.m.splitsMax); got != 5 {
		t.Errorf("after a noisy device: %v, want 5", got)
	}
	// The next day keeps the previous one in view...
	write("quiet", base+day, 5)
	if got := testutil.ToFloat64(s.m.splitsMax); got != 5 {
		t.Errorf("next day: %v, want yesterday's 5 still", got)
	}
	// ...the day after drops it.
	write("quiet", base+2*day, 5)
	if got := testutil.ToFloat64(s.m.splitsMax); got != 0 {
		t.Errorf("two days on: %v, want 0", got)
	}
	// A late write to an old day does not count.
	write("late", base, 60)
	if got := testutil.ToFloat64(s.m.splitsMax); got != 0 {
		t.Errorf("after a late noisy write: %v, want 0", got)
	}
}

// TestOverBoundMetric reopens a store with a smaller partition bound: the
// catalogue entries loaded past it are counted; those within it are not.
func TestOverBoundMetric(t *testing.T) {
	dir := t.TempDir()
	st := openStore(t, dir)
	big := testBuckets()
	big.MaxRows = 100
	s := New(testConfig(), big, st, discard, prometheus.NewRegistry(), WithInFlightCheck())
	rs := make([]model.Reading, 50)
	for i := range rs {
		rs[i] = reading("dev", base+int64(i), "a")
	}
	if err := s.Write(context.Background(), &Request{Tenant: tenant, Readings: rs}); err != nil {
		t.Fatalf("Write: %v", err)
	}
	if got := testutil.ToFloat64(s.m.overBound); got != 0 {
		t.Errorf("within the bound: %v, want 0", got)
	}
	if err := s.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}

	st = openStore(t, dir)
	defer st.Close()
	small := testBuckets() // 20 rows: the 50-row partition is past it
	s = New(testConfig(), small, st, discard, prometheus.NewRegistry(), WithInFlightCheck())
	defer s.Close(context.Background())
	if err := s.Write(context.Background(), &Request{Tenant: tenant, Readings: []model.Reading{reading("dev", base+100, "a"), reading("other", base, "a")}}); err != nil {
		t.Fatalf("Write: %v", err)
	}
	if got := testutil.ToFloat64(s.m.overBound); got != 1 {
		t.Errorf("after loading a 50-row entry with max_rows 20: %v, want 1", got)
	}
}

func histogramCount(t *testing.T, h prometheus.Histogram) uint64 {
	t.Helper()
	return writeMetric(t, h).GetHistogram().GetSampleCount()
}

func histogramSum(t *testing.T, h prometheus.Histogram) float64 {
	t.Helper()
	return writeMetric(t, h).GetHistogram().GetSampleSum()
}

func writeMetric(t *testing.T, c prometheus.Metric) *dto.Metric {
	t.Helper()
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		t.Fatal(err)
	}
	return &m
}

// TestSplitDays checks the two days the split gauge keeps, step by step.
func TestSplitDays(t *testing.T) {
	var sp splitDays
	for i, tt := range []struct {
		day    model.Day
		n      int
		top    int
		ok     bool
		reason string
	}{
		{100, 3, 3, true, "first day seen"},
		{100, 1, 3, true, "a smaller number keeps the day's largest"},
		{99, 7, 7, true, "the day before the newest counts"},
		{98, 9, 0, false, "two days before the newest is ignored"},
		{101, 2, 3, true, "a new day keeps the one before (100's 3), drops 99's 7"},
		{104, 1, 1, true, "a jump of several days forgets both"},
		{105, 0, 1, true, "the day before keeps its 1"},
		{106, 0, 0, true, "and is forgotten a day later"},
	} {
		top, ok := sp.note(tt.day, tt.n)
		if top != tt.top || ok != tt.ok {
			t.Errorf("step %d (%s): note(%d, %d) = %d, %v; want %d, %v", i, tt.reason, tt.day, tt.n, top, ok, tt.top, tt.ok)
		}
	}
}

// TestResolvingReset: resolve's scratch keeps its room from round to
// round, emptied, unless a round made it larger than maxResolving.
func TestResolvingReset(t *testing.T) {
	for _, tt := range []struct {
		n    int
		keep bool
	}{{10, true}, {maxResolving, true}, {maxResolving + 1, false}} {
		rs := resolving{index: map[model.SeriesDay]int{}}
		for i := range tt.n {
			sd := model.SeriesDay{Tenant: tenant, Series: fmt.Sprint(i)}
			rs.index[sd] = i
			rs.missing = append(rs.missing, sd)
			rs.fills = append(rs.fills, fill{i: i})
		}
		rs.reset()
		if len(rs.index) != 0 || len(rs.missing) != 0 || len(rs.fills) != 0 {
			t.Errorf("%d series-days: not emptied (%d, %d, %d)", tt.n, len(rs.index), len(rs.missing), len(rs.fills))
		}
		if kept := rs.index != nil && cap(rs.missing) >= tt.n; kept != tt.keep {
			t.Errorf("%d series-days: room kept %v, want %v", tt.n, kept, tt.keep)
		}
		if tt.keep && rs.missing[:tt.n][tt.n-1] != (model.SeriesDay{}) {
			t.Errorf("%d series-days: the emptied slice still points to a series-day", tt.n)
		}
	}
}
