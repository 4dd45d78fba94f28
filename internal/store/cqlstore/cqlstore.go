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
// configured write consistency. It runs in phases; the requests of a phase
// run in parallel under the store-wide bound Config.MaxConcurrentRequests:
//
//  1. registration, only for catalogue keys this process has not written
//     before: the key alone (no counts, so readers skip it) and the
//     tenant-day index. From here on retention can find the partition.
//  2. the rows: each partition's rows as UNLOGGED batches of at most
//     Config.BatchRows rows of that one partition (never a multi-partition
//     batch); dead letters likewise per partition.
//  3. the catalogue counts, and the audit id index: both only after the rows
//     they describe are stored. The catalogue entries of all the commits
//     that reach this phase together are written together (catalogueLoop):
//     one batch per catalogue partition, each entry at its own commit's
//     timestamp, only the newest of one key. An entry this process wrote in
//     full before, whose state and closed flag did not change, is updated
//     with its counts and range only. A reader that finds a catalogue entry
//     finds the rows it counts; an audit id that is seen has its event
//     stored, so a retry of an event whose write failed is never taken for a
//     duplicate.
//
// If a phase fails, Commit returns the error and the caller's request fails.
// The rows of a failed commit that did reach Cassandra are not counted in
// the catalogue (readers may or may not see them; a retry rewrites the same
// keys, and readers drop equal keys across partitions).
//
// Every write of one Commit carries the same write timestamp: the batch's
// Version, which the sink takes from Version as it plans the batch, or one
// taken at the start of Commit when it has none. Both come from a clock that
// never goes backwards, so of two commits of the same key the one planned
// later wins, as in the embedded store, whichever lands last. The sink
// therefore commits batches that share catalogue entries concurrently (see
// sink.Versioner): an older catalogue entry landing late changes nothing.
//
// # Catalogue rows have one writer each
//
// Sub-bucket ids carry the slot of the gateway that opened them (see
// internal/buckets), so each catalogue row is written by one gateway only,
// and its write timestamps come from that gateway's clock alone.
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

	seriesPage int // catalogue rows per EachSeries request; 0: seriesPage (tests page smaller)
	leafBucket int // chunks per audit_leaf_buckets partition; 0: leafBucket (tests bucket smaller)

	mu         sync.Mutex
	lastStamp  int64                          // last write timestamp handed out
	registered map[model.PartitionKey]written // catalogue keys this process has written
	known      map[tenantDay]struct{}         // tenant_days rows this process has written

	catq chan *catalogueWrite // to catalogueLoop
	stop chan struct{}        // closed by Close
	wg   sync.WaitGroup
}

// written is what this process knows is stored in a catalogue row: its key
// (registered), and, once counts is set, the state and closed flag written
// at version ts. A count update whose state and closed are the same leaves
// those two cells out.
type written struct {
	counts bool
	state  string
	closed bool
	ts     int64
}

type tenantDay struct {
	day    model.Day
	kind   string
	tenant string
}

const maxRemembered = 1_000_000

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
	st := &Store{
		cfg:        cfg,
		sess:       sess,
		logger:     logger,
		writeCL:    gocql.ParseConsistency(cfg.WriteConsistency),
		readCL:     gocql.ParseConsistency(cfg.ReadConsistency),
		sem:        make(chan struct{}, cfg.MaxConcurrentRequests),
		m:          newMetrics(reg),
		registered: make(map[model.PartitionKey]written),
		known:      make(map[tenantDay]struct{}),
		catq:       make(chan *catalogueWrite),
		stop:       make(chan struct{}),
	}
	st.wg.Go(st.catalogueLoop)
	return st, nil
}

