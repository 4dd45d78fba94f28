// Package rollup turns durable reading rows into per-minute aggregates. It is
// pure: it does no I/O and never reads the clock; the caller passes the time
// to every call that needs it.
//
// # Windows, watermark and versions
//
// A window is one (tenant, device, metric, minute). The Aggregator keeps the
// distinct (timestamp, value) points of every window it holds, so a row that
// reaches it twice (a client retry of a request that was already committed)
// is counted once, and a changed value replaces the old one, as in the raw
// store.
//
// The watermark is now - AllowedLateness. A window closes when the watermark
// passes its end; Advance emits every window that closed since the last call.
// A row that arrives for a window already emitted (a late row) makes the
// window dirty, and the next Advance emits it again, whole, with a higher
// version: Row.Version is the emission time in nanoseconds, made strictly
// increasing, so a store that keeps the highest version of each row
// (ClickHouse's ReplacingMergeTree) ends up with the latest emission no matter
// how often an insert is retried.
//
// # Parts: exact totals from partial aggregates
//
// Every window the Aggregator holds is an instance with its own part id,
// unique for the writer (ids start at the Aggregator's creation time in
// nanoseconds and count up). Emitted rows are keyed by (tenant, device,
// metric, minute, writer, part). An instance covers the points that reached
// this Aggregator while it held the window; after the window is dropped (its
// KeepClosed period ended, or memory ran short, or the process restarted), a
// later row starts a new instance with a new part. Different writers
// (gateways) and different instances therefore aggregate disjoint
// deliveries, and the totals of a minute are the sum (count, sum), min, max,
// earliest first and latest last over all its parts. A row delivered twice
// to two different instances is counted twice; `query rollups verify` finds
// such a minute and `rebuild` replaces it from the raw store.
package rollup

import (
	"cmp"
	"errors"
	"fmt"
	"math"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/sluicehq/sluice/internal/model"
)

// MinuteMillis is the length of a window.
const MinuteMillis = int64(time.Minute / time.Millisecond)

// MinuteOf returns the start of the minute that holds ts (ms since the epoch).
func MinuteOf(ts int64) int64 {
	m := ts - ts%MinuteMillis
	if ts < 0 && ts%MinuteMillis != 0 {
		m -= MinuteMillis
	}
	return m
}

// Key names one window.
type Key struct {
	Tenant string
	Device string
	Metric string
	Minute int64 // first millisecond of the minute
}

// RebuildWriter is the writer id of rows written by a rebuild from the raw
// store. Gateways use writer ids 0..255 (buckets.writer_id).
const RebuildWriter = math.MaxUint16

// Row is one emitted partial aggregate of a window. A row with Count == 0
// is a tombstone: it retracts an earlier version of the same row.
type Row struct {
	Key
	Writer     uint16
	Part       uint64
	Count      uint64
	Sum        float64
	Min        float64
	Max        float64
	FirstTS    int64
	FirstValue float64
	LastTS     int64
	LastValue  float64
	Version    uint64
}

// Point is one distinct reading of a window.
type Point struct {
	TS    int64
	Value float64
}

// Aggregate computes the aggregate of points sorted by TS with distinct TS.
// Count is 0 for no points.
func Aggregate(key Key, points []Point) Row {
	r := Row{Key: key}
	if len(points) == 0 {
		return r
	}
	r.Count = uint64(len(points))
	r.Min, r.Max = math.Inf(1), math.Inf(-1)
	for _, p := range points {
		r.Sum += p.Value
		r.Min = min(r.Min, p.Value)
		r.Max = max(r.Max, p.Value)
	}
	r.FirstTS, r.FirstValue = points[0].TS, points[0].Value
	last := points[len(points)-1]
	r.LastTS, r.LastValue = last.TS, last.Value
	return r
}

