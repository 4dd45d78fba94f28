package cqlstore_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/audit/auditlog"
	"github.com/sluicehq/sluice/internal/audit/audittest"
	"github.com/sluicehq/sluice/internal/buckets"
	"github.com/sluicehq/sluice/internal/model"
	"github.com/sluicehq/sluice/internal/reader"
	"github.com/sluicehq/sluice/internal/sink"
	"github.com/sluicehq/sluice/internal/store/cqlstore"
)

// tamperer edits rows with plain CQL, as an operator with store access
// could.
type tamperer struct{ s *cqlstore.Store }

func (tm tamperer) SetEvent(ctx context.Context, tenant string, e model.AuditEvent) error {
	attrs := e.Attributes
	if attrs == nil {
		attrs = []byte{}
	}
	return tm.s.Session().Query(`INSERT INTO audit (tenant, stream, day, sub, ts, event_id, actor, action, resource, outcome, attributes) VALUES (?, ?, ?, 0, ?, ?, ?, ?, ?, ?, ?)`,
		tenant, e.Stream, model.DayOf(e.TS).Start(), e.TS, e.EventID, e.Actor, e.Action, e.Resource, e.Outcome, attrs).ExecContext(ctx)
}

func (tm tamperer) DeleteEvent(ctx context.Context, tenant string, e model.AuditEvent) error {
	return tm.s.Session().Query(`DELETE FROM audit WHERE tenant = ? AND stream = ? AND day = ? AND sub = 0 AND ts = ? AND event_id = ?`,
		tenant, e.Stream, model.DayOf(e.TS).Start(), e.TS, e.EventID).ExecContext(ctx)
}

func (tm tamperer) DeleteSeal(ctx context.Context, tenant, stream string, d model.Day) error {
	return tm.s.Session().Query(`DELETE FROM audit_seals WHERE tenant = ? AND stream = ? AND day = ? IF EXISTS`,
		tenant, stream, d.Start()).ExecContext(ctx)
}

func TestAuditLogTamperDetection(t *testing.T) {
	ctx := context.Background()
	st := openStore(t, nil)
	tenant := unique(t)
	keys, vkey := audittest.NewKeys(t, "audit.example.com")
	l := audittest.NewLog(st, keys, audittest.Now())
	rng := rand.New(rand.NewPCG(9, 10))
	s := audittest.Build(ctx, t, st, l, tenant, "billing", []int{1, 30, 60}, rng)
	audittest.ProveAll(ctx, t, l, vkey, tenant, "billing", s)
	n := 1000
	if testing.Short() {
		n = 100
	}
	audittest.Tamper(ctx, t, st, tamperer{st}, l, tenant, "billing", s, n, rng)
}

func TestAuditLogSealTamper(t *testing.T) {
	audittest.SealTamper(t, func(t *testing.T) audittest.Store {
		st := openStore(t, nil)
		if err := st.Truncate(context.Background()); err != nil {
			t.Fatal(err)
		}
		return st
	}, func(st audittest.Store) audittest.Tamperer { return tamperer{st.(*cqlstore.Store)} })
}

func TestAuditLogRetention(t *testing.T) {
	audittest.Retention(t, func(t *testing.T) audittest.Store {
		st := openStore(t, nil)
		if err := st.Truncate(context.Background()); err != nil {
			t.Fatal(err)
		}
		return st
	})
}