// connect creates a session, retrying with backoff while no node answers.
func connect(ctx context.Context, cfg Config, keyspace string, logger *slog.Logger) (*gocql.Session, error) {
	wait := 500 * time.Millisecond
	for attempt := 1; ; attempt++ {
		// A fresh configuration each time: a host policy cannot be reused.
		cc := cfg.cluster(keyspace)
		cc.Logger = slogAdapter{logger.With("component", "gocql")}
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
	close(s.stop)
	s.wg.Wait()
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
	insReading   = `INSERT INTO readings (tenant, device, day, sub, ts, metric, value, vtype, ivalue, svalue, seq, has_seq) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`
	insAudit     = `INSERT INTO audit (tenant, stream, day, sub, ts, event_id, actor, action, resource, outcome, attributes) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`
	insAuditID   = `INSERT INTO audit_ids (tenant, day, bucket, event_id) VALUES (?, ?, ?, ?)`
	insCatalogue = `INSERT INTO catalogue (tenant, kind, day, shard, series, sub, row_count, byte_count, min_ts, max_ts, state, closed, ahead) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) USING TIMESTAMP ?`
	// insCatalogueCounts updates only what changes from commit to commit:
	// for an entry whose state and closed flag this process already wrote
	// with the same values (and a row that therefore exists).
	insCatalogueCounts = `INSERT INTO catalogue (tenant, kind, day, shard, series, sub, row_count, byte_count, min_ts, max_ts, ahead) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) USING TIMESTAMP ?`
	// insCatalogueMark marks an entry ahead (and registers its key) before
	// rows are written past what it says; see store.Batch.Ahead.
	insCatalogueMark = `INSERT INTO catalogue (tenant, kind, day, shard, series, sub, ahead) VALUES (?, ?, ?, ?, ?, ?, true) USING TIMESTAMP ?`
	// insCatalogueKey writes only the key (the row's liveness): counts
	// already there are kept, and a new row has none, so readers skip it.
	insCatalogueKey = `INSERT INTO catalogue (tenant, kind, day, shard, series, sub) VALUES (?, ?, ?, ?, ?, ?)`
	insDead         = `INSERT INTO dead_letters (tenant, day, hour, ts, id, source, topic, reason, error, payload, truncated) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`
	insTenantDay    = `INSERT INTO tenant_days (day, kind, tenant) VALUES (?, ?, ?)`
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

// stamp returns a write timestamp (microseconds) greater than every one
// returned before.
func (s *Store) stamp() int64 {
	now := time.Now().UnixMicro()
	s.mu.Lock()
	defer s.mu.Unlock()
	if now <= s.lastStamp {
		now = s.lastStamp + 1
	}
	s.lastStamp = now
	return now
}

// Version returns a write timestamp for a batch, greater than every one
// returned before (it implements sink.Versioner).
func (s *Store) Version() int64 { return s.stamp() }

// batchOp sends entries, which must all belong to one partition, as one
// UNLOGGED batch (or one statement) with write timestamp ts, or, when ts is
// 0, with the timestamps their statements give (USING TIMESTAMP).
func (s *Store) batchOp(entries []gocql.BatchEntry, ts int64) op {
	return func(ctx context.Context) error {
		if len(entries) == 1 {
			e := entries[0]
			q := s.sess.Query(e.Stmt, e.Args...).Consistency(s.writeCL).Idempotent(true)
			if ts != 0 {
				q = q.WithTimestamp(ts)
			}
			return q.ExecContext(ctx)
		}
		b := s.sess.Batch(gocql.UnloggedBatch).Consistency(s.writeCL)
		if ts != 0 {
			b = b.WithTimestamp(ts)
		}
		b.Entries = entries
		return b.ExecContext(ctx)
	}
}

// partitionOps splits one partition's statements into batches of at most
// BatchRows.
func (s *Store) partitionOps(ops []op, entries []gocql.BatchEntry, ts int64) []op {
	for len(entries) > 0 {
		n := min(len(entries), s.cfg.BatchRows)
		ops = append(ops, s.batchOp(entries[:n:n], ts))
		entries = entries[n:]
	}
	return ops
}

func entry(stmt string, args ...any) gocql.BatchEntry {
	return gocql.BatchEntry{Stmt: stmt, Args: args, Idempotent: true}
}

// blob writes an absent value as an empty blob: the driver sends a nil
// slice as null, which would be a tombstone.
func blob(b []byte) []byte {
	if b == nil {
		return []byte{}
	}
	return b
}

// Commit writes the batch and returns nil only once every write succeeded
// at the write consistency. See the package comment for the order.
func (s *Store) Commit(ctx context.Context, b *store.Batch) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if b.Also != nil {
		// Cassandra writes no batch atomically: what Also would add could
		// be stored without the rows, or the rows without it.
		return errors.New("commit: keys to write with the batch (store.Batch.Also) need a store that writes a batch atomically, not Cassandra")
	}
	ts := b.Version
	if ts == 0 {
		ts = s.stamp()
	}
	reg := s.registerOps(b, ts)
	if err := s.run(ctx, "register", reg.ops); err != nil {
		return fmt.Errorf("register partitions: %w", err)
	}
	s.remember(reg)
	if err := s.run(ctx, "rows_write", s.rowOps(b, ts)); err != nil {
		return fmt.Errorf("write %d rows in %d partitions: %w", b.Rows(), len(b.Partitions), err)
	}
	// The audit ids, and meanwhile the catalogue entries, through
	// catalogueLoop, which writes those of every commit waiting at once.
	auditErr := make(chan error, 1)
	if ops := s.auditIDOps(b, ts); len(ops) > 0 {
		go func() { auditErr <- s.run(ctx, "audit_ids_write", ops) }()
	} else {
		auditErr <- nil // readings only: no goroutine
	}
	catErr := s.writeCatalogue(ctx, b.Catalogue, ts)
	if err := <-auditErr; err != nil {
		return fmt.Errorf("write audit ids: %w", err)
	}
	if catErr != nil {
		return fmt.Errorf("write catalogue: %w", catErr)
	}
	return nil
}

// writeCatalogue hands entries to catalogueLoop and waits for the round
// that wrote them.
func (s *Store) writeCatalogue(ctx context.Context, entries []model.PartitionInfo, ts int64) error {
	if len(entries) == 0 {
		return nil
	}
	cw := &catalogueWrite{entries: entries, ts: ts, done: make(chan error, 1)}
	select {
	case s.catq <- cw:
	case <-s.stop:
		return errors.New("store closed")
	case <-ctx.Done():
		return ctx.Err()
	}
	select {
	case err := <-cw.done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// catalogueWrite is one commit's catalogue entries, written at ts.
type catalogueWrite struct {
	entries []model.PartitionInfo
	ts      int64
	done    chan error
}

// catalogueLoop writes catalogue entries for the commits of this store,
// coalescing those that wait: while one round is written, the entries of
// commits that reach the catalogue phase queue up, and the next round
// writes them all, one batch per catalogue partition. A commit is answered
// with the result of the round that carried its entries.
//
// Of several entries of one key in a round only the newest (greatest write
// timestamp) is written: it is the planner's latest word on the partition
// (an entry ahead of the rows, or a settled exact one, still covering every
// row stored), and the write timestamp would make it win anyway; the rows
// of all of them are already stored (entries are queued after their rows).
func (s *Store) catalogueLoop() {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		<-s.stop
		cancel()
	}()
	for {
		var round []*catalogueWrite
		select {
		case cw := <-s.catq:
			round = append(round, cw)
		case <-s.stop:
			return
		}
	more:
		for {
			select {
			case cw := <-s.catq:
				round = append(round, cw)
			default:
				break more
			}
		}
		newest := make(map[model.PartitionKey]stamped)
		for _, cw := range round {
			for _, pi := range cw.entries {
				if n, ok := newest[pi.Key]; !ok || cw.ts > n.ts {
					newest[pi.Key] = stamped{pi, cw.ts}
				}
			}
		}
		err := s.run(ctx, "catalogue_write", s.catalogueOps(newest))
		if err == nil {
			s.rememberCounts(newest)
		}
		for _, cw := range round {
			cw.done <- err
		}
	}
}

// stamped is a catalogue entry and its write timestamp.
type stamped struct {
	pi model.PartitionInfo
	ts int64
}

// cpart is a catalogue partition.
type cpart struct {
	tenant, kind string
	day          model.Day
	shard        int
}

func cpartOf(k model.PartitionKey) cpart {
	return cpart{k.Tenant, k.Kind.String(), k.Day, catalogueShard(k.Series)}
}

// registration is what a commit must register before its rows.
type registration struct {
	ops  []op
	keys []model.PartitionKey
	days []tenantDay
}

// registerOps writes the keys of the batch's catalogue entries and its
// tenant-days that this process has not written yet.
func (s *Store) registerOps(b *store.Batch, ts int64) registration {
	var reg registration
	groups := make(map[cpart][]gocql.BatchEntry)
	days := make(map[model.Day][]gocql.BatchEntry)
	seen := make(map[tenantDay]struct{})
	s.mu.Lock()
	for _, pi := range b.Catalogue {
		k := pi.Key
		if _, ok := s.registered[k]; ok {
			continue
		}
		reg.keys = append(reg.keys, k)
		cp := cpartOf(k)
		groups[cp] = append(groups[cp], entry(insCatalogueKey, k.Tenant, cp.kind, dayValue(k.Day), cp.shard, k.Series, int32(k.Sub)))
	}
	note := func(td tenantDay) {
		if _, ok := seen[td]; ok {
			return
		}
		seen[td] = struct{}{}
		if _, ok := s.known[td]; ok {
			return
		}
		reg.days = append(reg.days, td)
		days[td.day] = append(days[td.day], entry(insTenantDay, dayValue(td.day), td.kind, td.tenant))
	}
	for _, pi := range b.Catalogue {
		note(tenantDay{pi.Key.Day, pi.Key.Kind.String(), pi.Key.Tenant})
	}
	for _, dl := range b.DeadLetters {
		note(tenantDay{model.DayOf(dl.TS), kindDeadLetters, dl.Tenant})
	}
	s.mu.Unlock()
	for _, es := range groups {
		reg.ops = s.partitionOps(reg.ops, es, ts)
	}
	for _, es := range days {
		reg.ops = s.partitionOps(reg.ops, es, ts)
	}
	// Marks go just below the commit's timestamp, so that the commit's own
	// entry (and every later one) replaces them, while the exact entries
	// written before stay shadowed until then.
	marks := make(map[cpart][]gocql.BatchEntry)
	for _, k := range b.Ahead {
		cp := cpartOf(k)
		marks[cp] = append(marks[cp], entry(insCatalogueMark, k.Tenant, cp.kind, dayValue(k.Day), cp.shard, k.Series, int32(k.Sub), ts-1))
	}
	for _, es := range marks {
		reg.ops = s.partitionOps(reg.ops, es, 0)
	}
	return reg
}

// remember notes what a commit registered, so this process does not write
// it again. Forgetting (when the sets grow large) only costs a rewrite.
func (s *Store) remember(reg registration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.registered)+len(reg.keys) > maxRemembered {
		clear(s.registered)
	}
	if len(s.known)+len(reg.days) > maxRemembered {
		clear(s.known)
	}
	for _, k := range reg.keys {
		if _, ok := s.registered[k]; !ok {
			s.registered[k] = written{}
		}
	}
	for _, td := range reg.days {
		s.known[td] = struct{}{}
	}
}

// rememberCounts notes the state and closed flag of catalogue entries
// written, unless an entry of a later timestamp was noted first.
func (s *Store) rememberCounts(entries map[model.PartitionKey]stamped) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for k, e := range entries {
		w, ok := s.registered[k]
		if !ok || w.counts && w.ts > e.ts {
			continue // forgotten, or superseded
		}
		s.registered[k] = written{counts: true, state: e.pi.State, closed: e.pi.Closed, ts: e.ts}
	}
}

