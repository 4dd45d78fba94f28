// Package cqlstore is the Cassandra / ScyllaDB storage backend, through the
// gocql driver. It holds the same tables as the embedded store (readings,
// audit events, the partition catalogue, audit ids, dead letters), with the
// same partition keys, so that the sink, the reader and the conformance
// suite run on it unchanged. The schema is schema.cql beside this file.
//
// # How Commit writes
//
// A commit is not atomic in Cassandra: it is a set of idempotent upserts,
// and Commit returns nil only after every one of them succeeded at the
// configured write consistency. It runs three phases, each phase's
// requests in parallel under the store-wide bound
// Config.MaxConcurrentRequests:
//
//  1. the catalogue entries of the batch (and, the first time, the
//     tenant-day index). The catalogue therefore always covers every
//     partition that may hold rows, and its counts are upper bounds: what
//     the bucket planner needs to keep partitions under their bound after a
//     restart, and what retention needs to find every partition.
//  2. the rows: each partition's rows as UNLOGGED batches of at most
//     Config.BatchRows rows of that one partition (never a multi-partition
//     batch), and dead letters likewise per partition.
//  3. the audit id index, only after the events themselves are stored, so a
//     retry of an event whose write failed is never taken for a duplicate.
//
// If a phase fails, Commit returns the error and the caller's request fails;
// rows that did reach Cassandra are invisible to nobody but harmless: a
// retry writes the same keys again, and readers drop equal keys.
//
// # Catalogue rows have one writer each
//
// Sub-bucket ids carry the slot of the gateway that opened them (see
// internal/buckets), so each catalogue row is written by one gateway only.
// Its write timestamp is derived from the entry itself and grows with its
// row count, so when two commits of the same gateway update one entry
// concurrently, the newer state wins whatever order the writes land in.
package cqlstore

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"sync"
	"time"

	gocql "github.com/apache/cassandra-gocql-driver/v2"
	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sync/errgroup"

	"github.com/sluicehq/sluice/internal/model"
	"github.com/sluicehq/sluice/internal/store"
)

// Fixed fan-outs of the hashed tables. They are part of the partition keys:
// changing them orphans existing rows.
const (
	catalogueShards = 64
	auditIDBuckets  = 64
	inListMax       = 100 // ids per IN (...) lookup
)

// Store is an open Cassandra store. Its methods are safe for concurrent use.
type Store struct {
	cfg     Config
	sess    *gocql.Session
	logger  *slog.Logger
	writeCL gocql.Consistency
	readCL  gocql.Consistency
	sem     chan struct{} // one token per request in flight
	m       *metrics

	mu    sync.Mutex
	known map[tenantDay]struct{} // tenant_days rows this process has written
}

type tenantDay struct {
	day    model.Day
	kind   string
	tenant string
}

const maxKnown = 100_000

// Open connects to the cluster and uses the keyspace, which must exist (see
// Migrate). It retries while the cluster is unreachable, until ctx ends.
func Open(ctx context.Context, cfg Config, logger *slog.Logger, reg prometheus.Registerer) (*Store, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	sess, err := connect(ctx, cfg, cfg.Keyspace, logger)
	if err != nil {
		return nil, err
	}
	return &Store{
		cfg:     cfg,
		sess:    sess,
		logger:  logger,
		writeCL: gocql.ParseConsistency(cfg.WriteConsistency),
		readCL:  gocql.ParseConsistency(cfg.ReadConsistency),
		sem:     make(chan struct{}, cfg.MaxConcurrentRequests),
		m:       newMetrics(reg),
		known:   make(map[tenantDay]struct{}),
	}, nil
}

