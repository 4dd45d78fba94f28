package rollup

import (
	stdcmp "cmp"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"sort"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/sluicehq/sluice/internal/model"
)

// refAggregator is the straightforward Aggregator (one map of every window,
// Advance visits them all): the model the Aggregator must agree with.
type refAggregator struct {
	cfg      Config
	windows  map[Key]*refWindow
	nextPart uint64
	nextSeq  uint64
	lastVer  uint64
	stats    Stats
}

// refWindow: kept says the window's minute closed and it was emitted with
// every point it holds; keptAt is when a point last reached it when it was
// kept (or a repeated row reached it since), and seq the order of those
// events.
type refWindow struct {
	part           uint64
	touched        int64
	points         []Point
	emitted, dirty bool
	kept           bool
	keptAt         int64
	seq            uint64
}

func (a *refAggregator) keep(w *refWindow, at int64) {
	a.nextSeq++
	w.kept, w.keptAt, w.seq = true, at, a.nextSeq
}

// keptInOrder returns the keys of the kept windows, kept longest first.
func (a *refAggregator) keptInOrder() []Key {
	var keys []Key
	for k, w := range a.windows {
		if w.kept {
			keys = append(keys, k)
		}
	}
	slices.SortFunc(keys, func(x, y Key) int { return stdcmp.Compare(a.windows[x].seq, a.windows[y].seq) })
	return keys
}

// compareParts orders keys, then parts.
func (a *refAggregator) compareParts(x, y Key) int {
	if c := compareKeys(x, y); c != 0 {
		return c
	}
	return stdcmp.Compare(a.windows[x].part, a.windows[y].part)
}

func newRef(cfg Config, start time.Time) *refAggregator {
	return &refAggregator{cfg: cfg, windows: make(map[Key]*refWindow), nextPart: uint64(start.UnixNano())}
}

func (a *refAggregator) add(now time.Time, tenant, device string, rows []model.ReadingRow) {
	wm := now.Add(-a.cfg.AllowedLateness).UnixMilli()
	for _, r := range rows {
		k := Key{Tenant: tenant, Device: device, Metric: r.Metric, Minute: MinuteOf(r.TS)}
		w := a.windows[k]
		if w == nil {
			w = &refWindow{part: a.nextPart}
			a.nextPart++
			a.windows[k] = w
		}
		if k.Minute+MinuteMillis <= wm {
			a.stats.Late++
		}
		w.touched = now.UnixMilli()
		i := sort.Search(len(w.points), func(i int) bool { return w.points[i].TS >= r.TS })
		if i < len(w.points) && w.points[i].TS == r.TS {
			if math.Float64bits(w.points[i].Value) == math.Float64bits(r.Value) {
				a.stats.Duplicates++
				if w.kept {
					a.keep(w, now.UnixMilli())
				}
				continue
			}
			w.points[i].Value = r.Value
			w.dirty, w.kept = true, false
			continue
		}
		w.points = slices.Insert(w.points, i, Point{TS: r.TS, Value: r.Value})
		a.stats.Points++
		w.dirty, w.kept = true, false
	}
}

func (a *refAggregator) emit(now time.Time, k Key, w *refWindow, out []Row) []Row {
	r := Aggregate(k, w.points)
	v := max(uint64(now.UnixNano()), a.lastVer+1)
	a.lastVer = v
	r.Writer, r.Part, r.Version = a.cfg.Writer, w.part, v
	if w.emitted {
		a.stats.Reemitted++
	}
	a.stats.Emitted++
	w.emitted, w.dirty = true, false
	return append(out, r)
}

func (a *refAggregator) advance(now time.Time) []Row {
	wm := now.Add(-a.cfg.AllowedLateness).UnixMilli()
	drop := now.Add(-a.cfg.KeepClosed).UnixMilli()
	var out []Row
	var closed []Key
	for k, w := range a.windows {
		if k.Minute+MinuteMillis <= wm && !w.kept {
			closed = append(closed, k)
		}
	}
	slices.SortFunc(closed, a.compareParts)
	for _, k := range closed {
		w := a.windows[k]
		if w.dirty {
			out = a.emit(now, k, w, out)
		}
		a.keep(w, w.touched)
	}
	// Drops go in the order windows were kept, and stop at the first one
	// whose last point is too recent (one kept later may be older).
	for _, k := range a.keptInOrder() {
		if a.windows[k].keptAt > drop {
			break
		}
		delete(a.windows, k)
	}
	if len(a.windows) > a.cfg.MaxWindows {
		keys := a.keptInOrder()
		var open []Key
		for k, w := range a.windows {
			if !w.kept {
				open = append(open, k)
			}
		}
		slices.SortFunc(open, a.compareParts)
		keys = append(keys, open...)
		for _, k := range keys[:len(keys)-(a.cfg.MaxWindows-a.cfg.MaxWindows/10)] {
			if w := a.windows[k]; w.dirty {
				out = a.emit(now, k, w, out)
			}
			delete(a.windows, k)
			a.stats.Evicted++
		}
	}
	sortRows(out)
	return out
}

func (a *refAggregator) flush(now time.Time) []Row {
	var out []Row
	for k, w := range a.windows {
		if w.dirty {
			out = a.emit(now, k, w, out)
		}
	}
	sortRows(out)
	return out
}

