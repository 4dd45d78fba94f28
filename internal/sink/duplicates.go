package sink

import (
	"context"
	"fmt"

	"github.com/sluicehq/sluice/internal/model"
	"github.com/sluicehq/sluice/internal/store"
)

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
