package buckets_test

import (
	"testing"

	"github.com/sluicehq/sluice/internal/buckets"
	"github.com/sluicehq/sluice/internal/model"
)

// TestReconciles: one gateway owning the store reconciles every entry left
// ahead; with per-writer partitions only the entries of its own slot.
func TestReconciles(t *testing.T) {
	tests := []struct {
		name      string
		perWriter bool
		writer    int
		sub       uint32
		want      bool
	}{
		{"embedded, shared single", false, 0, 0, true},
		{"embedded, split of another slot", false, 0, buckets.SubID(3, 1), true},
		{"per writer, own single", true, 2, buckets.SingleID(2), true},
		{"per writer, own split", true, 2, buckets.SubID(2, 4), true},
		{"per writer, other single", true, 2, buckets.SingleID(1), false},
		{"per writer, other split", true, 2, buckets.SubID(0, 1), false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg := reserveConfig()
			cfg.PerWriterSingle, cfg.Writer = tc.perWriter, tc.writer
			if got := buckets.New(cfg).Reconciles(tc.sub); got != tc.want {
				t.Errorf("Reconciles(%#x) = %v, want %v", tc.sub, got, tc.want)
			}
		})
	}
}

// TestReconcileAfterCrash: an entry left ahead by a gateway that was killed
// claims more rows than its partition holds. Reloaded and reconciled with
// the counted rows, the planner settles it exact, counts on from the exact
// count and fills the partition to its bound, not to the bound less the
// claim.
func TestReconcileAfterCrash(t *testing.T) {
	cfg := reserveConfig() // 100 rows, reserve 10
	ts := sdA.Day.Start() + 10_000
	claim := model.PartitionInfo{Key: sdA.Partition(0), Rows: 50, Bytes: 500, MinTS: ts - 1000, MaxTS: ts + 1040,
		State: buckets.StateSingle, Ahead: true}
	exact := model.PartitionInfo{Key: sdA.Partition(0), Rows: 40, Bytes: 400, MinTS: ts, MaxTS: ts + 40}

	p := buckets.New(cfg)
	s := p.Load(sdA, []model.PartitionInfo{claim})
	p.Reconcile(s, exact)
	got := p.SettleSeries([]model.SeriesDay{sdA})
	want := exact
	want.State = buckets.StateSingle
	if len(got) != 1 || got[0].Info != want {
		t.Fatalf("SettleSeries after Reconcile = %+v, want the exact entry %+v", got, want)
	}
	// 60 more one-row units fit: the partition closes at 100 rows.
	for i := range 60 {
		if pk := assign(t, p, sdA, unit{ts + int64(i), 1, 10}); pk.Sub != 0 {
			t.Fatalf("unit %d went to sub-bucket %#x: the partition closed early", 40+i, pk.Sub)
		}
	}
	if pk := assign(t, p, sdA, unit{ts, 1, 10}); pk.Sub == 0 {
		t.Fatal("unit 101 went to the full partition")
	}
	var closed model.PartitionInfo
	for _, e := range p.TakeDirty() {
		if e.Key.Sub == 0 {
			closed = e
		}
	}
	if !closed.Closed || closed.Ahead || closed.Rows != 100 {
		t.Errorf("closing entry %+v, want closed, exact, 100 rows", closed)
	}
}

// TestUnreconciledStaysAhead: an entry of another writer's slot, loaded
// without Reconcile, is never written back as if it were exact.
func TestUnreconciledStaysAhead(t *testing.T) {
	cfg := reserveConfig()
	ts := sdA.Day.Start() + 10_000
	claim := model.PartitionInfo{Key: sdA.Partition(0), Rows: 50, Bytes: 500, MinTS: ts, MaxTS: ts,
		State: buckets.StateSingle, Ahead: true}
	p := buckets.New(cfg)
	p.Load(sdA, []model.PartitionInfo{claim})
	assign(t, p, sdA, unit{ts, 1, 10})
	for _, e := range append(p.TakeDirty(), settled(p.Settle(true))...) {
		if !e.Ahead {
			t.Errorf("entry %+v built on an unreconciled claim is marked exact", e)
		}
	}
}

func settled(es []buckets.Entry) []model.PartitionInfo {
	out := make([]model.PartitionInfo, len(es))
	for i, e := range es {
		out[i] = e.Info
	}
	return out
}
