// Package sink is the write path shared by every transport: it admits
// validated rows under a bounded budget, places each row in its partition
// through the bucket planner, groups rows by partition, and commits them
// durably, many requests to one commit. Write returns only after the commit
// that holds the request's rows is durable, or with an error, in which case
// nothing of that request may be assumed stored.
//
// # Pipeline
//
//  1. Write takes a share of the row budget (Config.QueueRows), waiting at
//     most Config.AdmissionTimeout; without it the caller gets a *BusyError.
//     A transport may take the share before it decodes the rows (Reserve,
//     then WriteReserved), so that a request that would be refused is
//     refused before its rows cost memory.
//  2. One flusher goroutine collects requests until Config.BatchRows rows are
//     waiting or Config.Linger passed since the first, then plans them. It
//     alone touches the planner, so bucketing decisions are serial. Before it
//     loads a series-day's catalogue it waits for the commits in flight that
//     carry an entry of that series-day, so the catalogue it reads is never
//     older than the planner's own writes. It loads the catalogues a round
//     needs in parallel (at most catalogueLoads at once).
//  3. Up to Config.Commits committer goroutines write batches. Every request
//     of a batch is answered with the batch's result, and its budget freed.
//
// A request's rows never span two batches, so a request is all-or-nothing.
//
// Two orderings are kept between batches in flight. A batch that carries a
// catalogue entry also carried by an earlier batch still being committed is
// committed only after that one, so the entry in the store is never replaced
// by an older copy. (A store that implements Versioner orders the writes of
// one key by the batch's version, taken in plan order, however they land:
// there such batches commit concurrently.) A request whose audit event was
// skipped because an earlier batch in flight holds the same event_id is
// answered only once that batch is durable, and with its error if it failed.
//
// Catalogue entries run ahead of their partitions (see package buckets), so
// a batch may add rows to a partition whose entry is carried by an earlier
// batch still in flight: its requests are answered only once that batch is
// durable, and fail if it failed (the rows would be stored where no reader
// looks). The entries of a failed batch are written again by a later one,
// and a series-day is not evicted from the planner while one of its entries
// is in flight.
package sink

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sync/errgroup"
	"golang.org/x/sync/semaphore"

	"github.com/sluicehq/sluice/internal/audit/canon"
	"github.com/sluicehq/sluice/internal/buckets"
	"github.com/sluicehq/sluice/internal/hotparts"
	"github.com/sluicehq/sluice/internal/model"
	"github.com/sluicehq/sluice/internal/store"
)

// Store is what the sink needs of a storage backend.
type Store interface {
	// Catalogue returns every partition of a series-day.
	Catalogue(ctx context.Context, sd model.SeriesDay) ([]model.PartitionInfo, error)
	// AuditSeen reports which audit event ids are already stored.
	AuditSeen(ctx context.Context, ids []store.AuditID) ([]bool, error)
	// Commit writes the batch atomically; it returns nil only once durable.
	Commit(ctx context.Context, b *store.Batch) error
}

// AuditLookup is implemented by a Store that returns stored audit events:
// a resubmitted event_id is then compared with what is stored, and refused
// with a *ConflictError if its payload differs. ids are ids AuditSeen
// reported stored; like[i] is the event being resubmitted as ids[i]. The
// store returns the stored event, or nil when it is not where like[i]
// would be stored (a backend that cannot find an event by id alone looks
// only there): a stored id whose event is elsewhere has another stream or
// ts, so another payload.
type AuditLookup interface {
	AuditEvents(ctx context.Context, ids []store.AuditID, like []*model.AuditEvent) ([]*model.AuditEvent, error)
}

// ConflictError refuses a request that resubmits a stored (or in-flight)
// audit event_id with a different payload. Nothing of the request is
// stored.
type ConflictError struct {
	EventID string
	Stream  string
}

func (e *ConflictError) Error() string {
	return fmt.Sprintf("audit event %q (stream %q) is already stored with a different payload; an event_id names one event: nothing of this request was stored", e.EventID, e.Stream)
}

// Versioner is implemented by a Store that orders two writes of the same key
// by store.Batch.Version rather than by the order in which they land
// (Cassandra's write timestamps). Version returns a value greater than every
// one it returned before; the sink calls it as it plans each batch, so a
// batch planned later wins.
type Versioner interface {
	Version() int64
}

// CatalogueLoader is implemented by a Store that reads the catalogues of
// many series-days (out[i] for sds[i]) in fewer requests than one each.
type CatalogueLoader interface {
	Catalogues(ctx context.Context, sds []model.SeriesDay) ([][]model.PartitionInfo, error)
}

// catalogueLoads bounds the catalogue reads of one round in flight at once.
const catalogueLoads = 32

// Config tunes batching and back-pressure.
type Config struct {
	BatchRows        int           `mapstructure:"batch_rows"`
	Linger           time.Duration `mapstructure:"linger"`
	QueueRows        int           `mapstructure:"queue_rows"`
	AdmissionTimeout time.Duration `mapstructure:"admission_timeout"`
	Commits          int           `mapstructure:"commits"`
	// HotPartitions bounds the partitions whose write rate is tracked
	// (see Hottest).
	HotPartitions int `mapstructure:"hot_partitions"`
}

// DefaultConfig returns the production defaults.
func DefaultConfig() Config {
	return Config{BatchRows: 4_000, Linger: 0, QueueRows: 1_000_000, AdmissionTimeout: time.Second, Commits: 4, HotPartitions: 1000}
}