// Config tunes an Aggregator.
type Config struct {
	// AllowedLateness is how long after a minute ends its window stays open.
	AllowedLateness time.Duration
	// KeepClosed is how long a closed, emitted window is kept after its last
	// point arrived, so that a late row re-emits the whole window instead of
	// starting a new part.
	KeepClosed time.Duration
	// MaxWindows bounds the windows held. Beyond it the closed, emitted
	// windows kept longest without a new row are dropped first, then the
	// open ones of the oldest minutes are emitted early and dropped, until a
	// tenth fewer are held. Eviction never looks at the closed windows it
	// keeps: it takes from the front of the kept list, and sorts only the
	// open windows of the minutes it evicts from. Advance evicts; Add does
	// not, so a caller adding fast calls Advance once Len passes the bound
	// rather than only on its tick.
	MaxWindows int
	// Writer is this gateway's writer id.
	Writer uint16
}

// Validate reports bad settings; prefix names the config section.
func (c Config) Validate(prefix string) error {
	var errs []error
	if c.AllowedLateness < 0 || c.AllowedLateness > 24*time.Hour {
		errs = append(errs, fmt.Errorf("%sallowed_lateness: must be between 0s and 24h, got %s", prefix, c.AllowedLateness))
	}
	if c.KeepClosed < 0 || c.KeepClosed > 24*time.Hour {
		errs = append(errs, fmt.Errorf("%skeep_closed: must be between 0s and 24h, got %s", prefix, c.KeepClosed))
	}
	if c.MaxWindows < 1 {
		errs = append(errs, fmt.Errorf("%smax_windows: must be at least 1, got %d", prefix, c.MaxWindows))
	}
	return errors.Join(errs...)
}

// window is one instance of a window. A window held is in exactly one of
// two places: the close queue, under its minute, while its minute is open or
// a point arrived since its last emission (it is dirty); or the kept list,
// once its minute closed and it was emitted. Advance only visits what those
// say is due.
type window struct {
	s       *series
	metric  string
	minute  int64
	part    uint64
	touched int64 // when a point last reached the window (ms, processing time)
	points  []Point
	emitted bool // a version was emitted
	dirty   bool // points changed since the last emission
	queued  bool // in the close queue (a.closing)
	held    bool // held by the Aggregator: false once dropped or evicted
	pos     int  // index in s.windows
	// kept: closed and clean, in the kept list; keptAt is when a point last
	// reached it when it was put there (ms, processing time).
	kept       bool
	keptAt     int64
	prev, next *window
	// buf holds the first points, so that a window of a device reporting
	// every few seconds costs one allocation.
	buf [1]Point
}

func (w *window) key() Key {
	return Key{Tenant: w.s.tenant, Device: w.s.device, Metric: w.metric, Minute: w.minute}
}

// series holds the windows of one (tenant, device): usually a handful (a
// few metrics times the minutes kept), found by a short scan; a device
// whose readings spread over many minutes (a backfill) gets an index.
type series struct {
	tenant, device string
	windows        []winRef // mostly in creation order (drop swaps the last in)
	index          map[windowKey]*window
}

// indexFrom is the number of windows past which a series indexes them;
// recentWindows are scanned before the index is asked.
const (
	indexFrom     = 16
	recentWindows = 4
)

// winRef is a window with its key inline, so that a scan reads one
// contiguous slice instead of following a pointer per window.
type winRef struct {
	minute int64
	metric string
	w      *window
}

type windowKey struct {
	metric string
	minute int64
}

type seriesKey struct{ tenant, device string }

// Stats counts what an Aggregator saw. Counters only grow.
type Stats struct {
	Points     uint64 // distinct points added
	Duplicates uint64 // rows already held with the same value
	Late       uint64 // rows for a window that had already closed
	Emitted    uint64 // rows emitted, re-emissions included
	Reemitted  uint64 // rows emitted again after a late row
	Evicted    uint64 // windows dropped to stay under MaxWindows
}

