// Package buckets decides, online, which partition of a series-day each new
// row goes to. It is pure: it does no I/O and never reads the clock. The sink
// feeds it the catalogue of a series-day the first time it sees that
// series-day, then asks it for one sub-bucket per row; the planner hands back
// the catalogue entries it changed so that the sink can persist them in the
// same atomic commit as the rows.
//
// # The scheme: sequential fill with state-disjoint ids
//
// A series-day (tenant, device or stream, UTC day) starts in state "single":
// every row goes to sub-bucket 0, so a quiet device writes exactly one
// partition per day. When sub-bucket 0 would pass the row or byte bound, it
// is closed and the series-day moves to state "split": rows go to split
// partitions opened one after another, each filled to the bound before the
// next opens. Split ids never collide with the single id (see SubID), so a
// transition never mixes two schemes in one partition.
//
// # Several writers
//
// Split ids carry the slot of the writer (gateway) that opened them, and a
// writer only adds rows to its own splits. The single partition is shared
// (sub-bucket 0) when one writer owns the store, as with the embedded store.
// For a store that several gateways write at once (Cassandra), the
// composition root sets Config.PerWriterSingle: each writer then has its own
// single partition too (SingleID), so every partition has exactly one
// writer, whose planner sees every row it holds. The bound then holds with
// any number of gateways writing one series-day at once, without
// coordination, and each catalogue entry has one writer, so no gateway
// overwrites another's counts. The cost: a series-day that k gateways write
// has up to k single partitions instead of one. Writer 0's single partition
// is sub-bucket 0 either way.
//
// Rows are not routed by timestamp: a late or out-of-order row goes to the
// partition that is open when it arrives, and the catalogue entry's
// [MinTS, MaxTS] widens to cover it. Readers select partitions by that range,
// so they find late rows without scanning. A partition is closed only when
// the next unit (a reading's cells, or an event) does not fit, so every
// closed partition is full to within one unit: with units of at most u rows,
// a series-day with R rows has at most ceil(R/(MaxRows-u+1)) partitions when
// the row bound binds (ceil(R/MaxRows) for one-row units), and likewise for
// bytes when the byte bound binds first.
//
// # Catalogue entries ahead of the rows
//
// A catalogue entry must be stored, in the same atomic commit, before any
// row it describes is acknowledged: otherwise readers could miss the row,
// and a planner reloaded after a crash could overfill the partition. Written
// exactly, that is one entry per partition touched per commit: with many
// devices sending a reading each, as many entries as readings. With a
// Reserve, an entry claims more than the partition holds: Reserve.Rows more
// rows and Reserve.Bytes more bytes (never past the bounds) and a time range
// that runs to the end of the day and starts Reserve.Span before the
// partition's first row (within the day). Later rows that fit in the claim
// need no new entry: a device that reports every few minutes, or every few
// hours, claims once and then writes its day's rows under that claim until
// the row reserve runs out. Every stored entry is therefore an upper
// bound on its partition's rows and bytes and a superset of its time range,
// and a claim is marked Ahead: readers still find every row. The first
// entry a partition gets after it is opened or loaded is exact all the
// same: a device that writes once while its series-day is held (a quiet
// one, or one of a fleet larger than MaxSeriesDays) would otherwise pay a
// claim and its settle, two entries for one row, and hold its series-day in
// memory until the settle. From its second entry on, a partition that is
// written again claims ahead, if its previous row came recently enough
// that the claim would not have been settled meanwhile. SettleIdle writes
// exact entries again once partitions have been idle for its wait, Settle
// at shutdown, on demand (the partitions listing asks for it) and when the
// planner must forget series-days; a partition settled starts again from
// an exact entry. So a device that reports more often than SettleIdle's
// wait claims about once a day, and one that reports less often pays one
// exact entry a row, never a claim and its settle. An entry still Ahead
// when the planner
// loads it was left by a run that stopped without settling: the sink counts
// the partition's rows and hands them to Reconcile before any Place (for
// the entries Reconciles names), so counts go on from the truth and a
// partition closes at its bound, not up to Reserve.Rows early.
package buckets

import (
	"errors"
	"fmt"
	"math"

	"github.com/sluicehq/sluice/internal/model"
)

// Bucketing states, recorded in each catalogue entry.
const (
	StateSingle = "single"
	StateSplit  = "split"
)