// Validate reports every bad setting.
func (c Config) Validate() error {
	var errs []error
	if c.BatchRows < 1 {
		errs = append(errs, fmt.Errorf("sink.batch_rows: must be at least 1, got %d", c.BatchRows))
	}
	if c.Linger < 0 || c.Linger > time.Second {
		errs = append(errs, fmt.Errorf("sink.linger: must be between 0s and 1s, got %s", c.Linger))
	}
	if c.QueueRows < c.BatchRows {
		errs = append(errs, fmt.Errorf("sink.queue_rows: must be at least sink.batch_rows (%d), got %d", c.BatchRows, c.QueueRows))
	}
	if c.AdmissionTimeout < 0 {
		errs = append(errs, fmt.Errorf("sink.admission_timeout: must not be negative, got %s", c.AdmissionTimeout))
	}
	if c.Commits < 1 || c.Commits > 64 {
		errs = append(errs, fmt.Errorf("sink.commits: must be 1..64, got %d", c.Commits))
	}
	if c.HotPartitions < 1 || c.HotPartitions > maxHotPartitions {
		errs = append(errs, fmt.Errorf("sink.hot_partitions: must be 1..%d, got %d", maxHotPartitions, c.HotPartitions))
	}
	return errors.Join(errs...)
}

// BusyError says the pipeline is full; the caller should retry after
// RetryAfter. Nothing of the request was stored.
type BusyError struct {
	RetryAfter time.Duration
	Reason     string
}

func (e *BusyError) Error() string { return "sink busy: " + e.Reason }

// ErrClosed is returned by Write after Close began.
var ErrClosed = errors.New("sink is shutting down")

// Request is one all-or-nothing unit of rows of one tenant.
type Request struct {
	Tenant   string
	Readings []model.Reading
	Audit    []model.AuditEvent
	// DeadLetters are kept in the same commit as the rows; each is stored
	// under the request's Tenant, whatever its own Tenant field says.
	DeadLetters []model.DeadLetter
}

// Rows counts the rows (cells and dead letters) the request stores.
func (r *Request) Rows() int {
	n := len(r.Audit) + len(r.DeadLetters)
	for i := range r.Readings {
		n += len(r.Readings[i].Metrics)
	}
	return n
}

type pending struct {
	req    *Request
	rows   int
	weight int64
	done   chan error
	// dupOf holds the batches in flight that hold audit events this request
	// skipped as duplicates: the request succeeds only if they do.
	dupOf []*batch
}

type batch struct {
	b       store.Batch
	entries []*buckets.Partition // the partitions of b.Catalogue, in its order
	waiters []*pending
	ids     []store.AuditID
	events  []*model.AuditEvent // the events of ids, in their order, for the conflict check
	after   []*batch            // batches in flight with a catalogue entry of this one
	// deps are batches in flight that carry the catalogue entries of
	// partitions this batch writes rows to: its requests succeed only if
	// they do.
	deps []*batch
	days map[model.SeriesDay]struct{} // series-days of its catalogue entries
	done chan struct{}                // closed once committed or failed; err is then set
	err  error
}

// Sink is the write pipeline. Create it with New, stop it with Close.
type Sink struct {
	cfg     Config
	bcfg    buckets.Config
	st      Store
	planner *buckets.Planner
	logger  *slog.Logger
	m       *metrics
	hm      *healthMetrics
	hot     *hotparts.Tracker

	budget *semaphore.Weighted
	in     chan *pending
	sat    saturation // since when admission has been refusing (readiness)

	mu       sync.Mutex // guards closed, sends, inflight, catalogue, flight and failed
	closed   bool
	sends    sync.WaitGroup
	inflight map[store.AuditID]dup // audit ids in batches not yet committed, with their batch and event
	// catalogue maps a partition to the last batch not yet committed that
	// carries its catalogue entry.
	catalogue map[*buckets.Partition]*batch
	flight    map[*batch]struct{} // batches planned and not yet committed
	// failed holds the partitions whose entry was in a batch that failed:
	// the flusher has them written again (buckets.Planner.Unsave).
	failed map[*buckets.Partition]struct{}
	// landed holds the partitions of entries whose commit finished, for
	// the planner (buckets.Planner.Landed).
	landed   []*buckets.Partition
	versions Versioner // st, if it orders writes by version

	settleEvery time.Duration
	settleReq   chan settleRequest
	// settledEarly is when the flusher last settled because the planner
	// was over its bound (flusher goroutine only).
	settledEarly time.Time

	commits   chan *batch
	commitsWG sync.WaitGroup // committers running
	done      chan struct{}
	hook      CommitHook                    // see WithCommitHook; nil when unset
	gate      func(*model.AuditEvent) error // see WithAuditGate; nil when unset
	lookup    AuditLookup                   // st, if it returns stored events

	// The flusher's view of how close series-days come to their split
	// limit: the largest split sequence number per day, for the two
	// newest days seen (see noteSplit).
	splits map[model.Day]int
}

// WithAuditGate has Write refuse a request, storing nothing, when gate
// returns an error for one of its audit events; Write returns that error.
// The audit log uses it to refuse events of days that are sealed.
func WithAuditGate(gate func(*model.AuditEvent) error) Option {
	return func(s *Sink) { s.gate = gate }
}

// Option adds optional behaviour to a Sink.
type Option func(*Sink)

// CommitHook is told of every batch around its commit, from the committer
// goroutine. BeforeCommit runs before the batch is written to the store; an
// error from it fails the commit (its requests are answered with it and
// nothing is written). AfterCommit runs once the batch's requests were
// answered, with the commit's result, for every batch that BeforeCommit
// accepted. Neither may modify the batch; AfterCommit may keep it, the
// sink never touches a committed batch again. Batches of concurrent
// committers may reach the hook concurrently and out of order. The rollups
// mark the minutes a batch writes before it is durable and learn after
// that it is, so they only ever count rows that are durable and never miss
// one after a crash.
type CommitHook interface {
	BeforeCommit(b *store.Batch) error
	AfterCommit(b *store.Batch, err error)
}

