// Package quota keeps one tenant from crowding out the others: per-tenant
// token buckets for rows and bytes per second, each with a burst, and a
// bound on a tenant's HTTP ingest requests in progress.
//
// HTTP requests over a quota are refused at once with an *ExceededError
// (429 with Retry-After: the time until the bucket holds enough):
// Middleware checks the concurrency bound and the body's Content-Length
// before the body is read; Writer charges the rows (and the bytes of a body
// sent without a Content-Length) after decoding, before the rows are
// written, giving back at once the pipeline room reserved for them while
// they were decoded. MQTT messages are never refused: Wait holds them
// until the tenant's buckets allow them.
//
// # Memory
//
// A tenant with no quota (the default) has no state at all. The others
// have a few hundred bytes each, created on first use. Tenants come from
// the configured tokens (HTTP) and from MQTT topics, whose tenant may be
// any valid name when mqtt.tenants is empty; so at most MaxTenants states
// are kept: when the table is full, states that are idle and whose buckets
// are full again (indistinguishable from new ones) are dropped, and if none
// is, further tenants share one overflow state with the default quotas.
package quota

import (
	"context"
	"fmt"
	"math"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/time/rate"
)

// MaxTenants bounds the tenants whose quota state is kept at once.
const MaxTenants = 10_000

// The quotas, as named in configuration, error messages and metrics.
const (
	QuotaRows       = "rows_per_second"
	QuotaBytes      = "bytes_per_second"
	QuotaConcurrent = "max_concurrent_requests"
)

// ExceededError says a tenant is over one of its quotas: nothing of the
// request was taken. RetryAfter is when the bucket will hold enough (for
// the concurrency bound, a second).
type ExceededError struct {
	Tenant     string
	Quota      string // QuotaRows, QuotaBytes or QuotaConcurrent
	Limit      int64
	Burst      int64 // for the rates
	Need       int64 // rows or bytes this request needs
	RetryAfter time.Duration
}

func (e *ExceededError) Error() string {
	if e.Quota == QuotaConcurrent {
		return fmt.Sprintf("tenant %s over its %s quota of %d", e.Tenant, e.Quota, e.Limit)
	}
	return fmt.Sprintf("tenant %s over its %s quota of %d (burst %d; this request needs %d)", e.Tenant, e.Quota, e.Limit, e.Burst, e.Need)
}

// Quotas holds every tenant's quota state. It is safe for concurrent use.
type Quotas struct {
	cfg       Config
	overrides map[string]Limits // immutable after New
	named     map[string]bool   // tenants with their own metric label
	now       func() time.Time
	sleep     func(ctx context.Context, d time.Duration) error
	m         *metrics
	max       int

	mu        sync.Mutex
	tenants   map[string]*state
	unnamed   int // states in tenants of tenants not in named
	overflow  *state
	lastSweep time.Time
}

// state is one tenant's buckets and requests in progress.
type state struct {
	label  string
	lim    Limits
	rows   *rate.Limiter // nil: unlimited
	bytes  *rate.Limiter // nil: unlimited
	active int64         // guarded by Quotas.mu
}

// New returns the quotas of cfg, which must be valid. named are the tenants
// the configuration knows (tokens, MQTT tenants): they, and the tenants of
// cfg.Tenants, are labelled by name in metrics; any other tenant as
// "(other)", so the label's values are bounded by the configuration. now is
// the clock of the buckets; reg may be nil.
func New(cfg Config, named []string, now func() time.Time, reg prometheus.Registerer) *Quotas {
	q := &Quotas{
		cfg: cfg, overrides: make(map[string]Limits, len(cfg.Tenants)), named: make(map[string]bool),
		now: now, sleep: sleep, m: newMetrics(reg), max: MaxTenants, tenants: make(map[string]*state),
	}
	for _, o := range cfg.Tenants {
		q.overrides[o.Tenant] = o.apply(cfg.Default)
		q.named[o.Tenant] = true
	}
	for _, t := range named {
		q.named[t] = true
	}
	return q
}

// For returns the quotas of tenant.
func (q *Quotas) For(tenant string) Limits {
	if l, ok := q.overrides[tenant]; ok {
		return l
	}
	return q.cfg.Default
}

func (q *Quotas) label(tenant string) string {
	if q.named[tenant] {
		return tenant
	}
	return "(other)"
}

// state returns tenant's state, or nil if it has no quota. Call with q.mu
// held.
func (q *Quotas) stateLocked(tenant string) *state {
	if s, ok := q.tenants[tenant]; ok {
		return s
	}
	lim := q.For(tenant)
	if lim.Unlimited() {
		return nil
	}
	named := q.named[tenant]
	if !named && q.unnamed >= q.max {
		now := q.now()
		if now.Sub(q.lastSweep) >= time.Second || now.Before(q.lastSweep) {
			q.lastSweep = now
			q.sweepLocked(now)
		}
		if q.unnamed >= q.max {
			// Only tenants outside the configuration get here, and they
			// have the default quotas: share them.
			if q.overflow == nil {
				q.overflow = newState("(other)", lim)
			}
			return q.overflow
		}
	}
	s := newState(q.label(tenant), lim)
	q.tenants[tenant] = s
	if !named {
		q.unnamed++
	}
	return s
}