// Aggregator holds the windows of one writer. It is not safe for concurrent
// use.
//
// Windows are found through their series: Add looks up the (tenant, device)
// of a group of rows once, then the (metric, minute) of each row among the
// series' few windows. Advance never scans every window: a window made
// dirty is put in the close queue under its minute (a late row's minute is
// already closed, so it comes out at the next Advance); once its minute is
// closed and it is emitted it goes to the back of the kept list, and a
// repeated row moves it to the back again. Advance drops the windows whose
// last point is KeepClosed old from the front of the list, stopping at the
// first that is younger (a window that waited long for its minute to close
// can be passed over until those before it go), and eviction takes windows
// from the front too, in O(1) each.
type Aggregator struct {
	cfg      Config
	series   map[seriesKey]*series
	n        int // windows held
	closing  map[int64][]*window
	minutes  heap[minute] // the minutes of closing
	kept     keptList
	nextPart uint64
	lastVer  uint64
	stats    Stats
	scratch  []*window
}

// New returns an empty Aggregator; start seeds part ids, so it must be later
// than the start of any earlier Aggregator of the same writer (a restart).
func New(cfg Config, start time.Time) *Aggregator {
	return &Aggregator{
		cfg: cfg, series: make(map[seriesKey]*series), closing: make(map[int64][]*window),
		nextPart: uint64(start.UnixNano()),
	}
}

// Len returns the number of windows held.
func (a *Aggregator) Len() int { return a.n }

// Stats returns the counters.
func (a *Aggregator) Stats() Stats { return a.stats }

func (a *Aggregator) watermark(now time.Time) int64 {
	return now.Add(-a.cfg.AllowedLateness).UnixMilli()
}

// Add adds the rows of one device, as committed, at time now.
func (a *Aggregator) Add(now time.Time, tenant, device string, rows []model.ReadingRow) {
	if len(rows) == 0 {
		return
	}
	wm := a.watermark(now)
	nowMs := now.UnixMilli()
	s := a.series[seriesKey{tenant, device}]
	if s == nil {
		s = &series{tenant: tenant, device: device}
		a.series[seriesKey{tenant, device}] = s
	}
	var w *window
	for _, r := range rows {
		minute := MinuteOf(r.TS)
		if w == nil || w.minute != minute || w.metric != r.Metric {
			w = a.window(s, r.Metric, minute)
		}
		if minute+MinuteMillis <= wm {
			a.stats.Late++
		}
		w.touched = nowMs
		p := Point{TS: r.TS, Value: r.Value}
		n := len(w.points)
		switch {
		case n == 0 || w.points[n-1].TS < p.TS:
			w.points = append(w.points, p)
		default:
			i := sort.Search(n, func(i int) bool { return w.points[i].TS >= p.TS })
			if i < n && w.points[i].TS == p.TS {
				if math.Float64bits(w.points[i].Value) == math.Float64bits(p.Value) {
					a.stats.Duplicates++
					if w.kept {
						a.kept.remove(w)
						a.kept.pushBack(w, nowMs)
					}
					continue
				}
				w.points[i].Value = p.Value // last write wins, as in the raw store
				a.markDirty(w)
				continue
			}
			w.points = slices.Insert(w.points, i, p)
		}
		a.stats.Points++
		a.markDirty(w)
	}
}

// window finds the window of (metric, minute) in s, or starts one. Without
// an index it scans from the newest: rows in time order hit within the
// first few.
func (a *Aggregator) window(s *series, metric string, minute int64) *window {
	// The newest few first (rows in time order), then the index or the rest.
	scan := len(s.windows)
	if s.index != nil {
		scan = min(scan, recentWindows)
	}
	for i := len(s.windows) - 1; i >= len(s.windows)-scan; i-- {
		if r := &s.windows[i]; r.minute == minute && r.metric == metric {
			return r.w
		}
	}
	if s.index != nil {
		if w, ok := s.index[windowKey{metric, minute}]; ok {
			return w
		}
	}
	w := &window{s: s, metric: metric, minute: minute, part: a.nextPart, held: true, pos: len(s.windows)}
	w.points = w.buf[:0]
	a.nextPart++
	s.windows = append(s.windows, winRef{minute, metric, w})
	switch {
	case s.index != nil:
		s.index[windowKey{metric, minute}] = w
	case len(s.windows) > indexFrom:
		s.index = make(map[windowKey]*window, 2*len(s.windows))
		for _, r := range s.windows {
			s.index[windowKey{r.metric, r.minute}] = r.w
		}
	}
	a.n++
	return w
}