// WithCommitHook installs h (see CommitHook).
func WithCommitHook(h CommitHook) Option {
	return func(s *Sink) { s.hook = h }
}

// earlySettles is how many times per settle interval, at most, a planner
// over buckets.max_series_days settles idle entries early (about every
// second at the default interval).
const earlySettles = 32

// DefaultSettleInterval is how often the sink makes the catalogue entries of
// idle partitions exact again (see buckets.Planner.Settle): a partition is
// settled after one to two intervals without a new row.
const DefaultSettleInterval = 30 * time.Second

// WithSettleInterval changes DefaultSettleInterval.
func WithSettleInterval(d time.Duration) Option {
	return func(s *Sink) { s.settleEvery = d }
}

// New starts a sink writing to st.
func New(cfg Config, bcfg buckets.Config, st Store, logger *slog.Logger, reg prometheus.Registerer, opts ...Option) *Sink {
	s := &Sink{
		cfg:       cfg,
		bcfg:      bcfg,
		st:        st,
		planner:   buckets.New(bcfg),
		logger:    logger,
		m:         newMetrics(reg),
		hm:        newHealthMetrics(reg),
		hot:       hotparts.New(cfg.HotPartitions, hotparts.DefaultTau),
		budget:    semaphore.NewWeighted(int64(cfg.QueueRows)),
		in:        make(chan *pending, 4096),
		inflight:  make(map[store.AuditID]dup),
		catalogue: make(map[*buckets.Partition]*batch),
		flight:    make(map[*batch]struct{}),
		failed:    make(map[*buckets.Partition]struct{}),

		settleEvery: DefaultSettleInterval,
		settleReq:   make(chan settleRequest),
		commits:     make(chan *batch),
		done:        make(chan struct{}),
	}
	s.versions, _ = st.(Versioner)
	s.m.queueCapacity.Set(float64(cfg.QueueRows))
	s.lookup, _ = st.(AuditLookup)
	for _, o := range opts {
		o(s)
	}
	for range cfg.Commits {
		s.commitsWG.Go(s.committer)
	}
	go s.flusher()
	return s
}

// Write stores the request's rows and returns once they are durable.
func (s *Sink) Write(ctx context.Context, req *Request) error {
	rows := req.Rows()
	if rows == 0 {
		return nil
	}
	// Admitted here rather than through Reserve: no Reservation is
	// allocated for every message.
	weight := min(int64(rows), int64(s.cfg.QueueRows))
	if err := s.admit(ctx, weight); err != nil {
		return s.refuse(ctx)
	}
	return s.writeAdmitted(ctx, req, weight)
}

// Reservation is a share of the row budget taken before the rows it is for
// exist, so that a transport can refuse a request before it spends memory
// decoding it. Pass it to WriteReserved, or give it back with Release.
type Reservation struct {
	s      *Sink
	weight int64
	done   bool
}

// Reserve takes room for up to rows rows, as Write would for a request of
// that many, waiting at most Config.AdmissionTimeout; when the budget stays
// full it returns a *BusyError. A reservation larger than the whole budget
// takes all of it.
func (s *Sink) Reserve(ctx context.Context, rows int) (*Reservation, error) {
	weight := min(int64(max(rows, 1)), int64(s.cfg.QueueRows))
	if err := s.admit(ctx, weight); err != nil {
		return nil, s.refuse(ctx)
	}
	return &Reservation{s: s, weight: weight}, nil
}

// refuse is the error of a failed admission: ctx's if it ended, else a
// *BusyError.
func (s *Sink) refuse(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	return s.busyError()
}

func (s *Sink) busyError() *BusyError {
	s.m.busy.Inc()
	s.sat.refused(time.Now())
	return &BusyError{RetryAfter: time.Second, Reason: fmt.Sprintf("more than %d rows waiting to be written", s.cfg.QueueRows)}
}

// Release gives back a reservation that was not passed to WriteReserved. It
// is safe to call more than once, and after WriteReserved (it then does
// nothing).
func (r *Reservation) Release() {
	if r == nil || r.done {
		return
	}
	r.done = true
	r.s.budget.Release(r.weight)
}

// WriteReserved is Write for a request whose rows were reserved with
// Reserve; it consumes res whatever it returns. Room reserved beyond the
// request's rows is given back at once; a request with more rows than
// reserved is admitted for the rest as Write would, and gets a *BusyError
// if that fails.
func (s *Sink) WriteReserved(ctx context.Context, res *Reservation, req *Request) error {
	if res == nil || res.done || res.s != s {
		return errors.New("sink: WriteReserved needs an unused reservation of this sink")
	}
	res.done = true
	return s.writeAdmitted(ctx, req, res.weight)
}

// writeAdmitted writes req, for which held of the budget is already
// admitted, and consumes held whatever it returns: room beyond the
// request's rows is given back at once; a request with more rows than held
// is admitted for the rest, and gets a *BusyError if that fails.
func (s *Sink) writeAdmitted(ctx context.Context, req *Request, held int64) error {
	if s.gate != nil {
		for i := range req.Audit {
			if err := s.gate(&req.Audit[i]); err != nil {
				s.budget.Release(held)
				return err
			}
		}
	}
	rows := req.Rows()
	weight := min(int64(rows), int64(s.cfg.QueueRows))
	switch {
	case weight < held:
		s.budget.Release(held - weight)
	case weight > held:
		if err := s.admit(ctx, weight-held); err != nil {
			s.budget.Release(held)
			return s.refuse(ctx)
		}
	}
	if rows == 0 {
		return nil
	}
	s.sat.admitted()
	p := &pending{req: req, rows: rows, weight: weight, done: make(chan error, 1)}

	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		s.budget.Release(weight)
		return ErrClosed
	}
	s.sends.Add(1)
	s.mu.Unlock()
	s.m.queued.Add(float64(rows))
	s.in <- p // cannot block for long: the budget bounds what is queued
	s.sends.Done()

	select {
	case err := <-p.done:
		return err
	case <-ctx.Done():
		// The rows may still become durable; the caller will not know, and
		// retries are idempotent.
		return ctx.Err()
	}
}

