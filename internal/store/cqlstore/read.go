package cqlstore

import (
	"context"
	"fmt"
	"sync"
	"unicode/utf8"

	gocql "github.com/apache/cassandra-gocql-driver/v2"

	"github.com/sluicehq/sluice/internal/model"
	"github.com/sluicehq/sluice/internal/store"
)

func (s *Store) query(stmt string, args ...any) *gocql.Query {
	return s.sess.Query(stmt, args...).Consistency(s.readCL).Idempotent(true)
}

// Catalogue returns every partition of one series-day, ordered by sub-bucket.
func (s *Store) Catalogue(ctx context.Context, sd model.SeriesDay) ([]model.PartitionInfo, error) {
	var out []model.PartitionInfo
	err := s.do(ctx, "catalogue_read", func(ctx context.Context) error {
		out = out[:0]
		it := s.query(`SELECT sub, row_count, byte_count, min_ts, max_ts, state, closed, ahead FROM catalogue
			WHERE tenant = ? AND kind = ? AND day = ? AND shard = ? AND series = ?`,
			sd.Tenant, sd.Kind.String(), dayValue(sd.Day), catalogueShard(sd.Series), sd.Series).IterContext(ctx)
		var (
			sub  int32
			pi   model.PartitionInfo
			rows *int64
		)
		for it.Scan(&sub, &rows, &pi.Bytes, &pi.MinTS, &pi.MaxTS, &pi.State, &pi.Closed, &pi.Ahead) {
			pi.Key = sd.Partition(uint32(sub))
			out = append(out, counted(pi, rows))
		}
		return it.Close()
	})
	if err != nil {
		return nil, fmt.Errorf("read catalogue of %v: %w", sd, err)
	}
	return out, nil
}

// counted sets pi's row count from the row_count cell, and marks an entry
// that was registered but never counted (row_count null: its commit
// stopped between its rows and its counts) as ahead: its partition may
// hold rows that no count covers.
func counted(pi model.PartitionInfo, rows *int64) model.PartitionInfo {
	if rows == nil {
		pi.Rows, pi.Ahead = 0, true
		return pi
	}
	pi.Rows = *rows
	return pi
}

// Catalogues returns the catalogues of many series-days (out[i] for
// sds[i], each ordered by sub-bucket), reading the series-days that share a
// catalogue partition together, up to 100 per request: a gateway that meets
// thousands of new series-days at once (start-up, the first minutes of a UTC
// day) loads them in tens of requests, not thousands. It implements
// sink.CatalogueLoader.
func (s *Store) Catalogues(ctx context.Context, sds []model.SeriesDay) ([][]model.PartitionInfo, error) {
	out := make([][]model.PartitionInfo, len(sds))
	var mu sync.Mutex
	ops := inListOps(len(sds),
		func(i int) cpart {
			sd := sds[i]
			return cpart{sd.Tenant, sd.Kind.String(), sd.Day, catalogueShard(sd.Series)}
		},
		func(i int) string { return sds[i].Series },
		func(ctx context.Context, p cpart, list []string, want map[string][]int) error {
			it := s.query(`SELECT series, sub, row_count, byte_count, min_ts, max_ts, state, closed, ahead FROM catalogue
				WHERE tenant = ? AND kind = ? AND day = ? AND shard = ? AND series IN ?`,
				p.tenant, p.kind, dayValue(p.day), p.shard, list).IterContext(ctx)
			var (
				series string
				sub    int32
				pi     model.PartitionInfo
				rows   *int64
				got    = make(map[int][]model.PartitionInfo, len(list))
			)
			for it.Scan(&series, &sub, &rows, &pi.Bytes, &pi.MinTS, &pi.MaxTS, &pi.State, &pi.Closed, &pi.Ahead) {
				for _, i := range want[series] {
					pi.Key = sds[i].Partition(uint32(sub))
					got[i] = append(got[i], counted(pi, rows))
				}
			}
			if err := it.Close(); err != nil {
				return err
			}
			// A retried request starts again from nothing: results are
			// published only once the whole request succeeded.
			mu.Lock()
			for i, parts := range got {
				out[i] = parts
			}
			mu.Unlock()
			return nil
		})
	if err := s.run(ctx, "catalogue_read", ops); err != nil {
		return nil, fmt.Errorf("read catalogues of %d series-days: %w", len(sds), err)
	}
	return out, nil
}