// sweepLocked drops the states of tenants outside the configuration that
// are as good as new: no request in progress and full buckets.
func (q *Quotas) sweepLocked(now time.Time) {
	for name, s := range q.tenants {
		if !q.named[name] && s.active == 0 && full(s.rows, now) && full(s.bytes, now) {
			delete(q.tenants, name)
			q.unnamed--
		}
	}
}

func full(l *rate.Limiter, now time.Time) bool {
	return l == nil || l.TokensAt(now) >= float64(l.Burst())
}

// newState returns a state with full buckets.
func newState(label string, lim Limits) *state {
	s := &state{label: label, lim: lim}
	if lim.RowsPerSecond > 0 {
		s.rows = rate.NewLimiter(rate.Limit(lim.RowsPerSecond), int(lim.rowBurst()))
	}
	if lim.BytesPerSecond > 0 {
		s.bytes = rate.NewLimiter(rate.Limit(lim.BytesPerSecond), int(lim.byteBurst()))
	}
	return s
}

func (q *Quotas) get(tenant string) *state {
	if q.For(tenant).Unlimited() {
		return nil // no state, no lock: the default costs nothing
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.stateLocked(tenant)
}

// Enter counts an HTTP request of tenant in progress until release is
// called, or refuses it when the tenant has MaxConcurrentRequests in
// progress already.
func (q *Quotas) Enter(tenant string) (release func(), err error) {
	if q.For(tenant).MaxConcurrentRequests == 0 {
		return func() {}, nil
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	s := q.stateLocked(tenant)
	if s.active >= s.lim.MaxConcurrentRequests {
		q.m.refused.WithLabelValues(s.label, QuotaConcurrent).Inc()
		return nil, &ExceededError{Tenant: tenant, Quota: QuotaConcurrent, Limit: s.lim.MaxConcurrentRequests, RetryAfter: time.Second}
	}
	s.active++
	var once sync.Once
	return func() {
		once.Do(func() {
			q.mu.Lock()
			s.active--
			q.mu.Unlock()
		})
	}, nil
}

// TakeRows takes n rows from tenant's row bucket, or refuses them, taking
// nothing, when it does not hold enough.
func (q *Quotas) TakeRows(tenant string, n int64) error {
	s := q.get(tenant)
	if s == nil || s.rows == nil {
		return nil
	}
	return q.take(tenant, s, s.rows, QuotaRows, s.lim.RowsPerSecond, n)
}

// TakeBytes takes n bytes from tenant's byte bucket, or refuses them,
// taking nothing, when it does not hold enough.
func (q *Quotas) TakeBytes(tenant string, n int64) error {
	s := q.get(tenant)
	if s == nil || s.bytes == nil {
		return nil
	}
	return q.take(tenant, s, s.bytes, QuotaBytes, s.lim.BytesPerSecond, n)
}

func (q *Quotas) take(tenant string, s *state, l *rate.Limiter, quota string, perSecond, n int64) error {
	if n <= 0 {
		return nil
	}
	burst := int64(l.Burst())
	// Validation keeps a request within the burst; one that is not needs a
	// full bucket, and takes it.
	need := min(n, burst)
	now := q.now()
	if l.AllowN(now, int(need)) {
		return nil
	}
	// The bucket counts in floating point: to the microsecond.
	missing := float64(need) - l.TokensAt(now)
	wait := time.Duration(math.Round(missing/float64(perSecond)*1e6)) * time.Microsecond
	q.m.refused.WithLabelValues(s.label, quota).Inc()
	return &ExceededError{Tenant: tenant, Quota: quota, Limit: perSecond, Burst: burst, Need: n, RetryAfter: max(wait, 0)}
}

// Wait blocks until tenant's buckets hold rows rows and bytes bytes and
// takes them, or until ctx ends (then it returns ctx's error, and what it
// had reserved is given back as far as the buckets allow). A need larger
// than a burst is taken a burst at a time.
func (q *Quotas) Wait(ctx context.Context, tenant string, rows, bytes int64) error {
	s := q.get(tenant)
	if s == nil {
		return nil
	}
	if err := q.wait(ctx, tenant, s, s.rows, QuotaRows, rows); err != nil {
		return err
	}
	return q.wait(ctx, tenant, s, s.bytes, QuotaBytes, bytes)
}

func (q *Quotas) wait(ctx context.Context, tenant string, s *state, l *rate.Limiter, quota string, n int64) error {
	if l == nil {
		return nil
	}
	burst := int64(l.Burst())
	waited := false
	for n > 0 {
		chunk := min(n, burst)
		now := q.now()
		r := l.ReserveN(now, int(chunk)) // always OK: chunk <= burst
		if d := r.DelayFrom(now); d > 0 {
			if !waited {
				waited = true
				q.m.waits.WithLabelValues(s.label, quota).Inc()
			}
			err := q.sleep(ctx, d)
			if err != nil {
				// Given back in full only if nothing was reserved after it.
				r.CancelAt(q.now())
				d = max(0, min(d, q.now().Sub(now)))
			}
			q.m.waitSeconds.WithLabelValues(s.label).Add(d.Seconds())
			if err != nil {
				return fmt.Errorf("wait for tenant %s's %s quota: %w", tenant, quota, err)
			}
		}
		n -= chunk
	}
	return nil
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