// Sub-bucket id layout. A single partition's id is writer<<16 (sub-bucket 0
// for writer 0). A split partition's id is splitFlag | writer<<16 | n, n
// counting from 1, so ids of different states and different writers are
// disjoint.
const (
	splitFlag   = uint32(1) << 24
	maxWriter   = 255
	maxSplitSeq = 1<<16 - 1
)

// MaxSplits is the most split partitions one writer can open for one
// series-day; past it the series-day's rows are refused
// (ErrSplitsExhausted).
const MaxSplits = maxSplitSeq

// SubID returns the sub-bucket id of split partition n (1-based) opened by
// writer slot w.
func SubID(w uint8, n int) uint32 { return splitFlag | uint32(w)<<16 | uint32(n) }

// SingleID returns the sub-bucket id of writer slot w's single partition.
func SingleID(w uint8) uint32 { return uint32(w) << 16 }

// WriterOf returns the slot of the writer that opened sub-bucket sub.
func WriterOf(sub uint32) uint8 { return uint8(sub >> 16) }

// SplitSeq returns the writer slot and sequence number of a split id; ok is
// false for the single partition.
func SplitSeq(sub uint32) (w uint8, n int, ok bool) {
	if sub&splitFlag == 0 {
		return 0, 0, false
	}
	return uint8(sub >> 16), int(sub & 0xffff), true
}

// Config bounds partitions.
type Config struct {
	MaxRows  int64 `mapstructure:"max_rows"`  // rows per partition
	MaxBytes int64 `mapstructure:"max_bytes"` // encoded bytes per partition
	// Writer is this gateway's slot (0-255). Gateways that write the same
	// store at once need different slots so their partitions are disjoint.
	Writer int `mapstructure:"writer_id"`
	// MaxSeriesDays bounds the planner's memory, softly (see evict); beyond
	// it, series-days are forgotten (at the end of a round, in TakeEntries,
	// or in Landed; never between Load and Place) and reloaded from the
	// catalogue when next written.
	MaxSeriesDays int `mapstructure:"max_series_days"`
	// MaxSettled bounds the series-days forgotten with one exact single
	// partition that the planner remembers compactly (see settled), so
	// that their next write reads no catalogue. At most 0 (the
	// configuration's -1) keeps none, and reads every catalogue as
	// before. Only a planner that is its store's one writer (no
	// PerWriterSingle) keeps them.
	MaxSettled int `mapstructure:"max_settled_series_days"`
	// PerWriterSingle gives each writer its own single partition instead of
	// the shared sub-bucket 0 (see "Several writers" above). It is not a
	// configuration key: the composition root sets it for stores that
	// several gateways may write at once.
	PerWriterSingle bool `mapstructure:"-"`
	// Reserve lets catalogue entries run ahead of their partitions (see
	// "Catalogue entries ahead of the rows" above). The zero value writes
	// every change exactly. It is not a configuration key: the composition
	// root sets DefaultReserve.
	Reserve Reserve `mapstructure:"-"`
}

// Reserve is how far a catalogue entry is written ahead of its partition.
// Forward in time a claim always runs to the end of the day: rows arrive
// mostly in time order, and a claim that ends a few minutes after the
// newest row is passed by a device's next reading whenever the device
// reports less often than that.
type Reserve struct {
	Rows  int64 // rows beyond the partition's count
	Bytes int64 // bytes beyond its size
	Span  int64 // milliseconds before its time range (late rows), within the day
}

// DefaultReserve returns the reserve the gateway runs with: a 64th of each
// bound, and 15 minutes.
func DefaultReserve(c Config) Reserve {
	return Reserve{Rows: c.MaxRows / 64, Bytes: c.MaxBytes / 64, Span: 15 * 60_000}
}

// DefaultConfig returns the production defaults; the gateway's
// configuration sizes MaxSeriesDays from its memory budget instead.
func DefaultConfig() Config {
	return Config{MaxRows: 100_000, MaxBytes: 32 << 20, Writer: 0, MaxSeriesDays: 250_000}
}

