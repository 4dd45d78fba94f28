// Package rollupfeed drives the rollups: it recomputes, from the raw store,
// every device-minute the sink commits readings to, writes the rows to the
// durable outbox, and ships the outbox to the rollup backend (ClickHouse,
// or the embedded rollup store). It also rebuilds rollups from the raw
// store and verifies them against it.
//
// # Rollups from the raw store
//
// The feed is the sink's commit hook (sink.CommitHook). Before a batch
// reaches the raw store, BeforeCommit marks the device-minutes it writes,
// synced, in the marks database (package rollmarks), or, on the embedded
// store, where the marks share the raw store's database, adds their marks
// to the batch's own atomic write (WithMarksInCommits); after it is durable,
// AfterCommit adds them to the pending set, due RollDelay later
// (PastRollDelay for a minute long past: Feed.pastDue). The
// roller takes the due devices on every tick, reads each one's marked
// minutes back from the raw store (a run of nearby minutes per range read)
// and aggregates them whole into rows with writer rollup.RebuildWriter,
// part 0 and, as version, the time its reads began. Once the rows are
// stored (in the outbox, or in a local backend) the marks that no pending
// minute or commit in flight needs are forgotten, a generation at a time.
//
// The rollups are therefore a function of the raw store, not of the
// deliveries: a reading retried, redelivered, or sent through two gateways
// is stored once in the raw store (which de-duplicates on read) and so
// counted once. Of two gateways' recomputes of one minute, the one whose
// reads began later saw every commit that was durable when the other's
// began, and carries the higher version, which the backends keep. A crash
// loses no minute: its marks were durable with or before its commit, and
// the next start takes them up. The pending set is bounded (MaxPending: past it the
// oldest are recomputed early; past twice it BeforeCommit waits, so the
// write pipeline pushes back), and the wait is counted in
// sluice_rollup_queue_wait_seconds_total.
//
// A slow or unreachable backend never makes ingest wait: rows wait in the
// durable outbox. When the outbox is full (the backend has been unreachable
// for long), recomputed rows are dropped with reason="outbox_full": the
// outbox keeps the oldest rows, and the dirty days, listed by GET
// /v1/rollups/status and logged, are repaired with `query rollups rebuild`.
//
// # Delivery
//
// One shipper takes the oldest outbox records, inserts their rows and only
// then acknowledges them; a failed insert is retried with backoff, forever,
// while the outbox fills. Inserting a row twice is harmless (the backend
// keeps the highest version), so a crash between insert and acknowledgement
// costs nothing but a repeat.
//
// A local backend (the embedded rollup store, WithLocalBackend) is itself
// durable on this disk, so the outbox in front of it would only write every
// row twice: the roller inserts rows into it directly, in the same bounded
// batches. Only rows whose insert failed go to the outbox, where the
// shipper retries them like any other record (and past a full outbox they
// are dropped and their days marked dirty, as above). The shipper also
// drains records left in the outbox by an earlier run. Shutdown recomputes
// every pending minute the same way, before Close returns.
package rollupfeed

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice/internal/chstore"
	"github.com/sluicehq/sluice/internal/model"
	"github.com/sluicehq/sluice/internal/outbox"
	"github.com/sluicehq/sluice/internal/reader"
	"github.com/sluicehq/sluice/internal/rollmarks"
	"github.com/sluicehq/sluice/internal/rollup"
	"github.com/sluicehq/sluice/internal/store"
)

// Config is the rollups.* section.
type Config struct {
	Enabled bool `mapstructure:"enabled"`
	// RollDelay is how long after a commit its minutes are recomputed:
	// writes to one device-minute within it share one recompute.
	RollDelay time.Duration `mapstructure:"roll_delay"`
	// PastRollDelay is how long after a commit a minute that had ended
	// RollDelay or more before it is recomputed (pastDue): a backfill's
	// or a device's catch-up, which expect no further writes to the
	// minute. Above RollDelay it counts as RollDelay.
	PastRollDelay time.Duration `mapstructure:"past_roll_delay"`
	// MaxPending bounds the device-minutes waiting for their recompute, by
	// what they hold: a device's first pending minute counts one, each
	// further minute of it about a sixth (pendingSet.weight). Past it the
	// oldest are recomputed early, and past twice it the write pipeline
	// waits for the roller.
	MaxPending int `mapstructure:"max_pending"`
	// ReadConcurrency is how many raw reads a roll runs at once.
	ReadConcurrency int           `mapstructure:"read_concurrency"`
	FlushInterval   time.Duration `mapstructure:"flush_interval"`
	BatchRows       int           `mapstructure:"batch_rows"`
	OutboxMaxBytes  int64         `mapstructure:"outbox_max_bytes"`
	// MaxRebuilds is how many rebuilds (POST /v1/rollups/rebuild) may run
	// at once; one more is answered 503.
	MaxRebuilds int `mapstructure:"max_rebuilds"`
	// RebuildTimeout bounds one rebuild; its range is bounded by
	// read.max_days.
	RebuildTimeout time.Duration  `mapstructure:"rebuild_timeout"`
	ClickHouse     chstore.Config `mapstructure:"clickhouse"`
}