// TestAggregatorMatchesReference drives the Aggregator and the reference
// with the same random streams (late and repeated rows, changed values,
// out-of-order timestamps, several tenants, devices and metrics, clock
// jitter, evictions) and requires the same rows, in the same order, the
// same window count and the same counters after every step.
func TestAggregatorMatchesReference(t *testing.T) {
	tests := []struct {
		name              string
		cfg               Config
		devices, metrics  int
		spread            time.Duration // how far before now a row's timestamp may be
		repeat, changeVal float64       // probability a row repeats an earlier one / with a new value
		flushEvery        int
	}{
		{name: "live defaults", cfg: Config{AllowedLateness: time.Minute, KeepClosed: 10 * time.Minute, MaxWindows: 1 << 20}, devices: 20, metrics: 2, spread: 2 * time.Second},
		{name: "no lateness no keep", cfg: Config{MaxWindows: 1 << 20}, devices: 5, metrics: 3, spread: 90 * time.Second, repeat: 0.2, changeVal: 0.1},
		{name: "late rows and retries", cfg: Config{AllowedLateness: 10 * time.Second, KeepClosed: 2 * time.Minute, MaxWindows: 1 << 20}, devices: 8, metrics: 2, spread: 5 * time.Minute, repeat: 0.3, changeVal: 0.3},
		{name: "evictions", cfg: Config{AllowedLateness: 30 * time.Second, KeepClosed: 3 * time.Minute, MaxWindows: 7}, devices: 6, metrics: 2, spread: 3 * time.Minute, repeat: 0.1, changeVal: 0.1},
		{name: "backfill: many windows per device", cfg: Config{AllowedLateness: time.Minute, KeepClosed: 2 * time.Minute, MaxWindows: 300}, devices: 3, metrics: 3, spread: 6 * time.Hour, repeat: 0.2, changeVal: 0.2},
		{name: "flushes between advances", cfg: Config{AllowedLateness: 20 * time.Second, KeepClosed: time.Minute, MaxWindows: 50}, devices: 4, metrics: 2, spread: 2 * time.Minute, repeat: 0.2, changeVal: 0.2, flushEvery: 7},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			for seed := range uint64(3) {
				rng := rand.New(rand.NewPCG(seed, 42))
				tc.cfg.Writer = 9
				got, want := New(tc.cfg, t0), newRef(tc.cfg, t0)
				now := t0
				var sent []model.ReadingRow
				var lastVer uint64
				for step := range 400 {
					// Processing time mostly moves on, sometimes stands still or
					// steps back a little (clock adjustments).
					now = now.Add(time.Duration(rng.IntN(4000)-300) * time.Millisecond)
					for range rng.IntN(4) {
						tenant := fmt.Sprintf("t%d", rng.IntN(2))
						device := fmt.Sprintf("d%d", rng.IntN(tc.devices))
						var rows []model.ReadingRow
						for range 1 + rng.IntN(6) {
							var r model.ReadingRow
							switch p := rng.Float64(); {
							case len(sent) > 0 && p < tc.repeat:
								r = sent[rng.IntN(len(sent))]
							case len(sent) > 0 && p < tc.repeat+tc.changeVal:
								r = sent[rng.IntN(len(sent))]
								r.Value = float64(rng.IntN(100))
							default:
								ts := now.Add(-time.Duration(rng.Int64N(int64(tc.spread)))).UnixMilli()
								r = model.ReadingRow{TS: ts, Metric: fmt.Sprintf("m%d", rng.IntN(tc.metrics)), Value: float64(rng.IntN(100))}
							}
							rows = append(rows, r)
							sent = append(sent, r)
						}
						got.Add(now, tenant, device, rows)
						want.add(now, tenant, device, rows)
					}
					var g, w []Row
					if tc.flushEvery > 0 && step%tc.flushEvery == 0 {
						g, w = got.Flush(now), want.flush(now)
					} else {
						g, w = got.Advance(now), want.advance(now)
					}
					if diff := cmp.Diff(w, g, cmpopts.IgnoreFields(Row{}, "Version"), cmpopts.EquateEmpty()); diff != "" {
						t.Fatalf("seed %d step %d: rows (-reference +got):\n%s", seed, step, diff)
					}
					seen := map[uint64]bool{}
					stepMax := lastVer
					for _, r := range g {
						if r.Version <= lastVer || seen[r.Version] {
							t.Fatalf("seed %d step %d: version %d repeated or not above the previous step's %d", seed, step, r.Version, lastVer)
						}
						seen[r.Version] = true
						stepMax = max(stepMax, r.Version)
					}
					lastVer = stepMax
					if got.Len() != len(want.windows) || got.Stats() != want.stats {
						t.Fatalf("seed %d step %d: %d windows %+v, reference %d windows %+v", seed, step, got.Len(), got.Stats(), len(want.windows), want.stats)
					}
				}
				st := got.Stats()
				if st.Emitted == 0 || tc.repeat > 0 && st.Duplicates+st.Reemitted == 0 || tc.cfg.MaxWindows < 10 && st.Evicted == 0 {
					t.Fatalf("seed %d: the stream did not exercise the case: %+v", seed, st)
				}
			}
		})
	}
}