// connect creates a session, retrying with backoff while no node answers.
func connect(ctx context.Context, cfg Config, keyspace string, logger *slog.Logger) (*gocql.Session, error) {
	cc := cfg.cluster(keyspace)
	cc.Logger = slogAdapter{logger.With("component", "gocql")}
	wait := 500 * time.Millisecond
	for attempt := 1; ; attempt++ {
		sess, err := cc.CreateSession()
		if err == nil {
			return sess, nil
		}
		logger.Warn("connect to cassandra", "hosts", cfg.Hosts, "keyspace", keyspace, "attempt", attempt, "err", err)
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("connect to cassandra %v (store.cassandra.hosts): %w", cfg.Hosts, errors.Join(err, ctx.Err()))
		case <-time.After(wait):
		}
		wait = min(2*wait, 5*time.Second)
	}
}

// Close closes the session. Every acknowledged commit is already durable at
// the write consistency.
func (s *Store) Close() error {
	s.sess.Close()
	return nil
}

// op is one request: a statement or a single-partition batch.
type op func(ctx context.Context) error

// run executes ops in parallel, at most Config.MaxConcurrentRequests of the
// whole store at once, and returns the first error (cancelling the rest).
func (s *Store) run(ctx context.Context, name string, ops []op) error {
	if len(ops) == 0 {
		return nil
	}
	if len(ops) == 1 {
		return s.do(ctx, name, ops[0])
	}
	g, gctx := errgroup.WithContext(ctx)
	for _, o := range ops {
		select {
		case s.sem <- struct{}{}:
		case <-gctx.Done():
			err := g.Wait()
			if err == nil {
				err = gctx.Err()
			}
			return err
		}
		g.Go(func() error {
			defer func() { <-s.sem }()
			return s.observe(gctx, name, o)
		})
	}
	return g.Wait()
}

// do runs one op under the concurrency bound.
func (s *Store) do(ctx context.Context, name string, o op) error {
	select {
	case s.sem <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	}
	defer func() { <-s.sem }()
	return s.observe(ctx, name, o)
}

func (s *Store) observe(ctx context.Context, name string, o op) error {
	start := time.Now()
	err := o(ctx)
	s.m.seconds.WithLabelValues(name).Observe(time.Since(start).Seconds())
	if err != nil {
		s.m.errors.WithLabelValues(name).Inc()
	}
	return err
}

// Statements. Table names are unqualified: the session uses the keyspace.
const (
	insReading   = `INSERT INTO readings (tenant, device, day, sub, ts, metric, value, seq) VALUES (?, ?, ?, ?, ?, ?, ?, ?)`
	insAudit     = `INSERT INTO audit (tenant, stream, day, sub, ts, event_id, actor, action, resource, outcome, attributes) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`
	insAuditID   = `INSERT INTO audit_ids (tenant, day, bucket, event_id) VALUES (?, ?, ?, ?)`
	insCatalogue = `INSERT INTO catalogue (tenant, kind, day, shard, series, sub, row_count, byte_count, min_ts, max_ts, state, closed) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) USING TIMESTAMP ?`
	insDead      = `INSERT INTO dead_letters (tenant, day, hour, ts, id, source, topic, reason, error, payload, truncated) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`
	insTenantDay = `INSERT INTO tenant_days (day, kind, tenant) VALUES (?, ?, ?)`
)

// dayValue is a day as the CQL date codec takes it: milliseconds of its start.
func dayValue(d model.Day) int64 { return d.Start() }

func hash(s string, n uint32) int {
	h := fnv.New32a()
	_, _ = h.Write([]byte(s))
	return int(h.Sum32() % n)
}

func catalogueShard(series string) int { return hash(series, catalogueShards) }
func auditIDBucket(id string) int      { return hash(id, auditIDBuckets) }

// hourOf is the dead-letter partition hour (0-23) of a timestamp.
func hourOf(ts int64) int { return int((ts - model.DayOf(ts).Start()) / (3600 * 1000)) }

// catalogueVersion is the write timestamp (microseconds) of a catalogue
// entry: the end of its day, plus a counter that grows with every change a
// single writer makes to the entry (rows only grow; closing adds no rows
// and comes last). It stays far below the wall-clock time at which
// retention deletes the day, so the delete always wins.
func catalogueVersion(pi model.PartitionInfo) int64 {
	v := pi.Key.Day.End()*1000 + 2*pi.Rows
	if pi.Closed {
		v++
	}
	return v
}