func (a *Aggregator) markDirty(w *window) {
	w.dirty = true
	if w.queued {
		return
	}
	if w.kept {
		a.kept.remove(w)
	}
	w.queued = true
	q, ok := a.closing[w.minute]
	if !ok {
		a.minutes.push(minute(w.minute))
	}
	a.closing[w.minute] = append(q, w)
}

// drop forgets w (and its series once empty). The caller has taken w out of
// the close queue or the kept list.
func (a *Aggregator) drop(w *window) {
	if !w.held {
		return
	}
	w.held = false
	w.points = nil
	s := w.s
	last := len(s.windows) - 1
	s.windows[w.pos] = s.windows[last]
	s.windows[w.pos].w.pos = w.pos
	s.windows[last] = winRef{}
	s.windows = s.windows[:last]
	if s.index != nil {
		delete(s.index, windowKey{w.metric, w.minute})
	}
	if len(s.windows) == 0 {
		delete(a.series, seriesKey{s.tenant, s.device})
	}
	a.n--
}

func (a *Aggregator) version(now time.Time) uint64 {
	v := max(uint64(now.UnixNano()), a.lastVer+1)
	a.lastVer = v
	return v
}

func (a *Aggregator) emit(now time.Time, w *window, out []Row) []Row {
	r := Aggregate(w.key(), w.points)
	r.Writer, r.Part, r.Version = a.cfg.Writer, w.part, a.version(now)
	if w.emitted {
		a.stats.Reemitted++
	}
	a.stats.Emitted++
	w.emitted, w.dirty = true, false
	return append(out, r)
}

// emitSorted emits ws in key order.
func (a *Aggregator) emitSorted(now time.Time, ws []*window, out []Row) []Row {
	slices.SortFunc(ws, compareWindows)
	out = slices.Grow(out, len(ws))
	for _, w := range ws {
		out = a.emit(now, w, out)
	}
	return out
}

// Advance emits the rows of every window that is closed at time now and
// changed since its last emission, and drops the windows kept long enough.
// Rows come out ordered by key.
func (a *Aggregator) Advance(now time.Time) []Row {
	wm := a.watermark(now)
	closed := a.scratch[:0]
	for len(a.minutes) > 0 && int64(a.minutes[0])+MinuteMillis <= wm {
		m := int64(a.minutes.pop())
		for _, w := range a.closing[m] {
			w.queued = false
			if w.held {
				closed = append(closed, w)
			}
		}
		delete(a.closing, m)
	}
	var out []Row
	if len(closed) > 0 {
		// Emitted in key order, and kept in that order: a reference can
		// tell which goes first.
		slices.SortFunc(closed, compareWindows)
		out = make([]Row, 0, len(closed))
		for _, w := range closed {
			if w.dirty {
				out = a.emit(now, w, out)
			}
			a.kept.pushBack(w, w.touched)
		}
	}
	clear(closed)
	a.scratch = closed[:0]

	// An emitted window is kept until KeepClosed passed without a new row:
	// measured in processing time, so that a backfill of old data still
	// gathers each minute in one part.
	drop := now.Add(-a.cfg.KeepClosed).UnixMilli()
	for w := a.kept.head; w != nil && w.keptAt <= drop; w = a.kept.head {
		a.kept.remove(w)
		a.drop(w)
	}
	if a.n > a.cfg.MaxWindows {
		n := len(out)
		out = a.evict(now, out)
		if len(out) > n {
			sortRows(out)
		}
	}
	return out
}