// catalogueOps writes entries, each at its own timestamp (USING TIMESTAMP:
// entries of several commits share a batch), as one batch of at most
// BatchRows entries per catalogue partition.
func (s *Store) catalogueOps(entries map[model.PartitionKey]stamped) []op {
	groups := make(map[cpart][]gocql.BatchEntry)
	s.mu.Lock()
	for k, e := range entries {
		pi, cp := e.pi, cpartOf(k)
		if w := s.registered[k]; w.counts && w.state == pi.State && w.closed == pi.Closed && w.ts < e.ts {
			groups[cp] = append(groups[cp], entry(insCatalogueCounts,
				k.Tenant, cp.kind, dayValue(k.Day), cp.shard, k.Series, int32(k.Sub),
				pi.Rows, pi.Bytes, pi.MinTS, pi.MaxTS, pi.Ahead, e.ts))
			continue
		}
		groups[cp] = append(groups[cp], entry(insCatalogue,
			k.Tenant, cp.kind, dayValue(k.Day), cp.shard, k.Series, int32(k.Sub),
			pi.Rows, pi.Bytes, pi.MinTS, pi.MaxTS, pi.State, pi.Closed, pi.Ahead, e.ts))
	}
	s.mu.Unlock()
	var ops []op
	for _, es := range groups {
		ops = s.partitionOps(ops, es, 0)
	}
	return ops
}