// batchOp sends stmts as one UNLOGGED batch; all of them must belong to one
// partition.
func (s *Store) batchOp(entries []gocql.BatchEntry) op {
	return func(ctx context.Context) error {
		if len(entries) == 1 {
			e := entries[0]
			return s.sess.Query(e.Stmt, e.Args...).Consistency(s.writeCL).Idempotent(true).ExecContext(ctx)
		}
		b := s.sess.Batch(gocql.UnloggedBatch).Consistency(s.writeCL)
		b.Entries = entries
		return b.ExecContext(ctx)
	}
}

// partitionOps splits one partition's statements into batches of at most
// BatchRows.
func (s *Store) partitionOps(ops []op, entries []gocql.BatchEntry) []op {
	for len(entries) > 0 {
		n := min(len(entries), s.cfg.BatchRows)
		ops = append(ops, s.batchOp(entries[:n:n]))
		entries = entries[n:]
	}
	return ops
}

func entry(stmt string, args ...any) gocql.BatchEntry {
	return gocql.BatchEntry{Stmt: stmt, Args: args, Idempotent: true}
}

// blobOrUnset writes an empty value as "unset" (no cell) rather than null
// (a tombstone).
func blobOrUnset(b []byte) any {
	if len(b) == 0 {
		return gocql.UnsetValue
	}
	return b
}

// Commit writes the batch and returns nil only once every write succeeded
// at the write consistency. See the package comment for the order.
func (s *Store) Commit(ctx context.Context, b *store.Batch) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := s.run(ctx, "catalogue_write", s.catalogueOps(b)); err != nil {
		return fmt.Errorf("write catalogue of %d partitions: %w", len(b.Catalogue), err)
	}
	if err := s.run(ctx, "rows_write", s.rowOps(b)); err != nil {
		return fmt.Errorf("write %d rows in %d partitions: %w", b.Rows(), len(b.Partitions), err)
	}
	if err := s.run(ctx, "audit_ids_write", s.auditIDOps(b)); err != nil {
		return fmt.Errorf("write audit ids: %w", err)
	}
	s.remember(b)
	return nil
}

func (s *Store) catalogueOps(b *store.Batch) []op {
	type cpart struct {
		tenant, kind string
		day          model.Day
		shard        int
	}
	groups := make(map[cpart][]gocql.BatchEntry)
	var order []cpart
	for _, pi := range b.Catalogue {
		k := pi.Key
		cp := cpart{k.Tenant, k.Kind.String(), k.Day, catalogueShard(k.Series)}
		if _, ok := groups[cp]; !ok {
			order = append(order, cp)
		}
		groups[cp] = append(groups[cp], entry(insCatalogue,
			k.Tenant, cp.kind, dayValue(k.Day), cp.shard, k.Series, int32(k.Sub),
			pi.Rows, pi.Bytes, pi.MinTS, pi.MaxTS, pi.State, pi.Closed, catalogueVersion(pi)))
	}
	var ops []op
	for _, cp := range order {
		ops = s.partitionOps(ops, groups[cp])
	}
	// The tenant-day index, once per process and tenant-day.
	days := make(map[model.Day][]gocql.BatchEntry)
	seen := make(map[tenantDay]struct{})
	note := func(td tenantDay) {
		if _, ok := seen[td]; ok {
			return
		}
		seen[td] = struct{}{}
		s.mu.Lock()
		_, known := s.known[td]
		s.mu.Unlock()
		if !known {
			days[td.day] = append(days[td.day], entry(insTenantDay, dayValue(td.day), td.kind, td.tenant))
		}
	}
	for _, pi := range b.Catalogue {
		note(tenantDay{pi.Key.Day, pi.Key.Kind.String(), pi.Key.Tenant})
	}
	for _, dl := range b.DeadLetters {
		note(tenantDay{model.DayOf(dl.TS), kindDeadLetters, dl.Tenant})
	}
	for _, es := range days {
		ops = s.partitionOps(ops, es)
	}
	return ops
}