// Validate reports every bad setting.
func (c Config) Validate() error {
	var errs []error
	if c.MaxRows < 1 {
		errs = append(errs, fmt.Errorf("buckets.max_rows: must be at least 1, got %d", c.MaxRows))
	}
	if c.MaxBytes < 64<<10 {
		errs = append(errs, fmt.Errorf("buckets.max_bytes: must be at least 65536, got %d", c.MaxBytes))
	}
	if c.Writer < 0 || c.Writer > maxWriter {
		errs = append(errs, fmt.Errorf("buckets.writer_id: must be 0..%d, got %d", maxWriter, c.Writer))
	}
	if c.MaxSeriesDays < 1 {
		errs = append(errs, fmt.Errorf("buckets.max_series_days: must be at least 1 (or 0: sized by memory.budget_bytes), got %d", c.MaxSeriesDays))
	}
	if c.MaxSettled < -1 {
		errs = append(errs, fmt.Errorf("buckets.max_settled_series_days: must be at least -1 (off; 0: sized by memory.budget_bytes), got %d", c.MaxSettled))
	}
	return errors.Join(errs...)
}

// ErrSplitsExhausted is returned when a writer opened the largest number of
// split partitions one series-day can have.
var ErrSplitsExhausted = errors.New("series-day has used every split partition id")

// Partition is the planner's state of one partition: what it holds (exact,
// every row placed so far) and the catalogue entry last handed out for it.
// The sink uses it as a handle: a pointer stays the same while the
// series-day stays loaded.
type Partition struct {
	s     *Series             // the series-day it belongs to
	info  model.PartitionInfo // exact
	saved model.PartitionInfo // the entry last handed out, if has
	has   bool
	// taken says an entry with rows was handed out since the partition was
	// loaded, opened or settled: the first is exact, later ones claim
	// ahead, if recent says the partition's previous row was placed at
	// most the wait of the last SettleIdle ago (its claim would not have
	// been settled before this row came).
	taken  bool
	recent bool
	dirty  bool   // queued in Planner.dirty
	epoch  uint64 // settle epoch of the last row placed
	tick   uint64 // SettleIdle call count when the last row was placed
	// pending counts entries handed out and not yet reported Landed: the
	// series-day is not evicted while one may still fail.
	pending int
}

// Key returns the partition's key.
func (pt *Partition) Key() model.PartitionKey { return pt.info.Key }

// Entry is a catalogue entry to persist, with the partition it describes.
type Entry struct {
	Part *Partition
	Info model.PartitionInfo
	// Mark says the commit that carries the entry may write rows to the
	// partition while the entry stored before it is exact (or absent): a
	// store that is not atomic must mark the stored entry ahead before
	// those rows (store.Batch.Ahead).
	Mark bool
}

// Series is the planner's state of one series-day.
type Series struct {
	sd     model.SeriesDay
	queued bool         // in Planner.idle
	held   bool         // in Planner.days: evict need not look it up
	parts  []*Partition // every partition of the series-day, as known
	active *Partition   // the partition this writer fills, nil if none
	maxSeq int          // highest split sequence number this writer used
	single bool         // this writer opened its single partition
	// split says a Place of round closed a partition; before is the
	// latest timestamp the series-day held before round's first Place in
	// it (see Partition.Before).
	split  bool
	round  uint64
	before int64
	// A note the sink keeps with the state (see Claim).
	claimRound uint64
	claimFrom  int64
	// Its place in Planner.days.
	hash uint64
	next *Series
	// Room for its first partition and for parts' first element, in the
	// state's own allocation: most series-days have one partition, and
	// with a fleet far larger than MaxSeriesDays every write of a device
	// loads or opens one (three allocations each, else).
	first Partition
	one   [1]*Partition
}

// newPartition returns a partition of s holding info, in s's room for one
// if it is free (first.s is set once it is used).
func (s *Series) newPartition(info model.PartitionInfo) *Partition {
	if s.first.s == nil {
		s.first = Partition{s: s, info: info}
		return &s.first
	}
	return &Partition{s: s, info: info}
}

// Planner assigns rows to partitions. It is not safe for concurrent use: the
// sink's single flusher owns it.
type Planner struct {
	cfg   Config
	days  index // the series-days held
	dirty []*Partition
	// ahead holds the partitions whose last entry was written ahead of them
	// (wider than exact), or not stored at all: Settle writes them exactly.
	ahead map[*Partition]struct{}
	epoch uint64 // calls of Settle and SettleIdle
	tick  uint64 // calls of SettleIdle
	wait  uint64 // the idle calls the last SettleIdle waited for (0: none yet)
	// idle queues series-days that may have become evictable, oldest
	// first (from idle[head]): evict checks them instead of scanning every
	// series-day held.
	idle    []*Series
	head    int
	checked uint64 // series-days evict looked at, for tests
	// opened holds the partitions opened since TakeOpened (for the
	// sub-buckets metric).
	opened []Opened
	// round counts the rounds TakeEntries ended, from 1 (a Series's
	// round is 0 until its first Place).
	round uint64
	// settled remembers forgotten series-days compactly; nil when
	// MaxSettled is 0 or with PerWriterSingle.
	settled *settled
}