// AuditSeen reports, for each id, whether an event with that id is stored.
// Ids are looked up per audit_ids partition, up to 100 at a time.
func (s *Store) AuditSeen(ctx context.Context, ids []store.AuditID) ([]bool, error) {
	type ipart struct {
		tenant string
		day    model.Day
		bucket int
	}
	seen := make([]bool, len(ids))
	var mu sync.Mutex
	ops := inListOps(len(ids),
		func(i int) ipart { return ipart{ids[i].Tenant, ids[i].Day, auditIDBucket(ids[i].EventID)} },
		func(i int) string { return ids[i].EventID },
		func(ctx context.Context, p ipart, list []string, want map[string][]int) error {
			it := s.query(`SELECT event_id FROM audit_ids WHERE tenant = ? AND day = ? AND bucket = ? AND event_id IN ?`,
				p.tenant, dayValue(p.day), p.bucket, list).IterContext(ctx)
			var e string
			mu.Lock()
			defer mu.Unlock()
			for it.Scan(&e) {
				for _, i := range want[e] {
					seen[i] = true
				}
			}
			return it.Close()
		})
	if err := s.run(ctx, "audit_ids_read", ops); err != nil {
		return nil, fmt.Errorf("look up %d audit ids: %w", len(ids), err)
	}
	return seen, nil
}

// inListOps groups n items by the partition that holds them and returns
// one request per partition and up to inListMax distinct keys: read gets
// the partition, its keys (for an IN list) and, for each key, the indexes
// of the items it answers (several items may share a key).
func inListOps[P comparable](n int, part func(i int) P, key func(i int) string,
	read func(ctx context.Context, p P, list []string, want map[string][]int) error) []op {
	groups := make(map[P][]int)
	for i := range n {
		p := part(i)
		groups[p] = append(groups[p], i)
	}
	var ops []op
	for p, idx := range groups {
		for len(idx) > 0 {
			chunk := idx[:min(len(idx), inListMax)]
			idx = idx[len(chunk):]
			ops = append(ops, func(ctx context.Context) error {
				want := make(map[string][]int, len(chunk))
				list := make([]string, 0, len(chunk))
				for _, i := range chunk {
					k := key(i)
					if _, ok := want[k]; !ok {
						list = append(list, k)
					}
					want[k] = append(want[k], i)
				}
				return read(ctx, p, list, want)
			})
		}
	}
	return ops
}

// slice is one CQL clustering restriction of a range read over (ts, key),
// its arguments, and an optional client-side filter.
type slice struct {
	cond   string
	args   []any
	filter *store.Pos // keep only rows after it
}

// restrictions renders a range as clustering restrictions. Cassandra does not mix
// single- and multi-column relations on clustering columns, so bounds use
// the tuple form throughout. A cursor key that is not valid UTF-8 (the
// reader's "after every key" marker, "\xff") cannot be bound to a text
// column: the rows of its instant are then filtered here.
func restrictions(keyCol string, r store.Range) []slice {
	a := r.After
	switch {
	case a == nil || a.TS < r.From:
		return []slice{{cond: `(ts) >= (?) AND (ts) < (?)`, args: []any{r.From, r.To}}}
	case utf8.ValidString(a.Key):
		return []slice{{cond: fmt.Sprintf(`(ts, %s) > (?, ?) AND (ts) < (?)`, keyCol), args: []any{a.TS, a.Key, r.To}}}
	case a.Key[0] >= 0xf5: // no UTF-8 string sorts after it
		return []slice{{cond: `(ts) > (?) AND (ts) < (?)`, args: []any{a.TS, r.To}}}
	default:
		return []slice{
			{cond: `(ts) >= (?) AND (ts) <= (?)`, args: []any{a.TS, a.TS}, filter: a},
			{cond: `(ts) > (?) AND (ts) < (?)`, args: []any{a.TS, r.To}},
		}
	}
}