// remember notes the tenant-days of a successful commit, so they are not
// written again by this process.
func (s *Store) remember(b *store.Batch) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.known) > maxKnown {
		clear(s.known) // forgetting only costs a rewrite
	}
	for _, pi := range b.Catalogue {
		s.known[tenantDay{pi.Key.Day, pi.Key.Kind.String(), pi.Key.Tenant}] = struct{}{}
	}
	for _, dl := range b.DeadLetters {
		s.known[tenantDay{model.DayOf(dl.TS), kindDeadLetters, dl.Tenant}] = struct{}{}
	}
}

const kindDeadLetters = "dead_letters"

func (s *Store) rowOps(b *store.Batch) []op {
	var ops []op
	for _, pw := range b.Partitions {
		k := pw.Key
		day, sub := dayValue(k.Day), int32(k.Sub)
		entries := make([]gocql.BatchEntry, 0, len(pw.Readings)+len(pw.Events))
		for _, r := range pw.Readings {
			var seq any = gocql.UnsetValue
			if r.HasSeq {
				seq = r.Seq
			}
			entries = append(entries, entry(insReading, k.Tenant, k.Series, day, sub, r.TS, r.Metric, r.Value, seq))
		}
		for _, e := range pw.Events {
			entries = append(entries, entry(insAudit, k.Tenant, k.Series, day, sub, e.TS, e.EventID,
				e.Actor, e.Action, e.Resource, e.Outcome, blobOrUnset(e.Attributes)))
		}
		ops = s.partitionOps(ops, entries)
	}
	type dpart struct {
		tenant string
		day    model.Day
		hour   int
	}
	dead := make(map[dpart][]gocql.BatchEntry)
	for _, dl := range b.DeadLetters {
		p := dpart{dl.Tenant, model.DayOf(dl.TS), hourOf(dl.TS)}
		dead[p] = append(dead[p], entry(insDead, dl.Tenant, dayValue(p.day), p.hour, dl.TS, dl.ID,
			dl.Source, dl.Topic, dl.Reason, dl.Error, blobOrUnset(dl.Payload), dl.Truncated))
	}
	for _, es := range dead {
		ops = s.partitionOps(ops, es)
	}
	return ops
}

func (s *Store) auditIDOps(b *store.Batch) []op {
	type ipart struct {
		tenant string
		day    model.Day
		bucket int
	}
	groups := make(map[ipart][]gocql.BatchEntry)
	for _, pw := range b.Partitions {
		for _, e := range pw.Events {
			p := ipart{pw.Key.Tenant, model.DayOf(e.TS), auditIDBucket(e.EventID)}
			groups[p] = append(groups[p], entry(insAuditID, p.tenant, dayValue(p.day), p.bucket, e.EventID))
		}
	}
	var ops []op
	for _, es := range groups {
		ops = s.partitionOps(ops, es)
	}
	return ops
}

// slogAdapter routes the driver's log lines to slog.
type slogAdapter struct{ l *slog.Logger }

func attrs(fields []gocql.LogField) []any {
	out := make([]any, 0, 2*len(fields))
	for _, f := range fields {
		out = append(out, f.Name, f.Value.Any())
	}
	return out
}

func (a slogAdapter) Error(msg string, fields ...gocql.LogField) { a.l.Error(msg, attrs(fields)...) }
func (a slogAdapter) Warning(msg string, fields ...gocql.LogField) {
	a.l.Warn(msg, attrs(fields)...)
}
func (a slogAdapter) Info(msg string, fields ...gocql.LogField)  { a.l.Info(msg, attrs(fields)...) }
func (a slogAdapter) Debug(msg string, fields ...gocql.LogField) { a.l.Debug(msg, attrs(fields)...) }