// New returns a planner with no series-day loaded.
func New(cfg Config) *Planner {
	p := &Planner{cfg: cfg, days: newIndex(), ahead: make(map[*Partition]struct{}), round: 1}
	if cfg.MaxSettled > 0 && !cfg.PerWriterSingle {
		p.settled = newSettled(cfg.MaxSettled)
	}
	return p
}

// Resolve returns the state of sd: the one held, or one restored from
// what the planner remembers of it when it was forgotten (with a single
// exact partition, or, on a day known to be complete, none). read says
// that the planner knows neither: the caller reads the catalogue and Loads
// it.
func (p *Planner) Resolve(sd model.SeriesDay) (s *Series, read bool) {
	h := p.days.hash(sd)
	if s := p.days.find(h, sd); s != nil {
		return s, false
	}
	if p.settled == nil {
		return nil, true
	}
	parts, read := p.settled.take(h, sd)
	if read {
		return nil, true
	}
	return p.load(h, sd, parts), false
}

// DayUnknown reports whether the caller should tell SetDay whether day d
// has a catalogue entry in the store: the planner keeps forgotten
// series-days and has not seen d yet. Only a store with one writer can
// answer for good; the caller must ask before it places anything of d
// (a Load before that is harmless only if the store has entries of d, as
// when the sink loads series-days with entries left ahead).
func (p *Planner) DayUnknown(d model.Day) bool {
	return p.settled != nil && p.settled.unknown(d)
}

// SetDay tells the planner whether day d, which DayUnknown reported, had no
// catalogue entry in the store: if so, a series-day of d that the planner
// neither holds nor remembers has none, and Resolve hands out its state
// without a read.
func (p *Planner) SetDay(d model.Day, empty bool) {
	if p.settled == nil {
		return
	}
	if day := p.settled.day(d, true); day != nil && empty && day.n == 0 && day.spilled == nil {
		day.complete = true
	}
}

// Settled returns how many forgotten series-days the planner remembers.
func (p *Planner) Settled() int {
	if p.settled == nil {
		return 0
	}
	return p.settled.n
}

// Lookup returns the state of a loaded series-day, or nil.
func (p *Planner) Lookup(sd model.SeriesDay) *Series { return p.days.get(sd) }

// Len returns the number of series-days held in memory.
func (p *Planner) Len() int { return p.days.len() }

// Over reports whether more than MaxSeriesDays series-days are held: those
// whose entries run ahead cannot be forgotten until Settle made them exact.
func (p *Planner) Over() bool { return p.days.len() > p.cfg.MaxSeriesDays }

// Load installs the catalogue of a series-day, as read from the store, and
// returns its state. It must be called before the first Place for that
// series-day. It never evicts: a caller loads every series-day of a round,
// then places, and a series-day it loaded or found with Lookup stays loaded
// until TakeEntries. Callers load a series-day Lookup did not find; one
// loaded again replaces the state held.
func (p *Planner) Load(sd model.SeriesDay, parts []model.PartitionInfo) *Series {
	h := p.days.hash(sd)
	if p.settled != nil {
		p.settled.loaded(h, sd)
	}
	return p.load(h, sd, parts)
}

