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
//     waiting, then, while a commit is in flight and requests arrive fast,
//     up to Config.CommitDelay for more (group commit, see groupCommit),
//     then up to Config.Linger more, and plans them. It
//     alone touches the planner, so bucketing decisions are serial. The
//     catalogue it loads for a series-day the planner does not hold is never
//     older than the planner's own writes: the planner forgets a series-day
//     only once every entry it handed out for it landed, so no commit in
//     flight carries one (see load). It loads the catalogues a round needs in
//     parallel (at most catalogueLoads at once).
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
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sync/semaphore"

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

// CatalogueDays is implemented by a Store that tells whether a day has any
// catalogue entry. With it, a planner that is the store's one writer knows
// that the series-days of a day that began empty have no entry until it
// writes one (buckets.Planner.SetDay), and reads no catalogue for their
// first write.
type CatalogueDays interface {
	CatalogueEmpty(ctx context.Context, d model.Day) (bool, error)
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
	// CommitDelay is how long the flusher waits for more requests before
	// it plans a batch of fewer than BatchRows rows, when at the rate
	// requests arrived over about the last 50 ms at least CommitSiblings
	// more are expected within it (see groupCommit): one commit of many
	// requests costs less than many of few. A lone client never waits.
	CommitDelay    time.Duration `mapstructure:"commit_delay"`
	CommitSiblings int           `mapstructure:"commit_siblings"`
	// HotPartitions bounds the partitions whose write rate is tracked
	// (see Hottest).
	HotPartitions int `mapstructure:"hot_partitions"`
}

// DefaultConfig returns the production defaults.
func DefaultConfig() Config {
	return Config{BatchRows: 4_000, Linger: 0, QueueRows: 1_000_000, AdmissionTimeout: time.Second, Commits: 4,
		CommitDelay: time.Millisecond, CommitSiblings: 16, HotPartitions: 1000}
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
	if c.CommitDelay < 0 || c.CommitDelay > time.Second {
		errs = append(errs, fmt.Errorf("sink.commit_delay: must be between 0s and 1s, got %s", c.CommitDelay))
	}
	if c.CommitSiblings < 1 {
		errs = append(errs, fmt.Errorf("sink.commit_siblings: must be at least 1, got %d", c.CommitSiblings))
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
	done chan struct{} // closed once committed or failed; err is then set
	err  error
	// claims says the batch claimed new minutes (WithNewMinutes).
	claims bool
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
	group  groupCommit // the flusher's
	sat    saturation  // since when admission has been refusing (readiness)

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
	// limit (see noteSplit).
	splits splitDays
	// What the flusher reuses from round to round (plan): a round's
	// partitions and the index of each placed row's, and its entries.
	partIdx map[*buckets.Partition]int
	rowPart []int32
	entries []buckets.Entry
	// What resolve reuses.
	resolving resolving

	// WithNewMinutes (flusher goroutine): the batches that claimed new
	// minutes and may be in flight, in the order they were planned.
	newMinutes bool
	claimers   []claimer

	// checkInFlight: see WithInFlightCheck.
	checkInFlight bool
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
// nothing is written). AfterCommit runs once the commit returned and before
// the batch's requests are answered and the batches that wait for it go on
// (WithNewMinutes), with the commit's result, for every batch that
// BeforeCommit accepted: it must not block. BeforeCommit may
// set the batch's Also, if the sink's store honours it (store.Batch);
// neither may otherwise modify the batch. AfterCommit may keep it, the
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
// idle partitions exact again (see buckets.Planner.SettleIdle): a partition
// is settled after settleIdleTicks intervals without a new row (10 to 10.5
// minutes).
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
		group:       groupCommit{delay: cfg.CommitDelay, siblings: cfg.CommitSiblings},
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

// Reconciles reports whether this gateway settles a stored entry of
// sub-bucket sub that is marked Ahead (see buckets.Planner.Reconciles):
// the entries of other gateways' writer slots are theirs to settle. Safe
// for concurrent use.
func (s *Sink) Reconciles(sub uint32) bool {
	return s.planner.Reconciles(sub)
}