// DefaultConfig returns the defaults: rollups on, kept in the embedded store
// until rollups.clickhouse.addr is set. The gateway's configuration sizes
// MaxPending from its memory budget instead.
func DefaultConfig() Config {
	return Config{
		Enabled: true, RollDelay: 30 * time.Second, PastRollDelay: 5 * time.Second, MaxPending: 250_000, ReadConcurrency: 4,
		FlushInterval: time.Second, BatchRows: 50_000, OutboxMaxBytes: 1 << 30,
		MaxRebuilds: 1, RebuildTimeout: time.Hour,
		ClickHouse: chstore.DefaultConfig(),
	}
}

// Validate reports every bad setting.
func (c Config) Validate() error {
	var errs []error
	if c.RollDelay < 0 || c.RollDelay > 10*time.Minute {
		errs = append(errs, fmt.Errorf("rollups.roll_delay: must be between 0s and 10m, got %s", c.RollDelay))
	}
	if c.PastRollDelay < 0 || c.PastRollDelay > 10*time.Minute {
		errs = append(errs, fmt.Errorf("rollups.past_roll_delay: must be between 0s and 10m, got %s", c.PastRollDelay))
	}
	if c.MaxPending < 1000 || c.MaxPending > 100_000_000 {
		errs = append(errs, fmt.Errorf("rollups.max_pending: must be 1000..100000000 (or 0: sized by memory.budget_bytes), got %d", c.MaxPending))
	}
	if c.ReadConcurrency < 1 || c.ReadConcurrency > 256 {
		errs = append(errs, fmt.Errorf("rollups.read_concurrency: must be 1..256, got %d", c.ReadConcurrency))
	}
	if c.FlushInterval < 10*time.Millisecond || c.FlushInterval > time.Minute {
		errs = append(errs, fmt.Errorf("rollups.flush_interval: must be between 10ms and 1m, got %s", c.FlushInterval))
	}
	if c.BatchRows < 1 || c.BatchRows > 1_000_000 {
		errs = append(errs, fmt.Errorf("rollups.batch_rows: must be 1..1000000, got %d", c.BatchRows))
	}
	if c.OutboxMaxBytes < 1<<20 {
		errs = append(errs, fmt.Errorf("rollups.outbox_max_bytes: must be at least 1048576, got %d", c.OutboxMaxBytes))
	}
	if c.MaxRebuilds < 1 || c.MaxRebuilds > 64 {
		errs = append(errs, fmt.Errorf("rollups.max_rebuilds: must be 1..64, got %d", c.MaxRebuilds))
	}
	if c.RebuildTimeout < time.Second || c.RebuildTimeout > 24*time.Hour {
		errs = append(errs, fmt.Errorf("rollups.rebuild_timeout: must be 1s..24h, got %s", c.RebuildTimeout))
	}
	if err := c.ClickHouse.Validate("rollups.clickhouse."); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// Inserter is where shipped rows go. Insert must not keep rows after it
// returns: a roll's rows are recycled for the next one.
type Inserter interface {
	Insert(ctx context.Context, rows []rollup.Row) error
}

// Outbox is the durable queue between the roller and the shipper.
// Append must not keep payload: the feed reuses its buffer.
type Outbox interface {
	Append(payload []byte, rows int) error
	Peek(maxRows int) ([]outbox.Record, error)
	Ack(recs []outbox.Record) error
	Depth() outbox.Depth
	MarkDirty(marks []outbox.DirtyDay) error
}

// Marks is the durable record of the minutes whose rollups may be behind
// the raw store (package rollmarks).
type Marks interface {
	Add(gen uint64, ms []rollmarks.Minute) error
	Each(fn func(gen uint64, m rollmarks.Minute) error) error
	Forget(below uint64) error
	// Version and SetVersion keep the highest version a recompute used,
	// so that a restart never reuses a lower one (a clock set back).
	Version() (uint64, error)
	SetVersion(v uint64) error
}

// Stager is Marks kept in the raw store's own database (rollmarks.In),
// which add the marks of a commit to its write (store.Batch.Also).
type Stager interface {
	Stage(w rollmarks.Setter, gen uint64, ms []rollmarks.Minute) error
}

// WithMarksInCommits says that the marks are kept in the raw store's
// database (they implement Stager) and that the raw store writes a batch
// atomically, honouring store.Batch.Also (the embedded store): each
// commit then carries the marks of its minutes in its own write, instead
// of a synced write of the marks before it. Either way a commit that is
// durable has its marks durable.
func WithMarksInCommits() Option {
	return func(f *Feed) { f.inCommits = true }
}

// Feed is the running rollup pipeline. Create it with New, install it on
// the sink with sink.WithCommitHook, stop it with Close.
type Feed struct {
	cfg    Config
	ob     Outbox
	dst    Inserter
	raw    reader.Store
	marks  Marks
	now    func() time.Time
	logger *slog.Logger
	m      *metrics

	rowBufs sync.Pool // *[]rollup.Row: a roll's rows, recycled (rowBuf)

	wake     chan struct{} // the shipper has work
	rollNow  chan struct{} // more pending than MaxPending
	stopRoll chan struct{}
	rollDone chan struct{}
	rollCtx  context.Context // the recomputes' reads; cancelled when Close gives up
	stopRead context.CancelFunc
	shipCtx  context.Context
	stopShp  context.CancelFunc
	shpDone  chan struct{}

	stager       Stager // marks written with each commit (WithMarksInCommits); nil: before it
	inCommits    bool
	sessions     func(ctx context.Context) (ReadSession, error) // raw's (SessionStore); nil: read through raw
	local        bool                                           // insert rows into dst directly
	localLogged  time.Time                                      // last log of a failed local insert (roller goroutine)
	localFailing bool
	lastVersion  uint64    // roller goroutine
	rollLogged   time.Time // last log of a failed recompute (roller goroutine)
	// rowsPerMinute is how many rows the last recompute made per minute
	// (roller goroutine): what the next one sizes its rows by.
	rowsPerMinute float64

	mu       sync.Mutex // guards the fields below
	room     *sync.Cond // signalled when pending minutes fall
	gen      uint64     // generation new marks are written in
	forgot   uint64     // marks of generations below it are forgotten
	inflight map[uint64]int
	// markedTo is above every generation a mark may have been written in
	// (0: none yet), so that forget deletes nothing when no mark was
	// written since it last did: an idle gateway adds no range deletion
	// to the raw store every tick.
	markedTo uint64
	batches  map[*store.Batch]marked
	pending  pendingSet
	// WithCarriedMinutes: the rows of minutes summed from their commit,
	// waiting for the next roll, and the lowest generation of their marks
	// (when there are any).
	carry      bool
	carried    carried
	carrySpare []byte   // the buffer the roller stored last, for the next
	carryNames interner // metric and tenant names, for storeCarried (roller goroutine)
	// carryHold is the lowest generation of carried cells that could not
	// be stored (math.MaxUint64: none): their marks stay until restart.
	carryHold uint64
	lost      map[outbox.DirtyDay]struct{}
	closed    bool
	adding    sync.WaitGroup // marks.Add calls in progress
}

// ErrClosed is returned by BeforeCommit once Close began: the commit is
// refused rather than left out of the rollups.
var ErrClosed = errors.New("rollups stopped: commit refused")

// ErrMarksBusy is returned by Close when a mark write was still in progress
// as its context ended: the marks database must not be closed under it.
var ErrMarksBusy = errors.New("rollup marks still being written")

// marked is what BeforeCommit recorded of a batch in flight.
type marked struct {
	gen     uint64
	minutes []rollmarks.Minute
	ends    []int // where each readings partition's minutes end in minutes
}

// Option changes how a Feed works.
type Option func(*Feed)

// ReadSession is a raw store's read session (pebblestore.Reads): many
// small reads cheaper than through the store itself, seeing the store as
// it was when the session opened.
type ReadSession interface {
	reader.Store
	Close() error
}

// SessionStore is a raw store that opens read sessions: the recomputes and
// verify then read through one, a device's read costing a seek instead of
// new iterators (cmd/ingest wraps pebblestore.Store so).
type SessionStore interface {
	NewSession(ctx context.Context) (ReadSession, error)
}

// sessionsOf returns raw's session opener, or nil if it has none.
func sessionsOf(raw reader.Store) func(ctx context.Context) (ReadSession, error) {
	if s, ok := raw.(SessionStore); ok {
		return s.NewSession
	}
	return nil
}

// WithLocalBackend says that the Inserter is local and durable (the
// embedded rollup store): rows are inserted into it directly instead of
// through the outbox, which then only holds rows whose insert failed (see
// the package comment).
func WithLocalBackend() Option {
	return func(f *Feed) { f.local = true }
}

// New starts a feed that recomputes marked minutes from raw and writes
// them to dst (through ob unless WithLocalBackend). It first takes up the
// marks left by an earlier run: those minutes are recomputed on the first
// roll.
func New(cfg Config, raw reader.Store, marks Marks, ob Outbox, dst Inserter, now func() time.Time, logger *slog.Logger, reg prometheus.Registerer, opts ...Option) (*Feed, error) {
	f := &Feed{
		cfg: cfg, ob: ob, dst: dst, raw: raw, marks: marks, now: now, logger: logger,
		wake:      make(chan struct{}, 1),
		rollNow:   make(chan struct{}, 1),
		stopRoll:  make(chan struct{}),
		rollDone:  make(chan struct{}),
		shpDone:   make(chan struct{}),
		inflight:  make(map[uint64]int),
		batches:   make(map[*store.Batch]marked),
		pending:   newPendingSet(),
		carryHold: math.MaxUint64,
		lost:      make(map[outbox.DirtyDay]struct{}),
		sessions:  sessionsOf(raw),
	}
	f.room = sync.NewCond(&f.mu)
	for _, o := range opts {
		o(f)
	}
	if f.inCommits {
		st, ok := marks.(Stager)
		if !ok {
			return nil, errors.New("rollup marks kept in the raw store's commits: the marks cannot be staged in a commit")
		}
		f.stager = st
	}
	start := now()
	err := marks.Each(func(gen uint64, m rollmarks.Minute) error {
		// These minutes were written before this start: due at once.
		f.pending.add(m, gen, start.Add(-cfg.RollDelay))
		f.gen = max(f.gen, gen+1)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("take up rollup marks: %w", err)
	}
	f.markedTo = f.gen // above every generation taken up (0: none)
	// A minute marked in several generations (a commit of it, then a
	// retried request after a roll) has a mark in each.
	left := f.pending.compactAll()
	if f.lastVersion, err = marks.Version(); err != nil {
		return nil, fmt.Errorf("take up rollup marks: %w", err)
	}
	if left > 0 {
		logger.Info("rollups of minutes written before the restart are recomputed from the raw store", "minutes", left)
	}
	f.m = newMetrics(reg, ob, f)
	f.shipCtx, f.stopShp = context.WithCancel(context.Background())
	f.rollCtx, f.stopRead = context.WithCancel(context.Background())
	go f.roller()
	go f.ship()
	if d := ob.Depth(); d.Records > 0 {
		logger.Info("rollup outbox holds rows from before the restart; shipping them", "rows", d.Rows, "bytes", d.Bytes)
		f.signal()
	}
	return f, nil
}

// minutesOf lists the distinct device-minutes a batch writes readings to,
// partition by partition: ends holds where each partition with readings
// ends in out.
func minutesOf(b *store.Batch) (out []rollmarks.Minute, ends []int) {
	for _, pw := range b.Partitions {
		if pw.Key.Kind != model.KindReadings || len(pw.Readings) == 0 {
			continue
		}
		first := len(out)
		for _, r := range pw.Readings {
			m := rollup.MinuteOf(r.TS)
			if n := len(out); n > first && out[n-1].Minute == m {
				continue
			}
			out = append(out, rollmarks.Minute{Tenant: pw.Key.Tenant, Device: pw.Key.Series, Minute: m})
		}
		// Rows of a partition are mostly in time order; sort the rest.
		part := out[first:]
		slices.SortFunc(part, func(a, b rollmarks.Minute) int { return cmp.Compare(a.Minute, b.Minute) })
		out = out[:first+len(slices.CompactFunc(part, func(a, b rollmarks.Minute) bool { return a.Minute == b.Minute }))]
		ends = append(ends, len(out))
	}
	return out, ends
}

// BeforeCommit marks, synced, the minutes b writes readings to, before b
// reaches the raw store (sink.CommitHook), or, WithMarksInCommits, has b
// carry their marks in its own write: a crash after the commit leaves the
// marks for the next start. Past twice MaxPending it first waits for
// the roller (counted in sluice_rollup_queue_wait_seconds_total). Once
// Close began it refuses the commit (ErrClosed).
func (f *Feed) BeforeCommit(b *store.Batch) error {
	ms, ends := minutesOf(b)
	if len(ms) == 0 {
		return nil
	}
	f.mu.Lock()
	if f.pending.weight() > 2*f.cfg.MaxPending && !f.closed {
		start := time.Now()
		for f.pending.weight() > 2*f.cfg.MaxPending && !f.closed {
			f.room.Wait()
		}
		f.m.queueWait.Add(time.Since(start).Seconds())
	}
	if f.closed {
		f.mu.Unlock()
		return ErrClosed
	}
	g := f.gen
	f.inflight[g]++
	f.batches[b] = marked{gen: g, minutes: ms, ends: ends}
	f.markedTo = max(f.markedTo, g+1)
	if f.stager != nil {
		f.mu.Unlock()
		// Written, and synced, with the commit's own rows: no earlier
		// write, no second sync.
		b.Also = func(w store.Setter) error { return f.stager.Stage(w, g, ms) }
		return nil
	}
	f.adding.Add(1)
	f.mu.Unlock()
	err := f.marks.Add(g, ms)
	f.adding.Done()
	if err != nil {
		f.mu.Lock()
		f.finishGen(g)
		delete(f.batches, b)
		f.mu.Unlock()
		return err
	}
	return nil
}

// AfterCommit learns that b is durable (or failed): its minutes become due
// RollDelay from now, or PastRollDelay for a minute long past (pastDue);
// WithCarriedMinutes, the minutes it alone wrote are summed from its rows
// instead, and stored on the next roll.
func (f *Feed) AfterCommit(b *store.Batch, err error) {
	f.mu.Lock()
	mk, ok := f.batches[b]
	if !ok {
		f.mu.Unlock()
		return
	}
	delete(f.batches, b)
	// A failed commit is recomputed too: on a store that is not atomic
	// (Cassandra) some of its rows may be stored.
	now := f.now()
	carried, start, k := 0, 0, 0
	for i := range b.Partitions {
		pw := &b.Partitions[i]
		if pw.Key.Kind != model.KindReadings || len(pw.Readings) == 0 {
			continue
		}
		end := mk.ends[k]
		k++
		from := int64(math.MaxInt64)
		if f.carry && err == nil {
			from = f.carryLocked(pw, mk.gen, now)
		}
		for _, m := range mk.minutes[start:end] {
			if m.Minute >= from {
				carried++
				continue
			}
			f.pending.add(m, mk.gen, f.pastDue(m.Minute, now))
		}
		start = end
	}
	f.carried.minutes += carried
	f.finishGen(mk.gen)
	over := f.pending.weight() > f.cfg.MaxPending || len(f.carried.b) >= carryBytes/2
	f.mu.Unlock()
	if carried > 0 {
		f.m.carried.Add(float64(carried))
	}
	if over {
		select {
		case f.rollNow <- struct{}{}:
		default:
		}
	}
}

// pastDue returns when a minute committed at now counts as pending from:
// now, or, for a minute that ended RollDelay or more before
// now, RollDelay - PastRollDelay earlier, so that it is due PastRollDelay
// after the commit. Waiting RollDelay lets the writes of a minute that is
// still being written share one recompute; a minute that long past is a
// backfill's or a device's catch-up, and waiting would only hold its
// rollups back (and its rows leave the memtable and block cache before
// they are read again). PastRollDelay still lets a backfill's writes of a
// few seconds to one device share a read. Devices whose clocks lag the
// gateway's by more than RollDelay are recomputed once per PastRollDelay
// in which they write instead of once per RollDelay.
func (f *Feed) pastDue(minute int64, now time.Time) time.Time {
	end := minute + rollup.MinuteMillis // minute is a valid timestamp's: no overflow
	if end <= now.Add(-f.cfg.RollDelay).UnixMilli() {
		return now.Add(min(f.cfg.PastRollDelay, f.cfg.RollDelay) - f.cfg.RollDelay)
	}
	return now
}

// finishGen ends one commit of generation g. f.mu is held.
func (f *Feed) finishGen(g uint64) {
	if f.inflight[g]--; f.inflight[g] <= 0 {
		delete(f.inflight, g)
	}
}

func (f *Feed) markLost(days map[outbox.DirtyDay]struct{}) {
	f.mu.Lock()
	for d := range days {
		f.lost[d] = struct{}{}
	}
	f.mu.Unlock()
}

func (f *Feed) signal() {
	select {
	case f.wake <- struct{}{}:
	default:
	}
}

// store counts rows as emitted and hands them on in chunks of at most
// BatchRows rows: into a local backend directly, else (or when that insert
// fails) to the outbox.
func (f *Feed) store(rows []rollup.Row) {
	f.m.emitted.Add(float64(len(rows)))
	var buf []byte
	queued := false
	for len(rows) > 0 {
		n := min(len(rows), f.cfg.BatchRows)
		chunk := rows[:n]
		rows = rows[n:]
		if f.local && f.insertLocal(chunk) {
			continue
		}
		queued = true
		buf = rollup.EncodeRows(buf[:0], chunk)
		err := f.ob.Append(buf, len(chunk))
		if err != nil {
			reason := "outbox_error"
			if errors.Is(err, outbox.ErrFull) {
				reason = "outbox_full"
			}
			f.m.dropped.WithLabelValues(reason).Add(float64(len(chunk)))
			days := map[outbox.DirtyDay]struct{}{}
			for _, r := range chunk {
				days[outbox.DirtyDay{Tenant: r.Tenant, Day: model.DayOf(r.Minute)}] = struct{}{}
			}
			f.markLost(days)
			f.logger.Error("rollup rows dropped: rebuild their days later", "rows", len(chunk), "err", err)
			continue
		}
	}
	if queued {
		f.signal()
	}
}

// insertLocal inserts rows into the local backend and reports whether it
// did. A failure is counted and logged (at most every 30 s while it lasts);
// the caller then queues the rows in the outbox, whose shipper retries them.
func (f *Feed) insertLocal(rows []rollup.Row) bool {
	err := f.dst.Insert(f.shipCtx, rows)
	if err == nil {
		f.m.shipped.Add(float64(len(rows)))
		if f.localFailing {
			f.logger.Info("rollup store writable again")
			f.localFailing = false
		}
		return true
	}
	f.m.shipErrors.Inc()
	if !f.localFailing || f.now().Sub(f.localLogged) > 30*time.Second {
		f.logger.Error("insert rollup rows into the rollup store; they wait in the outbox to be retried", "rows", len(rows), "err", err)
		f.localLogged = f.now()
	}
	f.localFailing = true
	return false
}

// persistLost writes the dirty days to the outbox. final says no tick
// follows to retry a failure: the days are then logged instead.
func (f *Feed) persistLost(final bool) {
	f.mu.Lock()
	if len(f.lost) == 0 {
		f.mu.Unlock()
		return
	}
	days := make([]outbox.DirtyDay, 0, len(f.lost))
	for d := range f.lost {
		days = append(days, d)
	}
	f.lost = make(map[outbox.DirtyDay]struct{})
	f.mu.Unlock()
	slices.SortFunc(days, compareDirty)
	if err := f.ob.MarkDirty(days); err != nil {
		if final {
			f.logger.Error("rollups of these days are incomplete, and could not be recorded as dirty: rebuild them", "days", DirtyList(days), "err", err)
			return
		}
		// Keep them for the next tick: a day lost here would never be
		// reported for rebuild.
		f.mu.Lock()
		for _, d := range days {
			f.lost[d] = struct{}{}
		}
		f.mu.Unlock()
		f.logger.Error("mark rollup days dirty; will retry", "days", len(days), "err", err)
		return
	}
	f.logger.Warn("rollups of these days are incomplete; run `query rollups rebuild` for them (with the tenant's token)", "days", DirtyList(days))
}

func compareDirty(a, b outbox.DirtyDay) int {
	if c := cmp.Compare(a.Day, b.Day); c != 0 {
		return c
	}
	return strings.Compare(a.Tenant, b.Tenant)
}

// DirtyList renders dirty tenant-days for a log line: "tenant/day, …" (a
// mark that names no tenant shows as "*/day"), the first 20 and a count of
// the rest.
func DirtyList(marks []outbox.DirtyDay) string {
	const most = 20
	parts := make([]string, 0, min(len(marks), most)+1)
	for _, m := range marks[:min(len(marks), most)] {
		t := m.Tenant
		if t == "" {
			t = "*"
		}
		parts = append(parts, t+"/"+m.Day.String())
	}
	if len(marks) > most {
		parts = append(parts, fmt.Sprintf("and %d more (GET /v1/rollups/status lists a tenant's)", len(marks)-most))
	}
	return strings.Join(parts, ", ")
}

// ship delivers the outbox to the backend until stopped.
func (f *Feed) ship() {
	defer close(f.shpDone)
	ctx := f.shipCtx
	backoff := 100 * time.Millisecond
	failing := false
	var lastLog time.Time
	for {
		recs, err := f.ob.Peek(f.cfg.BatchRows)
		if err == nil && len(recs) > 0 {
			err = f.deliver(ctx, recs)
			if err == nil {
				if failing {
					d := f.ob.Depth()
					f.logger.Info("rollup backend reachable again; draining the outbox", "outbox_rows", d.Rows)
					failing = false
				}
				backoff = 100 * time.Millisecond
				continue
			}
		}
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			f.m.shipErrors.Inc()
			if !failing || time.Since(lastLog) > 30*time.Second {
				d := f.ob.Depth()
				f.logger.Warn("rollup backend unavailable; rows wait in the outbox", "outbox_rows", d.Rows, "outbox_bytes", d.Bytes, "retry_in", backoff, "err", err)
				lastLog = time.Now()
			}
			failing = true
			t := time.NewTimer(backoff)
			select {
			case <-ctx.Done():
				t.Stop()
				return
			case <-t.C:
			}
			backoff = min(backoff*2, 10*time.Second)
			continue
		}
		select {
		case <-ctx.Done():
			return
		case <-f.wake:
		}
	}
}

func (f *Feed) deliver(ctx context.Context, recs []outbox.Record) error {
	var rows []rollup.Row
	for _, r := range recs {
		rs, err := rollup.DecodeRows(r.Payload)
		if err != nil {
			// A record that does not decode can never be delivered: log it and
			// drop it, or it would block the outbox forever.
			f.logger.Error("drop corrupt outbox record", "seq", r.Seq, "rows", r.Rows, "err", err)
			f.m.dropped.WithLabelValues("corrupt").Add(float64(r.Rows))
			continue
		}
		rows = append(rows, rs...)
	}
	if err := f.dst.Insert(ctx, rows); err != nil {
		return err
	}
	f.m.shipped.Add(float64(len(rows)))
	return f.ob.Ack(recs)
}

// Close refuses further commits, waits for the marks being written, stops
// the roller after one last roll of every pending minute (so that nothing
// committed waits for the next start, unless ctx ends first: then its marks
// do), and tries to ship the outbox until ctx ends. Rows still in the
// outbox then are shipped by the next start. The sink should be closed
// first; a commit it still makes is refused (ErrClosed).
func (f *Feed) Close(ctx context.Context) (busy error) {
	f.mu.Lock()
	if f.closed {
		f.mu.Unlock()
		return nil
	}
	f.closed = true
	f.room.Broadcast()
	f.mu.Unlock()
	// The recomputes' reads stop when ctx does.
	stop := context.AfterFunc(ctx, f.stopRead)
	defer stop()
	added := make(chan struct{})
	go func() {
		f.adding.Wait()
		close(added)
	}()
	select {
	case <-added:
	case <-ctx.Done():
		// A mark write stuck on the disk: the caller must leave the marks
		// database open (ErrMarksBusy).
		busy = ErrMarksBusy
		f.logger.Error("rollup marks still being written at shutdown", "err", ctx.Err())
	}
	close(f.stopRoll)
	<-f.rollDone
	f.finalRoll(ctx)
	for f.ob.Depth().Records > 0 && ctx.Err() == nil {
		f.signal()
		t := time.NewTimer(20 * time.Millisecond)
		select {
		case <-ctx.Done():
		case <-t.C:
		}
		t.Stop()
	}
	f.stopShp()
	<-f.shpDone
	f.stopRead()
	if d := f.ob.Depth(); d.Records > 0 {
		f.logger.Warn("rollup outbox not empty at shutdown; it is shipped after the next start", "rows", d.Rows)
	}
	return busy
}