// load is Load of sd, whose hash is h.
func (p *Planner) load(h uint64, sd model.SeriesDay, parts []model.PartitionInfo) *Series {
	// What the sink noted with an earlier state of the series-day, if
	// any, is gone: as if every minute was claimed in this round (see
	// Claim).
	s := &Series{sd: sd, held: true, claimRound: p.round, claimFrom: math.MinInt64}
	s.parts = s.one[:0]
	if len(parts) > len(s.one) {
		s.parts = make([]*Partition, 0, len(parts))
	}
	for _, pi := range parts {
		// An entry marked Ahead stays a claim in the planner's state too
		// until Reconcile replaces it with counted values.
		pt := s.newPartition(pi)
		pt.saved, pt.has = pi, true
		s.parts = append(s.parts, pt)
		if !p.ownedBy(pi.Key.Sub) {
			continue
		}
		if _, n, split := SplitSeq(pi.Key.Sub); split && n > s.maxSeq {
			s.maxSeq = n
		} else if !split {
			s.single = true
		}
		if pi.Closed {
			continue
		}
		// The open partition of this writer: the single one, or its newest split.
		if s.active == nil || pi.Key.Sub > s.active.info.Key.Sub {
			s.active = pt
		}
	}
	if old := p.days.put(s, h); old != nil {
		// Not expected (callers load what Lookup did not find), but a
		// state replaced must not stay held, or evict would take it out
		// of the index a second time.
		old.held = false
	}
	p.queueIdle(s) // a series-day loaded and never written can go
	return s
}

// Unload forgets a series-day that was loaded and not placed in since (the
// sink unloads the series-days it could not reconcile, to load them again
// on their next write).
func (p *Planner) Unload(sd model.SeriesDay) {
	h := p.days.hash(sd)
	if s := p.days.find(h, sd); s != nil {
		for _, pt := range s.parts {
			delete(p.ahead, pt)
		}
		p.days.remove(s)
		s.held = false
	}
	if p.settled != nil {
		p.settled.unloaded(h, sd)
	}
}

// Reconciles reports whether this writer must reconcile a stored entry of
// sub-bucket sub that is marked Ahead before relying on it: when one
// gateway owns the store (no PerWriterSingle: the embedded store) every
// such entry was left by an earlier run of it; else only the entries of
// this writer's slot, which no other live gateway writes (slots are
// unique), so an entry of its slot still ahead was left by a run of this
// slot that stopped without settling it.
func (p *Planner) Reconciles(sub uint32) bool {
	return !p.cfg.PerWriterSingle || int(WriterOf(sub)) == p.cfg.Writer
}

// Reconcile replaces what the planner believes of a partition of loaded
// series-day s, as Load read it from a stored entry marked Ahead, with
// exact, what its rows add up to (the sink counts them). The stored claim
// stays the partition's saved entry, and Settle writes the exact one. Call
// it right after Load, before any Place in s.
func (p *Planner) Reconcile(s *Series, exact model.PartitionInfo) {
	for _, pt := range s.parts {
		if pt.info.Key != exact.Key {
			continue
		}
		exact.Ahead = false
		exact.Closed = pt.info.Closed
		if exact.State == "" {
			exact.State = pt.info.State
		}
		if exact.State == "" { // registered, never counted
			exact.State = StateSingle
			if _, _, split := SplitSeq(exact.Key.Sub); split {
				exact.State = StateSplit
			}
		}
		pt.info = exact
		p.ahead[pt] = struct{}{}
		return
	}
}

// ownedBy reports whether this writer may add rows to sub-bucket sub: its
// own partitions, and the shared single partition unless PerWriterSingle.
func (p *Planner) ownedBy(sub uint32) bool {
	if _, _, split := SplitSeq(sub); !split && !p.cfg.PerWriterSingle {
		return sub == 0
	}
	return int(WriterOf(sub)) == p.cfg.Writer
}

// evict forgets series-days until at most MaxSeriesDays remain, then about a
// tenth more, so that it does not run on every round. Only series-days whose
// entries are all stored exactly, and none still in a commit, are forgotten:
// one whose entry runs ahead stays until it was settled (by SettleIdle once
// idle for its wait, or by Settle), one with an entry in a commit until
// Landed.
// MaxSeriesDays is therefore a soft bound: the series-days written again
// since their entries were last settled stay on top of it (one written once
// since it was loaded has an exact entry, and goes once it landed). The
// sink keeps that short: while Over, it settles idle partitions about 32
// times per settle interval instead of once, so the planner holds about
// MaxSeriesDays plus the series-days written since the last of those. A
// forgotten series-day's state is reloaded from the catalogue on its next
// write, which holds all its changes (every entry it handed out landed
// before it was forgotten), so forgetting it is safe.
//
// It looks only at the series-days queued in idle, oldest first: each is
// queued when it is loaded, and again when an entry of one of its
// partitions landed (the last thing that releases it: an entry ahead or a
// dirty partition is settled or saved by a commit, which then lands). So a
// planner held above the bound by entries in flight or ahead looks at
// nothing more per round, instead of scanning every series-day it holds.
func (p *Planner) evict() {
	if p.days.len() <= p.cfg.MaxSeriesDays {
		return
	}
	target := p.cfg.MaxSeriesDays - p.cfg.MaxSeriesDays/10
	for p.days.len() > target && p.head < len(p.idle) {
		s := p.idle[p.head]
		p.idle[p.head] = nil
		p.head++
		s.queued = false
		p.checked++
		if s.held && p.evictable(s) {
			if p.settled != nil {
				p.settled.keep(s.hash, s)
			}
			// Removed as the state it is, not looked up by its key.
			p.days.remove(s)
			s.held = false
		}
	}
	if p.head > len(p.idle)/2 {
		p.idle = p.idle[:copy(p.idle, p.idle[p.head:])]
		p.head = 0
	}
}