// empty reports whether r selects nothing (the cursor is past its end).
func empty(r store.Range) bool {
	return r.To <= r.From || (r.After != nil && r.After.TS >= r.To)
}

func pageSize(limit int) int { return min(max(limit, 1), 5000) }

// scanRange reads up to limit rows of one partition inside r. stmt is the
// SELECT up to and including "WHERE <partition key> AND "; keyArgs bind the
// partition key.
func scanRange[T any](ctx context.Context, s *Store, name, stmt string, keyArgs []any, keyCol string, r store.Range, limit int,
	scan func(it *gocql.Iter) (T, bool), pos func(T) store.Pos,
) ([]T, error) {
	if empty(r) || limit < 1 {
		return nil, nil
	}
	var out []T
	for _, sl := range restrictions(keyCol, r) {
		want := limit - len(out)
		if want <= 0 {
			break
		}
		err := s.do(ctx, name, func(ctx context.Context) error {
			n := len(out)
			args := append(append(append([]any(nil), keyArgs...), sl.args...), want)
			if sl.filter != nil {
				args[len(args)-1] = int(^uint32(0) >> 1) // filtered below
			}
			it := s.query(stmt+sl.cond+` LIMIT ?`, args...).PageSize(pageSize(want)).IterContext(ctx)
			for len(out) < limit {
				row, ok := scan(it)
				if !ok {
					break
				}
				if sl.filter == nil || sl.filter.Less(pos(row)) {
					out = append(out, row)
				}
			}
			if err := it.Close(); err != nil {
				out = out[:n] // a retry starts this slice over
				return err
			}
			return nil
		})
		if err != nil {
			return nil, err
		}
	}
	return out, nil
}

// ScanReadings returns up to limit rows of a readings partition inside r, in
// clustering order (TS, metric).
func (s *Store) ScanReadings(ctx context.Context, pk model.PartitionKey, r store.Range, limit int) ([]model.ReadingRow, error) {
	out, err := scanRange(ctx, s, "readings_read",
		`SELECT ts, metric, value, vtype, ivalue, svalue, seq, has_seq FROM readings WHERE tenant = ? AND device = ? AND day = ? AND sub = ? AND `,
		[]any{pk.Tenant, pk.Series, dayValue(pk.Day), int32(pk.Sub)}, "metric", r, limit,
		func(it *gocql.Iter) (model.ReadingRow, bool) {
			var row model.ReadingRow
			var vtype int8
			ok := it.Scan(&row.TS, &row.Metric, &row.Value, &vtype, &row.Int, &row.Str, &row.Seq, &row.HasSeq)
			row.Type = model.ValueType(vtype)
			return row, ok
		},
		func(row model.ReadingRow) store.Pos { return store.Pos{TS: row.TS, Key: row.Metric} })
	if err != nil {
		return nil, fmt.Errorf("scan %v: %w", pk, err)
	}
	for _, row := range out {
		if !row.Type.Valid() {
			return nil, fmt.Errorf("scan %v: metric %s at %d has value type %d, which this gateway does not know (written by a newer version?)",
				pk, row.Metric, row.TS, uint8(row.Type))
		}
	}
	return out, nil
}

// ScanAudit returns up to limit events of an audit partition inside r, in
// clustering order (TS, event id).
func (s *Store) ScanAudit(ctx context.Context, pk model.PartitionKey, r store.Range, limit int) ([]model.AuditEvent, error) {
	out, err := scanRange(ctx, s, "audit_read",
		`SELECT ts, event_id, actor, action, resource, outcome, attributes FROM audit WHERE tenant = ? AND stream = ? AND day = ? AND sub = ? AND `,
		[]any{pk.Tenant, pk.Series, dayValue(pk.Day), int32(pk.Sub)}, "event_id", r, limit,
		func(it *gocql.Iter) (model.AuditEvent, bool) {
			e := model.AuditEvent{Stream: pk.Series}
			ok := it.Scan(&e.TS, &e.EventID, &e.Actor, &e.Action, &e.Resource, &e.Outcome, &e.Attributes)
			if len(e.Attributes) == 0 {
				e.Attributes = nil
			}
			return e, ok
		},
		func(e model.AuditEvent) store.Pos { return store.Pos{TS: e.TS, Key: e.EventID} })
	if err != nil {
		return nil, fmt.Errorf("scan %v: %w", pk, err)
	}
	return out, nil
}