// admit takes weight from the budget, waiting at most AdmissionTimeout. A
// zero timeout means "do not wait", not "never admit": a context that is
// already expired would make Acquire fail even with the budget free.
func (s *Sink) admit(ctx context.Context, weight int64) error {
	if s.cfg.AdmissionTimeout <= 0 {
		if err := ctx.Err(); err != nil {
			return err
		}
		if !s.budget.TryAcquire(weight) {
			return context.DeadlineExceeded
		}
		return nil
	}
	actx, cancel := context.WithTimeout(ctx, s.cfg.AdmissionTimeout)
	defer cancel()
	return s.budget.Acquire(actx, weight)
}

// Close stops admitting writes, commits everything already admitted and
// waits for it, or for ctx.
func (s *Sink) Close(ctx context.Context) error {
	s.mu.Lock()
	if !s.closed {
		s.closed = true
		s.mu.Unlock()
		s.sends.Wait()
		close(s.in)
	} else {
		s.mu.Unlock()
	}
	select {
	case <-s.done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("drain sink: %w", ctx.Err())
	}
}

// settleRequest asks the flusher to settle the entries of sds (all when
// sds is empty) and to send the result to done.
type settleRequest struct {
	ctx  context.Context
	sds  []model.SeriesDay
	done chan error
}