// evictable reports whether s holds nothing that must stay in memory.
func (p *Planner) evictable(s *Series) bool {
	for _, pt := range s.parts {
		if _, ok := p.ahead[pt]; ok || pt.dirty || pt.pending > 0 {
			return false
		}
	}
	return true
}

// queueIdle queues s for evict, unless it is queued already.
func (p *Planner) queueIdle(s *Series) {
	if !s.queued {
		s.queued = true
		p.idle = append(p.idle, s)
	}
}

// Place picks the partition of loaded series-day s for
// rows rows (the cells of one reading, or one audit event) of size bytes
// with timestamp ts, so that a reading is never split across partitions. It
// records the rows in the partition's state (see TakeEntries) and returns
// it.
func (p *Planner) Place(s *Series, ts int64, rows, bytes int64) (*Partition, error) {
	if s.round != p.round {
		s.round, s.before, s.split = p.round, s.latest(), false
	}
	if s.active != nil && !p.fits(s.active.info, rows, bytes) {
		s.split = true
		s.active.info.Closed = true
		p.touch(s.active)
		s.active = nil
	}
	if s.active == nil {
		if err := p.open(s); err != nil {
			return nil, err
		}
	}
	pt := s.active
	pi := &pt.info
	if pi.Rows == 0 || ts < pi.MinTS {
		pi.MinTS = ts
	}
	if pi.Rows == 0 || ts > pi.MaxTS {
		pi.MaxTS = ts
	}
	pi.Rows += rows
	pi.Bytes += bytes
	p.touch(pt)
	return pt, nil
}

func (p *Planner) touch(pt *Partition) {
	if !pt.dirty {
		// The round's first row: did the previous one come recently? (A
		// second row of the round must not make a slow device recent.)
		pt.recent = p.wait == 0 || p.tick-pt.tick <= p.wait
		pt.dirty = true
		p.dirty = append(p.dirty, pt)
	}
	pt.epoch, pt.tick = p.epoch, p.tick
}

// TakeEntries appends to dst the catalogue entries that the rows placed
// since the last call make necessary, in no particular order. The sink
// writes them in the same atomic commit as those rows. A partition needs an
// entry when it is new, was closed, or outgrew the entry last handed out for
// it (more rows or bytes, or a timestamp outside its range); with a Reserve,
// every entry but a partition's first since it was opened or loaded is
// written ahead of the partition, so that most rows need none.
// It ends a round: when more than MaxSeriesDays series-days are held, it
// evicts some.
func (p *Planner) TakeEntries(dst []Entry) []Entry {
	for _, pt := range p.dirty {
		pt.dirty = false
		if pt.has && covers(pt.saved, pt.info) {
			continue // ahead of the partition: not evictable until settled
		}
		e := pt.info
		if pt.taken && pt.recent {
			e = p.aheadOf(pt.info)
		}
		pt.taken = true
		dst = append(dst, p.save(pt, e, true))
	}
	clear(p.dirty)
	p.dirty = p.dirty[:0]
	p.evict()
	p.round++
	return dst
}

// latest returns the latest timestamp of s's partitions, as the planner
// knows them (exact for what it placed, the stored entry for what it
// loaded, which is never below the rows it covers), or math.MinInt64 if
// they hold none.
func (s *Series) latest() int64 {
	t := int64(math.MinInt64)
	for _, pt := range s.parts {
		if pt.info.Rows > 0 {
			t = max(t, pt.info.MaxTS)
		}
	}
	return t
}