const kindDeadLetters = "dead_letters"

func (s *Store) rowOps(b *store.Batch, ts int64) []op {
	var ops []op
	for _, pw := range b.Partitions {
		k := pw.Key
		day, sub := dayValue(k.Day), int32(k.Sub)
		entries := make([]gocql.BatchEntry, 0, len(pw.Readings)+len(pw.Events))
		for _, r := range store.LastOfEachCell(pw.Readings) {
			entries = append(entries, entry(insReading, k.Tenant, k.Series, day, sub, r.TS, r.Metric, r.Value, int8(r.Type), r.Int, r.Str, r.Seq, r.HasSeq))
		}
		for _, e := range pw.Events {
			entries = append(entries, entry(insAudit, k.Tenant, k.Series, day, sub, e.TS, e.EventID,
				e.Actor, e.Action, e.Resource, e.Outcome, blob(e.Attributes)))
		}
		ops = s.partitionOps(ops, entries, ts)
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
			dl.Source, dl.Topic, dl.Reason, dl.Error, blob(dl.Payload), dl.Truncated))
	}
	for _, es := range dead {
		ops = s.partitionOps(ops, es, ts)
	}
	return ops
}

func (s *Store) auditIDOps(b *store.Batch, ts int64) []op {
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
		ops = s.partitionOps(ops, es, ts)
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
