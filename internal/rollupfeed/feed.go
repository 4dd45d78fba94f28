// Package rollupfeed drives the rollups: it receives every batch the sink
// made durable (sink.WithOnCommit), aggregates its readings into minute
// windows (package rollup), writes emitted rows to the durable outbox, and
// ships the outbox to the rollup backend (ClickHouse, or the embedded
// rollup store). It also rebuilds rollups from the raw store and verifies
// them against it.
//
// # Raw ingest waits for the aggregator, never for the backend
//
// Observe copies a pointer into a bounded queue (QueueBatches committed
// batches). When the queue is full, the aggregator is behind the sink (it is
// short of CPU: it does no I/O but the embedded rollup store's writes and
// the outbox's), and Observe waits for room: the committer that called it
// waits, the sink's queue fills, and producers are answered 503 until the
// aggregator caught up. That bounds the memory of a backlog and loses no
// row, where a queue that dropped rows when full left rollups incomplete
// until an operator rebuilt them, and a queue long enough not to drop held
// gigabytes of batches. The time spent waiting is counted in
// sluice_rollup_queue_wait_seconds_total. Only a batch observed after Close
// began is dropped (reason="queue_full"): its days are marked dirty if the
// aggregator has not recorded its last marks yet, and logged either way.
//
// A slow or unreachable backend never makes ingest wait: rows wait in the
// durable outbox. When the outbox is full (the backend has been unreachable
// for long), emitted rows are dropped with reason="outbox_full": the outbox
// keeps the oldest rows, and the dirty days, listed by GET
// /v1/rollups/status and logged, are repaired with `query rollups rebuild`.
// The raw store is the source of truth; rollups are a projection of it.
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
// row twice: the aggregator inserts emitted rows into it directly, on the
// flush tick, with the same bounded batches. Only rows whose insert failed
// go to the outbox, where the shipper retries them like any other record
// (and past a full outbox they are dropped and their days marked dirty, as
// above). The shipper also drains records left in the outbox by an earlier
// run. Shutdown flushes every window held the same way, before Close
// returns.
package rollupfeed

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice/internal/chstore"
	"github.com/sluicehq/sluice/internal/model"
	"github.com/sluicehq/sluice/internal/outbox"
	"github.com/sluicehq/sluice/internal/rollup"
	"github.com/sluicehq/sluice/internal/store"
)