// Before returns the latest timestamp of pt's series-day (over all its
// partitions, of every writer, as Load read them) before the round that
// placed rows in pt began, or math.MinInt64 if it held none: no row this
// planner handed out in an earlier round is later. whole says that every
// row of the series-day the round placed is in pt (no partition of it was
// closed in the round). Only meaningful for a partition Place returned in
// the current round.
func (pt *Partition) Before() (ts int64, whole bool) { return pt.s.before, !pt.s.split }

// Series returns the state of pt's series-day.
func (pt *Partition) Series() *Series { return pt.s }

// Round returns the current round: the number of rounds TakeEntries ended,
// plus one.
func (p *Planner) Round() uint64 { return p.round }

// Claim returns what the sink last noted with SetClaim. A state Load
// made starts with the round it was loaded in and math.MinInt64: what
// the sink noted with a state it replaced (an evicted one) is gone, so
// every minute counts as claimed by the batches planned before.
func (s *Series) Claim() (round uint64, from int64) { return s.claimRound, s.claimFrom }

// SetClaim notes, for the sink, the last round whose batch claimed new
// minutes of the series-day and the first minute claimed by the batches
// that may still be in flight (see sink.WithNewMinutes). The planner does
// not read it.
func (s *Series) SetClaim(round uint64, from int64) { s.claimRound, s.claimFrom = round, from }

// save hands out entry e for pt; rows says whether the commit carrying it
// writes rows (not a settle).
func (p *Planner) save(pt *Partition, e model.PartitionInfo, rows bool) Entry {
	mark := rows && (!pt.has || !pt.saved.Ahead)
	pt.saved, pt.has = e, true
	pt.pending++
	if e != pt.info {
		p.ahead[pt] = struct{}{}
	} else {
		delete(p.ahead, pt)
	}
	return Entry{Part: pt, Info: e, Mark: mark}
}

// covers reports whether entry e is still true of a partition in state pi:
// it claims at least pi's rows and bytes, a range that holds pi's, and the
// same state.
func covers(e, pi model.PartitionInfo) bool {
	return e.Closed == pi.Closed && e.State == pi.State && e.Rows >= pi.Rows && e.Bytes >= pi.Bytes &&
		e.MinTS <= pi.MinTS && e.MaxTS >= pi.MaxTS
}

// aheadOf returns the entry to write for a partition in state pi: pi
// widened by the Reserve (within the bounds and the day; to the day's end
// forward), or pi itself when
// the partition is closed or there is no Reserve.
func (p *Planner) aheadOf(pi model.PartitionInfo) model.PartitionInfo {
	r := p.cfg.Reserve
	if pi.Closed || r == (Reserve{}) {
		return pi
	}
	e := pi
	e.Rows = max(pi.Rows, min(pi.Rows+r.Rows, p.cfg.MaxRows))
	e.Bytes = max(pi.Bytes, min(pi.Bytes+r.Bytes, p.cfg.MaxBytes))
	e.MinTS = min(pi.MinTS, max(pi.MinTS-r.Span, pi.Key.Day.Start()))
	e.MaxTS = max(pi.MaxTS, pi.Key.Day.End()-1)
	e.Ahead = pi.Ahead || e != pi
	return e
}

// Settle returns exact entries for the partitions whose stored entry is
// ahead of them (or was lost, see Unsave): every one when all is true,
// else those that had no row placed since the previous call of Settle or
// SettleIdle (the sink calls it so when it must forget series-days). Call it
// between rounds.
func (p *Planner) Settle(all bool) []Entry {
	return p.settleAhead(func(pt *Partition) bool { return all || pt.epoch != p.epoch })
}

// SettleIdle returns exact entries for the partitions whose stored entry
// was lost (see Unsave), and for those whose stored entry is ahead of them
// and that had no row placed during the last idle calls of SettleIdle (at
// least 1). Called every interval, it makes the catalogue exact for
// partitions idle for idle intervals. Call it between rounds.
func (p *Planner) SettleIdle(idle uint64) []Entry {
	idle = max(idle, 1)
	// An entry lost with a failed commit (Unsave) is written again at once:
	// the rows of a store that is not atomic may be stored outside every
	// entry until then.
	out := p.settleAhead(func(pt *Partition) bool { return !pt.has || p.tick-pt.tick >= idle })
	p.tick++
	p.wait = idle
	return out
}