// evict drops windows until a tenth fewer than MaxWindows are left: first
// the closed, emitted ones kept longest (the front of the kept list), then
// open ones, oldest minute first and in key order within a minute, each
// emitted before it goes if it changed since its last emission.
func (a *Aggregator) evict(now time.Time, out []Row) []Row {
	target := evictTo(a.cfg.MaxWindows)
	for w := a.kept.head; w != nil && a.n > target; w = a.kept.head {
		a.kept.remove(w)
		a.drop(w)
		a.stats.Evicted++
	}
	for a.n > target && len(a.minutes) > 0 {
		m := int64(a.minutes.pop())
		q := a.closing[m]
		slices.SortFunc(q, compareWindows)
		k := min(len(q), a.n-target)
		for _, w := range q[:k] {
			w.queued = false
			if w.dirty {
				out = a.emit(now, w, out)
			}
			a.drop(w)
			a.stats.Evicted++
		}
		// Keep the rest queued, without the dropped windows' pointers.
		rest := copy(q, q[k:])
		clear(q[rest:])
		if rest > 0 {
			a.closing[m] = q[:rest]
			a.minutes.push(minute(m))
		} else {
			delete(a.closing, m)
		}
	}
	return out
}

// evictTo is how many windows eviction leaves of max.
func evictTo(max int) int { return max - max/10 }

// Flush emits every window that changed since its last emission, open or
// not: the last call before shutdown, so that nothing held is lost.
func (a *Aggregator) Flush(now time.Time) []Row {
	var due []*window
	for _, ws := range a.closing {
		for _, w := range ws {
			if w.held && w.dirty {
				due = append(due, w)
			}
		}
	}
	if len(due) == 0 {
		return nil
	}
	return a.emitSorted(now, due, nil)
}

func compareWindows(x, y *window) int {
	if c := compareKeys(x.key(), y.key()); c != 0 {
		return c
	}
	return cmp.Compare(x.part, y.part)
}

func compareKeys(x, y Key) int {
	if c := cmp.Compare(x.Minute, y.Minute); c != 0 {
		return c
	}
	if c := strings.Compare(x.Tenant, y.Tenant); c != 0 {
		return c
	}
	if c := strings.Compare(x.Device, y.Device); c != 0 {
		return c
	}
	return strings.Compare(x.Metric, y.Metric)
}

func sortRows(rows []Row) {
	slices.SortFunc(rows, func(x, y Row) int {
		if c := compareKeys(x.Key, y.Key); c != 0 {
			return c
		}
		if c := cmp.Compare(x.Writer, y.Writer); c != 0 {
			return c
		}
		return cmp.Compare(x.Part, y.Part)
	})
}

// Compute aggregates the readings of one device, as read back from the raw
// store, into one row per (metric, minute): what a rebuild writes. The
// readings must have distinct timestamps (a reader's output has). Rows get
// writer RebuildWriter, part 0 and the given version.
func Compute(tenant, device string, readings []model.Reading, version uint64) []Row {
	byKey := make(map[Key][]Point)
	for _, r := range readings {
		for _, m := range r.Metrics {
			k := Key{Tenant: tenant, Device: device, Metric: m.Name, Minute: MinuteOf(r.TS)}
			byKey[k] = append(byKey[k], Point{TS: r.TS, Value: m.Value})
		}
	}
	out := make([]Row, 0, len(byKey))
	for k, pts := range byKey {
		slices.SortFunc(pts, func(a, b Point) int { return cmp.Compare(a.TS, b.TS) })
		r := Aggregate(k, pts)
		r.Writer, r.Version = RebuildWriter, version
		out = append(out, r)
	}
	sortRows(out)
	return out
}