// ScanDeadLetters returns up to limit dead letters of one tenant-day inside
// r, in (TS, ID) order, reading the day's hour partitions in turn.
func (s *Store) ScanDeadLetters(ctx context.Context, tenant string, day model.Day, r store.Range, limit int) ([]model.DeadLetter, error) {
	r.From, r.To = max(r.From, day.Start()), min(r.To, day.End())
	if empty(r) || limit < 1 {
		return nil, nil
	}
	first := hourOf(r.From)
	if r.After != nil && r.After.TS >= r.From {
		first = hourOf(r.After.TS)
	}
	var out []model.DeadLetter
	for h := first; h <= hourOf(r.To-1) && len(out) < limit; h++ {
		rows, err := scanRange(ctx, s, "dead_letters_read",
			`SELECT ts, id, source, topic, reason, error, payload, truncated FROM dead_letters WHERE tenant = ? AND day = ? AND hour = ? AND `,
			[]any{tenant, dayValue(day), h}, "id", r, limit-len(out),
			func(it *gocql.Iter) (model.DeadLetter, bool) {
				dl := model.DeadLetter{Tenant: tenant}
				ok := it.Scan(&dl.TS, &dl.ID, &dl.Source, &dl.Topic, &dl.Reason, &dl.Error, &dl.Payload, &dl.Truncated)
				if len(dl.Payload) == 0 {
					dl.Payload = nil
				}
				return dl, ok
			},
			func(dl model.DeadLetter) store.Pos { return store.Pos{TS: dl.TS, Key: dl.ID} })
		if err != nil {
			return nil, fmt.Errorf("scan dead letters of %s on %s: %w", tenant, day, err)
		}
		out = append(out, rows...)
	}
	return out, nil
}

// EachPartition calls fn with every catalogue entry of a tenant's kind on
// day: the 64 catalogue partitions of (tenant, kind, day), read one after
// another in pages, never a row. Entries come in shard order, and by
// series and sub-bucket within a shard. It stops at the first error fn
// returns, or when ctx ends. fn is called from one goroutine at a time.
func (s *Store) EachPartition(ctx context.Context, tenant string, kind model.Kind, day model.Day, fn func(model.PartitionInfo) error) error {
	for shard := range catalogueShards {
		// One page at a time through the shard: a retry of a failed page
		// would call fn twice for its entries, so no retry here.
		it := s.query(`SELECT series, sub, row_count, byte_count, min_ts, max_ts, state, closed, ahead FROM catalogue
			WHERE tenant = ? AND kind = ? AND day = ? AND shard = ?`,
			tenant, kind.String(), dayValue(day), shard).PageSize(1000).IterContext(ctx)
		var (
			series string
			sub    int32
			pi     model.PartitionInfo
			rows   *int64
			ferr   error
		)
		for ferr == nil && it.Scan(&series, &sub, &rows, &pi.Bytes, &pi.MinTS, &pi.MaxTS, &pi.State, &pi.Closed, &pi.Ahead) {
			sd := model.SeriesDay{Kind: kind, Tenant: tenant, Series: series, Day: day}
			pi.Key = sd.Partition(uint32(sub))
			ferr = fn(counted(pi, rows))
		}
		if err := it.Close(); err != nil {
			return fmt.Errorf("list partitions of %s %s on %s: %w", tenant, kind, day, err)
		}
		if ferr != nil {
			return ferr
		}
	}
	return nil
}