// settleAhead hands out the exact entries of the partitions ahead that due
// says to settle, and ends a settle epoch.
func (p *Planner) settleAhead(due func(*Partition) bool) []Entry {
	var out []Entry
	for pt := range p.ahead {
		if due(pt) {
			out = append(out, p.settle(pt))
		}
	}
	p.epoch++
	return out
}

// settle hands out pt's exact entry. The partition's next entry with rows
// is exact as well, as after a load.
func (p *Planner) settle(pt *Partition) Entry {
	pt.taken = false
	return p.save(pt, pt.info, false)
}

// SettleSeries returns exact entries for the partitions of these loaded
// series-days whose stored entry is ahead of them (or was lost), whether
// idle or not. Call it between rounds.
func (p *Planner) SettleSeries(sds []model.SeriesDay) []Entry {
	var out []Entry
	for _, sd := range sds {
		s := p.days.get(sd)
		if s == nil {
			continue
		}
		for _, pt := range s.parts {
			if _, ok := p.ahead[pt]; ok {
				out = append(out, p.settle(pt))
			}
		}
	}
	return out
}

// Unsave is told that entries handed out for these partitions were not
// stored (their commit failed): each is written again, exactly, by the
// next round that places a row in it, or by the next Settle. A partition
// whose series-day was forgotten meanwhile is left alone: the planner
// reloads that series-day from the store, and an entry written from the
// forgotten state could replace a newer one.
func (p *Planner) Unsave(parts []*Partition) {
	for _, pt := range parts {
		if !pt.s.held {
			continue // forgotten, or reloaded since
		}
		pt.has = false
		p.ahead[pt] = struct{}{}
	}
}

// Landed is told that the commits holding entries handed out for these
// partitions (one element per entry) finished, stored or failed (failures
// are also reported to Unsave, before). Call it between rounds: series-days
// that may now be forgotten are, if more than MaxSeriesDays are held.
func (p *Planner) Landed(parts []*Partition) {
	for _, pt := range parts {
		if pt.pending--; pt.pending == 0 {
			p.queueIdle(pt.s)
		}
	}
	p.evict()
}

// Resave returns the entries to write again for partitions whose earlier
// entry was lost, for a batch that relies on them.
func (p *Planner) Resave(parts []*Partition) []Entry {
	out := make([]Entry, 0, len(parts))
	for _, pt := range parts {
		out = append(out, p.save(pt, p.aheadOf(pt.info), true))
	}
	return out
}

// fits reports whether rows more rows of size bytes keep the partition within
// its bounds. An empty partition takes anything: configuration validation
// makes sure that one reading or event is far below the bounds.
func (p *Planner) fits(pi model.PartitionInfo, rows, bytes int64) bool {
	return pi.Rows == 0 || (pi.Rows+rows <= p.cfg.MaxRows && pi.Bytes+bytes <= p.cfg.MaxBytes)
}

// open starts the next partition of this writer: the single partition when
// it has none yet (the shared one: when the series-day has none at all),
// else its next split partition.
func (p *Planner) open(s *Series) error {
	sd := s.sd
	var pt *Partition
	switch {
	case p.cfg.PerWriterSingle && !s.single || !p.cfg.PerWriterSingle && len(s.parts) == 0:
		s.single = true
		sub := uint32(0)
		if p.cfg.PerWriterSingle {
			sub = SingleID(uint8(p.cfg.Writer))
		}
		pt = s.newPartition(model.PartitionInfo{Key: sd.Partition(sub), State: StateSingle})
	case s.maxSeq >= maxSplitSeq:
		return fmt.Errorf("assign row of %v: %w", sd, ErrSplitsExhausted)
	default:
		s.maxSeq++
		pt = s.newPartition(model.PartitionInfo{Key: sd.Partition(SubID(uint8(p.cfg.Writer), s.maxSeq)), State: StateSplit})
	}
	s.parts = append(s.parts, pt)
	s.active = pt
	p.opened = append(p.opened, Opened{Kind: sd.Kind, N: len(s.parts)})
	return nil
}

// Opened says that a partition of a series-day of Kind was opened, which
// then had N partitions (1 for its first).
type Opened struct {
	Kind model.Kind
	N    int
}

// TakeOpened returns the partitions opened since the last call, and
// forgets them.
func (p *Planner) TakeOpened() []Opened {
	out := p.opened
	p.opened = nil
	return out
}