// TestAuditLogTwoGateways writes one stream through two stores (two
// gateways with their own sessions), lets both seal every day at once,
// and checks that one chain of seals results, verified from either.
func TestAuditLogTwoGateways(t *testing.T) {
	ctx := context.Background()
	a, b := openStore(t, nil), openStore(t, nil)
	tenant := unique(t)
	keys, vkey := audittest.NewKeys(t, "audit.example.com")
	la := audittest.NewLog(a, keys, audittest.Now())
	lb := audittest.NewLog(b, keys, audittest.Now())
	rng := rand.New(rand.NewPCG(11, 12))
	days := []model.Day{audittest.Base, audittest.Base + 1, audittest.Base + 2}
	for i, d := range days {
		evs := audittest.Events(rng, "shared", d, 40+i*17, "two")
		// Odd events through one gateway, even through the other.
		var odd, even []model.AuditEvent
		for j, e := range evs {
			if j%2 == 1 {
				odd = append(odd, e)
			} else {
				even = append(even, e)
			}
		}
		audittest.Write(ctx, t, a, tenant, odd)
		audittest.Write(ctx, t, b, tenant, even)
	}
	var wg sync.WaitGroup
	errs := make([]error, 2)
	for i, l := range []*auditlog.Log{la, lb} {
		wg.Go(func() {
			for _, d := range days {
				if _, err := l.Seal(ctx, tenant, "shared", d); err != nil {
					errs[i] = err
					return
				}
			}
		})
	}
	wg.Wait()
	if err := errorsJoin(errs); err != nil {
		t.Fatal(err)
	}
	ra, err := la.Records(ctx, tenant, "shared")
	if err != nil {
		t.Fatal(err)
	}
	rb, err := lb.Records(ctx, tenant, "shared")
	if err != nil {
		t.Fatal(err)
	}
	if len(ra) != 3 || !slices.EqualFunc(ra, rb, func(x, y *auditlog.DayRecord) bool { return x.Checkpoint == y.Checkpoint && x.Size == y.Size }) {
		t.Fatalf("the gateways see different chains: %d vs %d seals", len(ra), len(rb))
	}
	for _, l := range []*auditlog.Log{la, lb} {
		rep, err := l.Verify(ctx, tenant, "shared", days[0], days[2])
		if err != nil || !rep.OK {
			t.Fatalf("verify: %v %+v", err, rep)
		}
	}
	p, err := lb.Inclusion(ctx, tenant, "shared", days[0], "two-"+days[0].String()+"-00003", 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := audittest.OpenNote(string(p.Checkpoint), vkey); err != nil {
		t.Fatal(err)
	}
}

func errorsJoin(errs []error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// TestAuditConflictAcrossGateways stores an event through one gateway and
// resubmits its event_id through another: the same payload is accepted,
// another stream, ts or actor gets a *sink.ConflictError naming it, and
// nothing else of that request is stored.
func TestAuditConflictAcrossGateways(t *testing.T) {
	requireCassandra(t)
	bcfg := buckets.DefaultConfig()
	bcfg.PerWriterSingle = true
	bcfg.Reserve = buckets.DefaultReserve(bcfg)
	a, b := newGateway(t, 1, bcfg), newGateway(t, 2, bcfg)
	tenant := unique(t)
	ctx := context.Background()
	d := model.DayOf(time.Now().UnixMilli())
	ev := model.AuditEvent{EventID: "ev-1", Stream: "s", TS: d.Start() + 1000, Actor: "alice", Action: "login", Outcome: "ok"}
	if err := a.sk.Write(ctx, &sink.Request{Tenant: tenant, Audit: []model.AuditEvent{ev}}); err != nil {
		t.Fatal(err)
	}
	if err := b.sk.Write(ctx, &sink.Request{Tenant: tenant, Audit: []model.AuditEvent{ev}}); err != nil {
		t.Fatalf("identical resubmission: %v", err)
	}
	other := model.AuditEvent{EventID: "ev-2", Stream: "s", TS: d.Start() + 2000, Actor: "bob", Action: "login", Outcome: "ok"}
	for name, mod := range map[string]func(*model.AuditEvent){
		"actor":  func(e *model.AuditEvent) { e.Actor = "mallory" },
		"ts":     func(e *model.AuditEvent) { e.TS++ },
		"stream": func(e *model.AuditEvent) { e.Stream = "t" },
	} {
		changed := ev
		mod(&changed)
		err := b.sk.Write(ctx, &sink.Request{Tenant: tenant, Audit: []model.AuditEvent{other, changed}})
		var ce *sink.ConflictError
		if !errors.As(err, &ce) || ce.EventID != "ev-1" {
			t.Errorf("%s changed: %v, want a *sink.ConflictError naming ev-1", name, err)
		}
	}
	evs, _, err := reader.Audit(ctx, a.st, reader.Query{Tenant: tenant, Series: "s", From: d.Start(), To: d.End(), Limit: 100})
	if err != nil || len(evs) != 1 || evs[0].Actor != "alice" {
		t.Fatalf("stored: %+v %v, want only the first event", evs, err)
	}
}
