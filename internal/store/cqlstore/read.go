package cqlstore

import (
	"context"
	"fmt"
	"sync"

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
		it := s.query(`SELECT sub, row_count, byte_count, min_ts, max_ts, state, closed FROM catalogue
			WHERE tenant = ? AND kind = ? AND day = ? AND shard = ? AND series = ?`,
			sd.Tenant, sd.Kind.String(), dayValue(sd.Day), catalogueShard(sd.Series), sd.Series).IterContext(ctx)
		var (
			sub int32
			pi  model.PartitionInfo
		)
		for it.Scan(&sub, &pi.Rows, &pi.Bytes, &pi.MinTS, &pi.MaxTS, &pi.State, &pi.Closed) {
			pi.Key = sd.Partition(uint32(sub))
			out = append(out, pi)
		}
		return it.Close()
	})
	if err != nil {
		return nil, fmt.Errorf("read catalogue of %v: %w", sd, err)
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
	groups := make(map[ipart][]int) // indexes into ids
	for i, id := range ids {
		p := ipart{id.Tenant, id.Day, auditIDBucket(id.EventID)}
		groups[p] = append(groups[p], i)
	}
	seen := make([]bool, len(ids))
	var mu sync.Mutex
	var ops []op
	for p, idx := range groups {
		for len(idx) > 0 {
			n := min(len(idx), inListMax)
			chunk := idx[:n]
			idx = idx[n:]
			ops = append(ops, func(ctx context.Context) error {
				want := make(map[string][]int, len(chunk))
				list := make([]string, 0, len(chunk))
				for _, i := range chunk {
					e := ids[i].EventID
					if _, ok := want[e]; !ok {
						list = append(list, e)
					}
					want[e] = append(want[e], i)
				}
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
		}
	}
	if err := s.run(ctx, "audit_ids_read", ops); err != nil {
		return nil, fmt.Errorf("look up %d audit ids: %w", len(ids), err)
	}
	return seen, nil
}

// slice renders the clustering restriction of a range read over (ts, key)
// and its arguments. Cassandra does not mix single- and multi-column
// relations on clustering columns, so both bounds use the tuple form.
func slice(keyCol string, r store.Range) (string, []any) {
	if r.After != nil && r.After.TS >= r.From {
		return fmt.Sprintf(`(ts, %s) > (?, ?) AND (ts) < (?)`, keyCol), []any{r.After.TS, r.After.Key, r.To}
	}
	return `(ts) >= (?) AND (ts) < (?)`, []any{r.From, r.To}
}

// empty reports whether r selects nothing (the cursor is past its end).
func empty(r store.Range) bool {
	return r.To <= r.From || (r.After != nil && r.After.TS >= r.To)
}

func pageSize(limit int) int { return min(max(limit, 1), 5000) }

// ScanReadings returns up to limit rows of a readings partition inside r, in
// clustering order (TS, metric).
func (s *Store) ScanReadings(ctx context.Context, pk model.PartitionKey, r store.Range, limit int) ([]model.ReadingRow, error) {
	if empty(r) || limit < 1 {
		return nil, nil
	}
	cond, args := slice("metric", r)
	var out []model.ReadingRow
	err := s.do(ctx, "readings_read", func(ctx context.Context) error {
		out = out[:0]
		all := append([]any{pk.Tenant, pk.Series, dayValue(pk.Day), int32(pk.Sub)}, args...)
		all = append(all, limit)
		it := s.query(`SELECT ts, metric, value, seq FROM readings
			WHERE tenant = ? AND device = ? AND day = ? AND sub = ? AND `+cond+` LIMIT ?`, all...).
			PageSize(pageSize(limit)).IterContext(ctx)
		var (
			row model.ReadingRow
			seq *int64
		)
		for it.Scan(&row.TS, &row.Metric, &row.Value, &seq) {
			row.Seq, row.HasSeq = 0, seq != nil
			if seq != nil {
				row.Seq = *seq
			}
			out = append(out, row)
		}
		return it.Close()
	})
	if err != nil {
		return nil, fmt.Errorf("scan %v: %w", pk, err)
	}
	return out, nil
}

// ScanAudit returns up to limit events of an audit partition inside r, in
// clustering order (TS, event id).
func (s *Store) ScanAudit(ctx context.Context, pk model.PartitionKey, r store.Range, limit int) ([]model.AuditEvent, error) {
	if empty(r) || limit < 1 {
		return nil, nil
	}
	cond, args := slice("event_id", r)
	var out []model.AuditEvent
	err := s.do(ctx, "audit_read", func(ctx context.Context) error {
		out = out[:0]
		all := append([]any{pk.Tenant, pk.Series, dayValue(pk.Day), int32(pk.Sub)}, args...)
		all = append(all, limit)
		it := s.query(`SELECT ts, event_id, actor, action, resource, outcome, attributes FROM audit
			WHERE tenant = ? AND stream = ? AND day = ? AND sub = ? AND `+cond+` LIMIT ?`, all...).
			PageSize(pageSize(limit)).IterContext(ctx)
		for {
			e := model.AuditEvent{Stream: pk.Series}
			if !it.Scan(&e.TS, &e.EventID, &e.Actor, &e.Action, &e.Resource, &e.Outcome, &e.Attributes) {
				break
			}
			if len(e.Attributes) == 0 {
				e.Attributes = nil
			}
			out = append(out, e)
		}
		return it.Close()
	})
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
	var out []model.DeadLetter
	first := hourOf(r.From)
	if r.After != nil && r.After.TS >= r.From {
		first = hourOf(r.After.TS)
	}
	for h := first; h <= hourOf(r.To-1) && len(out) < limit; h++ {
		cond, args := slice("id", r)
		want := limit - len(out)
		err := s.do(ctx, "dead_letters_read", func(ctx context.Context) error {
			all := append([]any{tenant, dayValue(day), h}, args...)
			all = append(all, want)
			it := s.query(`SELECT ts, id, source, topic, reason, error, payload, truncated FROM dead_letters
				WHERE tenant = ? AND day = ? AND hour = ? AND `+cond+` LIMIT ?`, all...).
				PageSize(pageSize(want)).IterContext(ctx)
			n := len(out)
			for {
				dl := model.DeadLetter{Tenant: tenant}
				if !it.Scan(&dl.TS, &dl.ID, &dl.Source, &dl.Topic, &dl.Reason, &dl.Error, &dl.Payload, &dl.Truncated) {
					break
				}
				if len(dl.Payload) == 0 {
					dl.Payload = nil
				}
				out = append(out, dl)
			}
			if err := it.Close(); err != nil {
				out = out[:n] // a retry of this hour starts over
				return err
			}
			return nil
		})
		if err != nil {
			return nil, fmt.Errorf("scan dead letters of %s on %s: %w", tenant, day, err)
		}
	}
	return out, nil
}