// Config is the rollups.* section.
type Config struct {
	Enabled         bool          `mapstructure:"enabled"`
	AllowedLateness time.Duration `mapstructure:"allowed_lateness"`
	KeepClosed      time.Duration `mapstructure:"keep_closed"`
	MaxWindows      int           `mapstructure:"max_windows"`
	FlushInterval   time.Duration `mapstructure:"flush_interval"`
	BatchRows       int           `mapstructure:"batch_rows"`
	QueueBatches    int           `mapstructure:"queue_batches"`
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
// until rollups.clickhouse.addr is set.
func DefaultConfig() Config {
	return Config{
		Enabled: true, AllowedLateness: time.Minute, KeepClosed: 10 * time.Minute, MaxWindows: 250_000,
		FlushInterval: time.Second, BatchRows: 50_000, QueueBatches: 64, OutboxMaxBytes: 1 << 30,
		MaxRebuilds: 1, RebuildTimeout: time.Hour,
		ClickHouse: chstore.DefaultConfig(),
	}
}

// Validate reports every bad setting.
func (c Config) Validate() error {
	var errs []error
	if err := c.aggConfig(0).Validate("rollups."); err != nil {
		errs = append(errs, err)
	}
	if c.FlushInterval < 10*time.Millisecond || c.FlushInterval > time.Minute {
		errs = append(errs, fmt.Errorf("rollups.flush_interval: must be between 10ms and 1m, got %s", c.FlushInterval))
	}
	if c.BatchRows < 1 || c.BatchRows > 1_000_000 {
		errs = append(errs, fmt.Errorf("rollups.batch_rows: must be 1..1000000, got %d", c.BatchRows))
	}
	if c.QueueBatches < 1 {
		errs = append(errs, fmt.Errorf("rollups.queue_batches: must be at least 1, got %d", c.QueueBatches))
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

func (c Config) aggConfig(writer uint16) rollup.Config {
	return rollup.Config{AllowedLateness: c.AllowedLateness, KeepClosed: c.KeepClosed, MaxWindows: c.MaxWindows, Writer: writer}
}

// Inserter is where shipped rows go.
type Inserter interface {
	Insert(ctx context.Context, rows []rollup.Row) error
}

// Outbox is the durable queue between the aggregator and the shipper.
// Append must not keep payload: the feed reuses its buffer.
type Outbox interface {
	Append(payload []byte, rows int) error
	Peek(maxRows int) ([]outbox.Record, error)
	Ack(recs []outbox.Record) error
	Depth() outbox.Depth
	MarkDirty(marks []outbox.DirtyDay) error
}

// Feed is the running rollup pipeline. Create it with New, feed it with
// Observe, stop it with Close.
type Feed struct {
	cfg    Config
	ob     Outbox
	dst    Inserter
	now    func() time.Time
	logger *slog.Logger
	m      *metrics

	in      chan *store.Batch
	wake    chan struct{} // the shipper has work
	stopAgg chan struct{}
	aggDone chan struct{}
	shipCtx context.Context
	stopShp context.CancelFunc
	shpDone chan struct{}

	local        bool      // insert emitted rows into dst directly
	localLogged  time.Time // last log of a failed local insert (aggregator goroutine)
	localFailing bool

	mu     sync.Mutex // guards lost and closed
	lost   map[outbox.DirtyDay]struct{}
	closed bool
	// sends counts the Observe calls that may still put a batch in the
	// queue: Close waits for them before it stops the aggregator, so that
	// no batch lands in a queue nobody reads.
	sends sync.WaitGroup
}

// Option changes how a Feed works.
type Option func(*Feed)

// WithLocalBackend says that the Inserter is local and durable (the
// embedded rollup store): emitted rows are inserted into it directly
// instead of through the outbox, which then only holds rows whose insert
// failed (see the package comment).
func WithLocalBackend() Option {
	return func(f *Feed) { f.local = true }
}

// New starts a feed for writer id writer.
func New(cfg Config, writer uint16, ob Outbox, dst Inserter, now func() time.Time, logger *slog.Logger, reg prometheus.Registerer, opts ...Option) *Feed {
	f := &Feed{
		cfg: cfg, ob: ob, dst: dst, now: now, logger: logger,
		in:      make(chan *store.Batch, cfg.QueueBatches),
		wake:    make(chan struct{}, 1),
		stopAgg: make(chan struct{}),
		aggDone: make(chan struct{}),
		shpDone: make(chan struct{}),
		lost:    make(map[outbox.DirtyDay]struct{}),
	}
	for _, o := range opts {
		o(f)
	}
	f.m = newMetrics(reg, ob)
	f.shipCtx, f.stopShp = context.WithCancel(context.Background())
	agg := rollup.New(cfg.aggConfig(writer), now())
	go f.aggregate(agg)
	go f.ship()
	if d := ob.Depth(); d.Records > 0 {
		logger.Info("rollup outbox holds rows from before the restart; shipping them", "rows", d.Rows, "bytes", d.Bytes)
		f.signal()
	}
	return f
}

// Observe is the sink's commit hook. It waits while the queue is full (see
// the package comment); after Close began it drops the batch.
func (f *Feed) Observe(b *store.Batch) {
	f.mu.Lock()
	if f.closed {
		f.mu.Unlock()
		f.dropClosed(b)
		return
	}
	f.sends.Add(1)
	f.mu.Unlock()
	defer f.sends.Done()
	select {
	case f.in <- b:
		return
	default:
	}
	// The aggregator runs until Close has waited for this send.
	start := time.Now()
	f.in <- b
	f.m.queueWait.Add(time.Since(start).Seconds())
}

// dropClosed leaves out of the rollups a batch committed after Close
// began. Its days are marked dirty in memory, which the aggregator writes
// to the outbox if it has not stopped yet; they are logged either way,
// since the outbox may already be closed.
func (f *Feed) dropClosed(b *store.Batch) {
	rows := 0
	days := map[outbox.DirtyDay]struct{}{}
	for _, pw := range b.Partitions {
		if pw.Key.Kind == model.KindReadings {
			rows += len(pw.Readings)
			days[outbox.DirtyDay{Tenant: pw.Key.Tenant, Day: pw.Key.Day}] = struct{}{}
		}
	}
	if rows == 0 {
		return
	}
	f.m.dropped.WithLabelValues("queue_full").Add(float64(rows))
	f.markLost(days)
	list := slices.SortedFunc(maps.Keys(days), compareDirty)
	f.logger.Error("rows committed after the rollups stopped are not in them: rebuild these days", "rows", rows, "days", DirtyList(list))
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

// aggregate owns the Aggregator.
func (f *Feed) aggregate(agg *rollup.Aggregator) {
	defer close(f.aggDone)
	tick := time.NewTicker(f.cfg.FlushInterval)
	defer tick.Stop()
	var prev rollup.Stats
	add := func(b *store.Batch) {
		now := f.now()
		for _, pw := range b.Partitions {
			if pw.Key.Kind == model.KindReadings && len(pw.Readings) > 0 {
				agg.Add(now, pw.Key.Tenant, pw.Key.Series, pw.Readings)
			}
		}
	}
	emit := func(rows []rollup.Row) {
		f.store(rows)
		st := agg.Stats()
		f.m.late.Add(float64(st.Late - prev.Late))
		f.m.duplicates.Add(float64(st.Duplicates - prev.Duplicates))
		f.m.emitted.Add(float64(st.Emitted - prev.Emitted))
		f.m.reemitted.Add(float64(st.Reemitted - prev.Reemitted))
		prev = st
		f.m.windows.Set(float64(agg.Len()))
	}
	for {
		select {
		case b := <-f.in:
			add(b)
			// Only Advance evicts (rollup.Config.MaxWindows): between two
			// ticks a fast stream could start many more than the bound.
			if agg.Len() > f.cfg.MaxWindows {
				emit(agg.Advance(f.now()))
			}
		case <-tick.C:
			emit(agg.Advance(f.now()))
			f.persistLost(false)
		case <-f.stopAgg:
			for {
				select {
				case b := <-f.in:
					add(b)
					continue
				default:
				}
				break
			}
			emit(agg.Flush(f.now()))
			f.persistLost(true)
			return
		}
	}
}

// store hands emitted rows on in chunks of at most BatchRows rows: into a
// local backend directly, else (or when that insert fails) to the outbox.
func (f *Feed) store(rows []rollup.Row) {
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

// Close stops aggregating, emits every window held (so that nothing
// observed is lost; it waits in the outbox if it cannot be shipped), and
// tries to ship the outbox until ctx ends. Rows still in the outbox then are
// shipped by the next start.
func (f *Feed) Close(ctx context.Context) error {
	f.mu.Lock()
	if f.closed {
		f.mu.Unlock()
		return nil
	}
	f.closed = true
	f.mu.Unlock()
	// Observe calls that began before are let finish (the aggregator still
	// takes from the queue), then the aggregator drains it and stops.
	f.sends.Wait()
	close(f.stopAgg)
	<-f.aggDone
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
	if d := f.ob.Depth(); d.Records > 0 {
		f.logger.Warn("rollup outbox not empty at shutdown; it is shipped after the next start", "rows", d.Rows)
	}
	return nil
}
