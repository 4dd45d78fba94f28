package buckets_test

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/sluicehq/sluice/internal/buckets"
	"github.com/sluicehq/sluice/internal/model"
)

// versionedStore stands in for the store in the differential test: the
// entries of the batches that landed, the greatest version winning, as
// the embedded store's merge does.
type versionedStore struct {
	catalogueStore
	ver map[model.PartitionKey]int
}

func newVersionedStore() *versionedStore {
	return &versionedStore{catalogueStore{entries: map[model.PartitionKey]model.PartitionInfo{}}, map[model.PartitionKey]int{}}
}

// inFlight is a batch of entries handed out and not yet landed.
type inFlight struct {
	v    int
	es   []buckets.Entry
	done bool
}

// gateway is one planner with its store, its batches in flight and what
// it must be told of them before its next round (the sink's takeFailed).
type gateway struct {
	p      *buckets.Planner
	st     *versionedStore
	flight []*inFlight
	failed []*buckets.Partition
	landed []*buckets.Partition
}

// sortInfos returns the entries' infos in key order.
func sortInfos(es []buckets.Entry) []model.PartitionInfo {
	var out []model.PartitionInfo
	for _, e := range es {
		out = append(out, e.Info)
	}
	slices.SortFunc(out, func(a, b model.PartitionInfo) int { return strings.Compare(a.Key.String(), b.Key.String()) })
	return out
}

func (w *gateway) takeFailed() {
	w.p.Unsave(w.failed)
	w.p.Landed(w.landed)
	w.failed, w.landed = nil, nil
}

// TestSettledDifferential drives a planner that remembers forgotten
// series-days and one that reads every catalogue through the same random
// run, seed by seed: with and without a reserve (entries ahead), settles
// of every kind, batches that land out of order (the greater version
// wins) or fail, days that advance, and late rows up to three days back.
// Both must hand out the same entries at every step, and every state
// restored without a read must be what the store holds.
func TestSettledDifferential(t *testing.T) {
	var reads [2]int
	for seed := range uint64(300) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			r := settledDifferential(t, seed)
			reads[0] += r[0]
			reads[1] += r[1]
		})
	}
	t.Logf("catalogue reads: %d remembered, %d not", reads[0], reads[1])
	if reads[0] >= reads[1] {
		t.Errorf("catalogue reads: %d remembered, %d not: nothing was saved", reads[0], reads[1])
	}
}

func settledDifferential(t *testing.T, seed uint64) (reads [2]int) {
	rng := rand.New(rand.NewPCG(seed, 99))
	cfg := buckets.Config{MaxRows: 6 + int64(rng.IntN(10)), MaxBytes: 1 << 20, MaxSeriesDays: 1 + rng.IntN(5)}
	if rng.IntN(2) == 0 {
		cfg.Reserve = buckets.Reserve{Rows: 2, Bytes: 100, Span: 60_000}
	}
	wc := cfg
	wc.MaxSettled = 1 + rng.IntN(20)
	ws := []*gateway{
		{p: buckets.New(wc), st: newVersionedStore()},
		{p: buckets.New(cfg), st: newVersionedStore()},
	}
	ver := 0
	day := model.Day(20_000)
	devs := 3 + rng.IntN(30)
	for step := range 600 {
		if rng.IntN(150) == 0 {
			day++
		}
		switch op := rng.IntN(10); {
		case op < 6: // a write round
			var sds []model.SeriesDay
			seen := map[model.SeriesDay]bool{}
			for range 1 + rng.IntN(4) {
				d := day
				if r := rng.IntN(6); r == 0 {
					d = day - 1
				} else if r == 1 {
					d = day - model.Day(rng.IntN(4))
				}
				sd := model.SeriesDay{Kind: model.KindReadings, Tenant: "t", Series: fmt.Sprintf("d%d", rng.IntN(devs)), Day: d}
				if !seen[sd] {
					seen[sd] = true
					sds = append(sds, sd)
				}
			}
			ts := make([]int64, len(sds))
			for i, sd := range sds {
				ts[i] = sd.Day.Start() + int64(step)*1000 + int64(rng.IntN(100_000))
			}
			ver++
			var got [2][]model.PartitionInfo
			for _, w := range ws {
				w.takeFailed()
			}
			if ws[0].p.Len() != ws[1].p.Len() {
				t.Fatalf("step %d: held %d remembered, %d not", step, ws[0].p.Len(), ws[1].p.Len())
			}
			for _, sd := range sds {
				if (ws[0].p.Lookup(sd) != nil) != (ws[1].p.Lookup(sd) != nil) {
					t.Fatalf("step %d: %v held %v remembered, %v not", step, sd, ws[0].p.Lookup(sd) != nil, ws[1].p.Lookup(sd) != nil)
				}
			}
			for wi, w := range ws {
				for i, sd := range sds {
					if w.p.DayUnknown(sd.Day) {
						w.p.SetDay(sd.Day, dayEmpty(&w.st.catalogueStore, sd.Day))
					}
					held := w.p.Lookup(sd) != nil
					s, read := w.p.Resolve(sd)
					if !read && !held && wi == 0 {
						want := w.st.catalogue(sd)
						w.st.reads--
						if diff := cmp.Diff(want, s.Infos()); diff != "" {
							t.Fatalf("step %d: %v restored unlike the store (-store +restored):\n%s", step, sd, diff)
						}
					}
					if read {
						s = w.p.Load(sd, w.st.catalogue(sd))
					}
					if _, err := w.p.Place(s, ts[i], 1, 10); err != nil {
						t.Fatal(err)
					}
				}
				es := w.p.TakeEntries(nil)
				got[wi] = sortInfos(es)
				w.flight = append(w.flight, &inFlight{v: ver, es: es})
			}
			if diff := cmp.Diff(got[1], got[0]); diff != "" {
				t.Fatalf("step %d: entries differ (-read +remembered):\n%s", step, diff)
			}
		case op < 8: // land some batches
			fail := rng.IntN(8) == 0
			for bi := range ws[0].flight {
				if rng.IntN(2) == 0 {
					continue
				}
				for _, w := range ws {
					b := w.flight[bi]
					if b.done {
						continue
					}
					b.done = true
					for _, e := range b.es {
						if fail {
							w.failed = append(w.failed, e.Part)
						} else if w.st.ver[e.Info.Key] < b.v {
							w.st.entries[e.Info.Key], w.st.ver[e.Info.Key] = e.Info, b.v
						}
						w.landed = append(w.landed, e.Part)
					}
				}
			}
		default: // settle
			ver++
			which := rng.IntN(3)
			idle := uint64(1 + rng.IntN(3))
			var got [2][]model.PartitionInfo
			for wi, w := range ws {
				w.takeFailed()
				var es []buckets.Entry
				switch which {
				case 0:
					es = w.p.SettleIdle(idle)
				case 1:
					es = w.p.Settle(false)
				default:
					es = w.p.Settle(true)
				}
				slices.SortFunc(es, func(a, b buckets.Entry) int { return strings.Compare(a.Info.Key.String(), b.Info.Key.String()) })
				got[wi] = sortInfos(es)
				w.flight = append(w.flight, &inFlight{v: ver, es: es})
			}
			if diff := cmp.Diff(got[1], got[0]); diff != "" {
				t.Fatalf("step %d: settle entries differ (-read +remembered):\n%s", step, diff)
			}
		}
	}
	return [2]int{ws[0].st.reads, ws[1].st.reads}
}
