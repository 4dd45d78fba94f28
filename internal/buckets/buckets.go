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
package buckets

import (
	"errors"
	"fmt"

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
	// MaxSeriesDays bounds the planner's memory; beyond it, series-days are
	// forgotten (at TakeDirty, never between Load and Assign) and reloaded
	// from the catalogue when next written.
	MaxSeriesDays int `mapstructure:"max_series_days"`
	// PerWriterSingle gives each writer its own single partition instead of
	// the shared sub-bucket 0 (see "Several writers" above). It is not a
	// configuration key: the composition root sets it for stores that
	// several gateways may write at once.
	PerWriterSingle bool `mapstructure:"-"`
}

// DefaultConfig returns the production defaults.
func DefaultConfig() Config {
	return Config{MaxRows: 100_000, MaxBytes: 32 << 20, Writer: 0, MaxSeriesDays: 1_000_000}
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
		errs = append(errs, fmt.Errorf("buckets.max_series_days: must be at least 1, got %d", c.MaxSeriesDays))
	}
	return errors.Join(errs...)
}

// ErrSplitsExhausted is returned when a writer opened the largest number of
// split partitions one series-day can have.
var ErrSplitsExhausted = errors.New("series-day has used every split partition id")

type seriesDay struct {
	parts  []model.PartitionInfo // every partition of the series-day, as known
	active int                   // index in parts of the partition this writer fills, -1 if none
	maxSeq int                   // highest split sequence number this writer used
	single bool                  // this writer opened its single partition
}

// Planner assigns rows to partitions. It is not safe for concurrent use: the
// sink's single flusher owns it.
type Planner struct {
	cfg   Config
	days  map[model.SeriesDay]*seriesDay
	dirty map[model.PartitionKey]dirtyRef
}

// dirtyRef points at a changed catalogue entry. It holds the series-day
// itself, so an entry stays reachable even if the series-day is evicted
// before TakeDirty.
type dirtyRef struct {
	s *seriesDay
	i int
}

// New returns a planner with no series-day loaded.
func New(cfg Config) *Planner {
	return &Planner{cfg: cfg, days: make(map[model.SeriesDay]*seriesDay), dirty: make(map[model.PartitionKey]dirtyRef)}
}

// Known reports whether the series-day's catalogue is loaded.
func (p *Planner) Known(sd model.SeriesDay) bool {
	_, ok := p.days[sd]
	return ok
}

// Len returns the number of series-days held in memory.
func (p *Planner) Len() int { return len(p.days) }

// Load installs the catalogue of a series-day, as read from the store. It
// must be called before the first Assign for that series-day. It never
// evicts: a caller loads every series-day of a round, then assigns, and a
// series-day it loaded or found Known must stay loaded until TakeDirty.
func (p *Planner) Load(sd model.SeriesDay, parts []model.PartitionInfo) {
	s := &seriesDay{active: -1}
	s.parts = append(s.parts, parts...)
	for i, pi := range s.parts {
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
		if s.active < 0 || pi.Key.Sub > s.parts[s.active].Key.Sub {
			s.active = i
		}
	}
	p.days[sd] = s
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
// tenth more, so that it does not run on every round. Their state is
// reloaded from the catalogue on their next write (after the commits that
// hold their changes), so forgetting is always safe.
func (p *Planner) evict() {
	if len(p.days) <= p.cfg.MaxSeriesDays {
		return
	}
	n := len(p.days) - p.cfg.MaxSeriesDays + p.cfg.MaxSeriesDays/10
	for k := range p.days {
		delete(p.days, k)
		if n--; n <= 0 {
			return
		}
	}
}

// Assign picks the partition for rows rows (the cells of one reading, or one
// audit event) of size bytes with timestamp ts, so that a reading is never
// split across partitions. It records the rows in that partition's
// catalogue entry (see TakeDirty) and returns the partition's key. The
// series-day must be loaded.
func (p *Planner) Assign(sd model.SeriesDay, ts int64, rows, bytes int64) (model.PartitionKey, error) {
	s, ok := p.days[sd]
	if !ok {
		return model.PartitionKey{}, fmt.Errorf("series-day %v not loaded", sd)
	}
	if s.active >= 0 && !p.fits(s.parts[s.active], rows, bytes) {
		s.parts[s.active].Closed = true
		p.markDirty(s, s.active)
		s.active = -1
	}
	if s.active < 0 {
		if err := p.open(sd, s); err != nil {
			return model.PartitionKey{}, err
		}
	}
	pi := &s.parts[s.active]
	if pi.Rows == 0 || ts < pi.MinTS {
		pi.MinTS = ts
	}
	if pi.Rows == 0 || ts > pi.MaxTS {
		pi.MaxTS = ts
	}
	pi.Rows += rows
	pi.Bytes += bytes
	p.markDirty(s, s.active)
	return pi.Key, nil
}

func (p *Planner) markDirty(s *seriesDay, i int) {
	p.dirty[s.parts[i].Key] = dirtyRef{s: s, i: i}
}

// TakeDirty returns a copy of every catalogue entry changed since the last
// call, in no particular order, and forgets them. The sink writes them in the
// same atomic commit as the rows that changed them. It ends a round: when
// more than MaxSeriesDays series-days are held, it evicts some.
func (p *Planner) TakeDirty() []model.PartitionInfo {
	out := make([]model.PartitionInfo, 0, len(p.dirty))
	for k, d := range p.dirty {
		out = append(out, d.s.parts[d.i])
		delete(p.dirty, k)
	}
	p.evict()
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
func (p *Planner) open(sd model.SeriesDay, s *seriesDay) error {
	if p.cfg.PerWriterSingle && !s.single || !p.cfg.PerWriterSingle && len(s.parts) == 0 {
		s.single = true
		sub := uint32(0)
		if p.cfg.PerWriterSingle {
			sub = SingleID(uint8(p.cfg.Writer))
		}
		s.parts = append(s.parts, model.PartitionInfo{Key: sd.Partition(sub), State: StateSingle})
		s.active = len(s.parts) - 1
		return nil
	}
	if s.maxSeq >= maxSplitSeq {
		return fmt.Errorf("assign row of %v: %w", sd, ErrSplitsExhausted)
	}
	s.maxSeq++
	s.parts = append(s.parts, model.PartitionInfo{Key: sd.Partition(SubID(uint8(p.cfg.Writer), s.maxSeq)), State: StateSplit})
	s.active = len(s.parts) - 1
	return nil
}

// Forget drops a series-day from memory, e.g. after retention dropped it or a
// commit that touched it failed (its counts may then be too high, which is
// safe, but reloading from the catalogue makes them exact again).
func (p *Planner) Forget(sd model.SeriesDay) { delete(p.days, sd) }