// Settle makes the catalogue entries of the partitions of sds (of every
// partition written so far when sds is empty) exact, durably (see
// buckets.Planner.Settle), and returns once they are. The partitions
// listing calls it for the series-day it lists, so that it shows exact
// counts. The catalogue reads and recounts it has the flusher do for
// series-days the planner does not hold stop when ctx ends, so that a
// reader's deadline also bounds the time the flusher plans no writes.
func (s *Sink) Settle(ctx context.Context, sds ...model.SeriesDay) error {
	done := make(chan error, 1)
	select {
	case s.settleReq <- settleRequest{ctx, sds, done}:
	case <-s.done:
		return ErrClosed
	case <-ctx.Done():
		return ctx.Err()
	}
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// flusher collects, plans and hands batches to the committers. Between
// rounds it settles the catalogue entries of idle partitions, and it
// settles all of them before it stops.
func (s *Sink) flusher() {
	defer func() {
		close(s.commits)
		s.commitsWG.Wait()
		close(s.done)
	}()
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	tick := time.NewTicker(s.settleEvery)
	defer tick.Stop()
	for {
		var first *pending
		select {
		case p, ok := <-s.in:
			if !ok {
				s.settle(context.Background(), true, nil, nil)
				return
			}
			first = p
		case <-tick.C:
			s.settle(context.Background(), false, nil, nil)
			continue
		case r := <-s.settleReq:
			s.settle(r.ctx, true, r.sds, r.done)
			continue
		}
		group := []*pending{first}
		rows := first.rows
		open := true
		// Take what is already queued, without waiting.
	drain:
		for rows < s.cfg.BatchRows {
			select {
			case p, ok := <-s.in:
				if !ok {
					open = false
					break drain
				}
				group = append(group, p)
				rows += p.rows
			default:
				break drain
			}
		}
		// Then wait up to Linger for more.
		if open && rows < s.cfg.BatchRows && s.cfg.Linger > 0 {
			timer.Reset(s.cfg.Linger)
		collect:
			for rows < s.cfg.BatchRows {
				select {
				case p, ok := <-s.in:
					if !ok {
						open = false
						break collect
					}
					group = append(group, p)
					rows += p.rows
				case <-timer.C:
					break collect
				}
			}
			timer.Stop()
		}
		s.plan(group)
		if s.planner.Over() && time.Since(s.settledEarly) >= s.settleEvery/earlySettles {
			// Series-days whose entries run ahead cannot be forgotten:
			// settle the ones idle since the last settle now, rather than
			// on the next tick, so that they can go once their entries
			// landed and the planner stays near buckets.max_series_days
			// however many devices write within a settle interval. Not
			// after every round: a settle makes "idle" mean "not written
			// since", and a partition settled while its device still
			// writes costs an exact entry now and one ahead again next.
			s.settledEarly = time.Now()
			s.settle(context.Background(), false, nil, nil)
		}
		if !open {
			s.settle(context.Background(), true, nil, nil)
			return
		}
	}
}

// settle commits exact catalogue entries for the partitions whose entry is
// ahead of them: those of sds if any are given, else all, or the idle ones.
// done, if set, gets the result. ctx bounds the catalogue reads and
// recounts of series-days the planner does not hold (see Settle).
func (s *Sink) settle(ctx context.Context, all bool, sds []model.SeriesDay, done chan error) {
	s.takeFailed()
	var entries []buckets.Entry
	if len(sds) > 0 {
		// A series-day not held may have entries left ahead by an earlier
		// run: load it (which reconciles them) so that they settle too.
		var missing []model.SeriesDay
		for _, sd := range sds {
			if s.planner.Lookup(sd) == nil {
				missing = append(missing, sd)
			}
		}
		if len(missing) > 0 {
			// Only series-days with entries to reconcile are kept: a listing
			// is not a write round, and must not grow the planner.
			if _, err := s.load(ctx, missing, true); err != nil {
				if ctx.Err() != nil {
					// The reader gave up (read.timeout, or gone): its
					// series-days settle on a later listing or write.
					s.logger.Warn("settle for a listing stopped: its reader gave up", "err", err)
				} else {
					s.logger.Error("load partition catalogue", "err", err)
				}
				if done != nil {
					done <- err
				}
				return
			}
		}
		entries = s.planner.SettleSeries(sds)
	} else {
		entries = s.planner.Settle(all)
	}
	if len(entries) == 0 {
		if done != nil {
			done <- nil
		}
		return
	}
	s.m.entries.WithLabelValues("settled").Add(float64(len(entries)))
	bt := &batch{}
	s.submit(bt, entries, nil)
	if done != nil {
		go func() {
			<-bt.done
			done <- bt.err
		}()
	}
}

// takeFailed has the planner write again the entries of failed batches,
// and tells it which entries' commits finished.
func (s *Sink) takeFailed() {
	s.mu.Lock()
	if len(s.failed) == 0 && len(s.landed) == 0 {
		s.mu.Unlock()
		return
	}
	parts := make([]*buckets.Partition, 0, len(s.failed))
	for pt := range s.failed {
		parts = append(parts, pt)
	}
	clear(s.failed)
	landed := s.landed
	s.landed = nil
	s.mu.Unlock()
	s.planner.Unsave(parts)
	s.planner.Landed(landed)
}

// plan places the rows of a group of requests and submits one batch.
func (s *Sink) plan(group []*pending) {
	ctx := context.Background()
	s.takeFailed()
	series, err := s.resolve(ctx, group)
	if err != nil {
		s.logger.Error("load partition catalogue", "err", err)
		for _, p := range group {
			s.finish(p, fmt.Errorf("load partition catalogue: %w", err))
		}
		return
	}
	dups, err := s.auditDuplicates(ctx, group)
	if err != nil {
		for _, p := range group {
			s.finish(p, err)
		}
		return
	}
	bt := &batch{}
	// Rows are placed request by request (a request whose rows cannot all
	// be placed fails alone), then copied into their partitions' writes,
	// each sized to fit in one allocation.
	n := 0
	for _, p := range group {
		n += len(p.req.Readings) + len(p.req.Audit)
	}
	all := make([]placed, 0, n)
	var ids []store.AuditID
	var dupOf []*batch
	for gi, p := range group {
		from := len(all)
		ids = ids[:0]
		dupOf = dupOf[:0]
		hs := series[gi]
		var err error
		for i := range p.req.Readings {
			r := &p.req.Readings[i]
			var size int64
			for _, m := range r.Metrics {
				size += model.ReadingRow{TS: r.TS, Metric: m.Name, Str: m.Str, HasSeq: r.HasSeq}.Size()
			}
			var pt *buckets.Partition
			if pt, err = s.planner.Place(hs[i], r.TS, int64(len(r.Metrics)), size); err != nil {
				break
			}
			all = append(all, placed{pt: pt, req: p.req, idx: int32(i), rows: int32(len(r.Metrics))})
		}
		for i := range p.req.Audit {
			if err != nil {
				break
			}
			e := &p.req.Audit[i]
			id := store.AuditID{Tenant: p.req.Tenant, Day: model.DayOf(e.TS), EventID: e.EventID}
			if d, dup := dups[id]; dup {
				if d.ev != nil && !canon.Equal(d.ev, e) {
					s.m.auditConflicts.Inc()
					err = &ConflictError{EventID: e.EventID, Stream: e.Stream}
					break
				}
				s.m.auditDuplicates.Inc()
				if d.bt != nil {
					dupOf = append(dupOf, d.bt)
				}
				continue
			}
			var pt *buckets.Partition
			if pt, err = s.planner.Place(hs[len(p.req.Readings)+i], e.TS, 1, e.Size()); err != nil {
				break
			}
			// A later copy in this group is a duplicate, stored by this batch.
			// Only marked once placed: a copy that failed to place is not stored.
			dups[id] = dup{ev: e}
			all = append(all, placed{pt: pt, req: p.req, idx: int32(i), rows: 1, audit: true})
			ids = append(ids, id)
		}
		if err != nil {
			// Counts of the rows already placed stay in the planner: they
			// overstate partition sizes, which keeps the bound safe.
			for _, id := range ids {
				delete(dups, id)
			}
			all = all[:from]
			var conflict *ConflictError
			if !errors.As(err, &conflict) {
				err = fmt.Errorf("place rows: %w", err)
			}
			s.finish(p, err)
			continue
		}
		for _, dl := range p.req.DeadLetters {
			dl.Tenant = p.req.Tenant
			bt.b.DeadLetters = append(bt.b.DeadLetters, dl)
		}
		bt.ids = append(bt.ids, ids...)
		for _, id := range ids {
			bt.events = append(bt.events, dups[id].ev)
		}
		if len(dupOf) > 0 {
			p.dupOf = append([]*batch(nil), dupOf...)
		}
		bt.waiters = append(bt.waiters, p)
	}
	parts := s.writes(bt, all)
	entries := s.planner.TakeEntries(nil)
	s.m.entries.WithLabelValues("placed").Add(float64(len(entries)))
	for _, e := range entries {
		s.noteSplit(e.Info.Key)
	}
	s.observe(bt, entries)
	if len(bt.waiters) == 0 && len(entries) == 0 {
		return
	}
	s.submit(bt, entries, parts)
}

// placed is one placed reading (its rows) or audit event of a request.
type placed struct {
	pt    *buckets.Partition
	req   *Request
	idx   int32 // in req.Readings or req.Audit
	rows  int32
	audit bool
}

// writes fills bt's partition writes with the rows of all, grouped by
// partition in order of first appearance, and returns each partition's
// index in bt.b.Partitions. Every partition's rows are counted first, so
// that all readings of the batch share one allocation.
func (s *Sink) writes(bt *batch, all []placed) map[*buckets.Partition]int {
	parts := make(map[*buckets.Partition]int, min(len(all), 1024))
	at := make([]int32, len(all)) // partition index of each placed row
	var order []*buckets.Partition
	var counts []int32
	var readings, events int
	for i := range all {
		pl := &all[i]
		j, ok := parts[pl.pt]
		if !ok {
			j = len(order)
			parts[pl.pt] = j
			order = append(order, pl.pt)
			counts = append(counts, 0)
		}
		at[i] = int32(j)
		counts[j] += pl.rows
		if pl.audit {
			events++
		} else {
			readings += int(pl.rows)
		}
	}
	bt.b.Partitions = make([]store.PartitionWrite, len(order))
	for j, pt := range order {
		bt.b.Partitions[j].Key = pt.Key()
	}
	rows := make([]model.ReadingRow, readings)
	evs := make([]model.AuditEvent, events)
	for j := range bt.b.Partitions {
		pw := &bt.b.Partitions[j]
		n := int(counts[j])
		if pw.Key.Kind == model.KindAudit {
			pw.Events, evs = evs[:0:n], evs[n:]
		} else {
			pw.Readings, rows = rows[:0:n], rows[n:]
		}
	}
	for i := range all {
		pl := &all[i]
		pw := &bt.b.Partitions[at[i]]
		if pl.audit {
			pw.Events = append(pw.Events, pl.req.Audit[pl.idx])
		} else {
			pw.Readings = model.AppendReadingRows(pw.Readings, pl.req.Readings[pl.idx])
		}
	}
	return parts
}

// submit registers a planned batch and hands it to a committer. written
// holds the partitions it writes rows to: those whose entry it does not
// carry rely on an entry in an earlier batch, still in flight (it then
// depends on that batch) or lost with a failed one (it then carries the
// entry again).
func (s *Sink) submit(bt *batch, entries []buckets.Entry, written map[*buckets.Partition]int) {
	carry := func(es []buckets.Entry) {
		for _, e := range es {
			bt.b.Catalogue = append(bt.b.Catalogue, e.Info)
			bt.entries = append(bt.entries, e.Part)
			if e.Mark {
				bt.b.Ahead = append(bt.b.Ahead, e.Info.Key)
			}
		}
	}
	carry(entries)
	s.mu.Lock()
	// Nothing to rely on when no entry is in flight and none was lost.
	if len(s.catalogue) > 0 || len(s.failed) > 0 {
		carried := make(map[*buckets.Partition]struct{}, len(entries))
		for _, e := range entries {
			carried[e.Part] = struct{}{}
		}
		var lost []*buckets.Partition
		for pt := range written {
			if _, ok := carried[pt]; ok {
				continue
			}
			if prev, ok := s.catalogue[pt]; ok {
				if !slices.Contains(bt.deps, prev) {
					bt.deps = append(bt.deps, prev)
				}
			} else if _, ok := s.failed[pt]; ok {
				lost = append(lost, pt)
				delete(s.failed, pt) // written again here, not by the next round too
			}
		}
		carry(s.planner.Resave(lost))
	}
	bt.done = make(chan struct{})
	bt.days = make(map[model.SeriesDay]struct{})
	for _, pi := range bt.b.Catalogue {
		bt.days[pi.Key.SeriesDay()] = struct{}{}
	}
	if s.versions != nil {
		bt.b.Version = s.versions.Version()
	}
	for i, id := range bt.ids {
		s.inflight[id] = dup{bt: bt, ev: bt.events[i]}
	}
	for _, pt := range bt.entries {
		if prev, ok := s.catalogue[pt]; ok && s.versions == nil && !slices.Contains(bt.after, prev) {
			bt.after = append(bt.after, prev)
		}
		s.catalogue[pt] = bt
	}
	s.flight[bt] = struct{}{}
	s.mu.Unlock()
	s.commits <- bt
}

// resolve returns the planner state of every series-day the group writes
// (per request: its readings', then its audit events'), loading the
// catalogue of those the planner does not hold, after the commits in flight
// that carry an entry of one of them finished.
func (s *Sink) resolve(ctx context.Context, group []*pending) ([][]*buckets.Series, error) {
	out := make([][]*buckets.Series, len(group))
	var missing []model.SeriesDay
	var slots map[model.SeriesDay][]**buckets.Series
	need := func(sd model.SeriesDay, slot **buckets.Series) {
		if *slot = s.planner.Lookup(sd); *slot != nil {
			return
		}
		if slots == nil {
			slots = make(map[model.SeriesDay][]**buckets.Series)
		}
		if _, ok := slots[sd]; !ok {
			missing = append(missing, sd)
		}
		slots[sd] = append(slots[sd], slot)
	}
	for gi, p := range group {
		hs := make([]*buckets.Series, len(p.req.Readings)+len(p.req.Audit))
		for i := range p.req.Readings {
			r := &p.req.Readings[i]
			day := model.DayOf(r.TS)
			// A device's readings mostly come together (an MQTT message).
			if prev := i - 1; prev >= 0 && hs[prev] != nil && r.DeviceID == p.req.Readings[prev].DeviceID && day == model.DayOf(p.req.Readings[prev].TS) {
				hs[i] = hs[prev]
				continue
			}
			need(model.SeriesDay{Kind: model.KindReadings, Tenant: p.req.Tenant, Series: r.DeviceID, Day: day}, &hs[i])
		}
		for i := range p.req.Audit {
			e := &p.req.Audit[i]
			need(model.SeriesDay{Kind: model.KindAudit, Tenant: p.req.Tenant, Series: e.Stream, Day: model.DayOf(e.TS)}, &hs[len(p.req.Readings)+i])
		}
		out[gi] = hs
	}
	if len(missing) == 0 {
		return out, nil
	}
	hs, err := s.load(ctx, missing, false)
	if err != nil {
		return nil, err
	}
	for i, sd := range missing {
		for _, slot := range slots[sd] {
			*slot = hs[i]
		}
	}
	return out, nil
}

// load reads the catalogues of series-days the planner does not hold, once
// the commits in flight that carry an entry of one of them finished,
// installs them in the planner and reconciles the entries an earlier run
// left ahead. It returns their states, in the order of missing. With
// onlyAhead, a series-day without an entry to reconcile is not installed
// (its state is nil).
func (s *Sink) load(ctx context.Context, missing []model.SeriesDay, onlyAhead bool) ([]*buckets.Series, error) {
	want := make(map[model.SeriesDay]struct{}, len(missing))
	for _, sd := range missing {
		want[sd] = struct{}{}
	}
	// A series-day the planner dropped may still have entries in flight.
	var wait []*batch
	s.mu.Lock()
	for bt := range s.flight {
		for sd := range bt.days {
			if _, ok := want[sd]; ok {
				wait = append(wait, bt)
				break
			}
		}
	}
	s.mu.Unlock()
	for _, bt := range wait {
		select {
		case <-bt.done:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	loaded, err := s.catalogues(ctx, missing)
	if err != nil {
		return nil, err
	}
	hs := make([]*buckets.Series, len(missing))
	for i, sd := range missing {
		if onlyAhead && !slices.ContainsFunc(loaded[i], func(pi model.PartitionInfo) bool {
			return pi.Ahead && s.planner.Reconciles(pi.Key.Sub)
		}) {
			loaded[i] = nil
			continue
		}
		for _, pi := range loaded[i] {
			s.noteSplit(pi.Key)
			if pi.Rows > s.bcfg.MaxRows || pi.Bytes > s.bcfg.MaxBytes {
				s.m.overBound.Inc()
				s.logger.Warn("catalogue entry past the partition bound",
					"partition", pi.Key.String(), "rows", pi.Rows, "bytes", pi.Bytes,
					"max_rows", s.bcfg.MaxRows, "max_bytes", s.bcfg.MaxBytes)
			}
		}
		hs[i] = s.planner.Load(sd, loaded[i])
	}
	s.m.seriesDays.Set(float64(s.planner.Len()))
	if err := s.reconcile(ctx, hs, loaded); err != nil {
		for i, sd := range missing {
			if hs[i] != nil {
				s.planner.Unload(sd) // loaded again, and reconciled, next time
			}
		}
		return nil, err
	}
	return hs, nil
}

// splitWarnAt is the split sequence number at which a series-day is logged
// as near its limit (the alert SluiceSeriesDayNearSplitLimit fires past
// it).
const splitWarnAt = buckets.MaxSplits * 8 / 10

// noteSplit updates sluice_buckets_split_partitions_max with a partition
// this gateway placed rows in or loaded. The gauge is the largest split
// sequence number of this writer over the two newest UTC days seen (older
// days fall out as new ones arrive; a day is kept beside the newest so that
// a device running ahead of the clock does not hide today). Only the
// flusher calls it.
func (s *Sink) noteSplit(k model.PartitionKey) {
	newest := k.Day
	for d := range s.splits {
		newest = max(newest, d)
	}
	if k.Day < newest-1 {
		return
	}
	n := 0
	if w, seq, ok := buckets.SplitSeq(k.Sub); ok && int(w) == s.bcfg.Writer {
		n = seq
		if n == splitWarnAt {
			s.logger.Warn("series-day near its split partition limit: its rows will be refused past the limit",
				"partition", k.String(), "splits", n, "limit", buckets.MaxSplits)
		}
	}
	if s.splits == nil {
		s.splits = make(map[model.Day]int, 3)
	}
	s.splits[k.Day] = max(s.splits[k.Day], n)
	top := 0
	for d, v := range s.splits {
		if d < newest-1 {
			delete(s.splits, d)
			continue
		}
		top = max(top, v)
	}
	s.m.splitsMax.Set(float64(top))
}

// catalogues reads the catalogues of sds, in one call when the store is a
// CatalogueLoader, else one call per series-day, catalogueLoads at a time.
func (s *Sink) catalogues(ctx context.Context, sds []model.SeriesDay) ([][]model.PartitionInfo, error) {
	if l, ok := s.st.(CatalogueLoader); ok {
		out, err := l.Catalogues(ctx, sds)
		if err == nil && len(out) != len(sds) {
			err = fmt.Errorf("store returned %d catalogues for %d series-days", len(out), len(sds))
		}
		return out, err
	}
	out := make([][]model.PartitionInfo, len(sds))
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(catalogueLoads)
	for i, sd := range sds {
		g.Go(func() error {
			parts, err := s.st.Catalogue(gctx, sd)
			out[i] = parts
			return err
		})
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	return out, nil
}

// dup is an audit event id already stored (bt nil) or in a batch being
// committed (bt), with its event when known (for the conflict check).
type dup struct {
	bt *batch
	ev *model.AuditEvent
}

// auditDuplicates returns the audit ids of the group that are already
// stored or in a batch being committed.
func (s *Sink) auditDuplicates(ctx context.Context, group []*pending) (map[store.AuditID]dup, error) {
	dups := make(map[store.AuditID]dup)
	var ids []store.AuditID
	var evs []*model.AuditEvent
	s.mu.Lock()
	for _, p := range group {
		for i := range p.req.Audit {
			e := &p.req.Audit[i]
			id := store.AuditID{Tenant: p.req.Tenant, Day: model.DayOf(e.TS), EventID: e.EventID}
			if d, ok := s.inflight[id]; ok {
				dups[id] = d
				continue
			}
			ids = append(ids, id)
			evs = append(evs, e)
		}
	}
	s.mu.Unlock()
	if len(ids) == 0 {
		return dups, nil
	}
	seen, err := s.st.AuditSeen(ctx, ids)
	if err != nil {
		return nil, fmt.Errorf("check audit event ids: %w", err)
	}
	var stored []store.AuditID
	var like []*model.AuditEvent
	for i, ok := range seen {
		if ok {
			dups[ids[i]] = dup{}
			stored = append(stored, ids[i])
			like = append(like, evs[i])
		}
	}
	if s.lookup != nil && len(stored) > 0 {
		found, err := s.lookup.AuditEvents(ctx, stored, like)
		if err != nil {
			return nil, fmt.Errorf("read stored audit events: %w", err)
		}
		for i, ev := range found {
			if ev == nil {
				ev = &model.AuditEvent{EventID: stored[i].EventID} // elsewhere: another payload
			}
			dups[stored[i]] = dup{ev: ev}
		}
	}
	return dups, nil
}

func (s *Sink) committer() {
	for bt := range s.commits {
		// An earlier batch in flight carries an older copy of one of this
		// batch's catalogue entries: let it land first. It is already with a
		// committer (the hand-off is unbuffered), so this never deadlocks.
		for _, prev := range bt.after {
			<-prev.done
		}
		// Rows that rely on another batch's catalogue entry are committed only
		// once that entry is stored: else a crash between the two would leave
		// rows that no entry covers (and a partition past its bound once its
		// series-day is reloaded).
		err := depsResult(bt)
		rows := bt.b.Rows()
		hooked := false
		if err == nil && s.hook != nil {
			if err = s.hook.BeforeCommit(&bt.b); err != nil {
				s.m.commitErrors.Inc()
				s.logger.Error("mark batch for the rollups; not committed", "rows", rows, "requests", len(bt.waiters), "err", err)
				err = fmt.Errorf("mark for rollups: %w", err)
			} else {
				hooked = true
			}
		}
		if err == nil {
			start := time.Now()
			if err = s.st.Commit(context.Background(), &bt.b); err != nil {
				s.m.commitErrors.Inc()
				s.logger.Error("commit batch", "rows", rows, "requests", len(bt.waiters), "err", err)
				err = fmt.Errorf("commit: %w", err)
			}
			s.m.commitSeconds.Observe(time.Since(start).Seconds())
			s.m.batchRows.Observe(float64(rows))
		}
		if err == nil {
			s.m.commits.Inc()
			var readings, events int
			for _, pw := range bt.b.Partitions {
				readings += len(pw.Readings)
				events += len(pw.Events)
			}
			if readings > 0 {
				s.m.rows.WithLabelValues(model.KindReadings.String()).Add(float64(readings))
			}
			if events > 0 {
				s.m.rows.WithLabelValues(model.KindAudit.String()).Add(float64(events))
			}
		}
		s.mu.Lock()
		for _, id := range bt.ids {
			if s.inflight[id].bt == bt {
				delete(s.inflight, id)
			}
		}
		for _, pt := range bt.entries {
			if s.catalogue[pt] == bt {
				delete(s.catalogue, pt)
			}
			if err != nil {
				s.failed[pt] = struct{}{}
			}
		}
		s.landed = append(s.landed, bt.entries...)
		delete(s.flight, bt)
		s.mu.Unlock()
		bt.err = err
		close(bt.done)
		for _, p := range bt.waiters {
			s.finish(p, dupResult(p, err))
		}
		if hooked {
			s.hook.AfterCommit(&bt.b, err)
		}
	}
}

// depsResult waits for the batches that carry catalogue entries this one
// relies on, and fails if one of them failed: its rows would then be
// stored where no reader finds them. Those batches are earlier ones,
// already with a committer, so waiting never deadlocks.
func depsResult(bt *batch) error {
	for _, d := range bt.deps {
		<-d.done
		if d.err != nil {
			return fmt.Errorf("catalogue entry in a concurrent commit not stored: %w", d.err)
		}
	}
	return nil
}

// dupResult is the answer to a request of a batch that committed with err:
// if err is nil, the request still fails when a batch holding an audit event
// it skipped as a duplicate failed, since that event is then not stored.
func dupResult(p *pending, err error) error {
	if err != nil {
		return err
	}
	for _, d := range p.dupOf {
		<-d.done
		if d.err != nil {
			return fmt.Errorf("audit event with the same event_id in a concurrent request not stored: %w", d.err)
		}
	}
	return nil
}

func (s *Sink) finish(p *pending, err error) {
	s.m.queued.Sub(float64(p.rows))
	s.budget.Release(p.weight)
	p.done <- err
}

// Reconciles reports whether this gateway settles a stored entry of
// sub-bucket sub that is marked Ahead (see buckets.Planner.Reconciles):
// the entries of other gateways' writer slots are theirs to settle. Safe
// for concurrent use.
func (s *Sink) Reconciles(sub uint32) bool {
	return s.planner.Reconciles(sub)
}
