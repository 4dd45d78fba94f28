package pebblestore

import (
	"context"
	"io"
	"log/slog"
	"math/rand/v2"
	"testing"

	"github.com/sluicehq/sluice/internal/audit/auditlog"
	"github.com/sluicehq/sluice/internal/audit/audittest"
	"github.com/sluicehq/sluice/internal/model"
)

// tamperer edits events in the database directly, as an operator with
// store access could.
type tamperer struct{ s *Store }

func (tm tamperer) key(tenant string, e model.AuditEvent) []byte {
	pk := model.PartitionKey{Kind: model.KindAudit, Tenant: tenant, Series: e.Stream, Day: model.DayOf(e.TS)}
	return append(appendTS(partitionPrefix(nil, pk), e.TS), e.EventID...)
}

func (tm tamperer) SetEvent(_ context.Context, tenant string, e model.AuditEvent) error {
	return tm.s.db.Set(tm.key(tenant, e), encodeAudit(nil, e), nil)
}

func (tm tamperer) DeleteEvent(_ context.Context, tenant string, e model.AuditEvent) error {
	return tm.s.db.Delete(tm.key(tenant, e), nil)
}

func openAuditStore(t *testing.T) *Store {
	t.Helper()
	st, err := Open(t.TempDir(), Options{NoSync: true}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	return st
}

func (tm tamperer) DeleteSeal(_ context.Context, tenant, stream string, d model.Day) error {
	return tm.s.db.Delete(appendDay(sealPrefix(nil, tenant, stream), d), nil)
}

func TestAuditLogProofs(t *testing.T) {
	ctx := context.Background()
	st := openAuditStore(t)
	keys, vkey := audittest.NewKeys(t, "audit.example.com")
	l := audittest.NewLog(st, keys, audittest.Now())
	rng := rand.New(rand.NewPCG(1, 2))
	s := audittest.Build(ctx, t, st, l, "acme", "billing", []int{1, 0, 7, 64, 33, 2}, rng)
	// A second stream of the same tenant has a log of its own.
	audittest.Build(ctx, t, st, l, "acme", "other", []int{3}, rng)
	audittest.ProveAll(ctx, t, l, vkey, "acme", "billing", s)
	rep, err := l.Verify(ctx, "acme", "billing", audittest.Base, audittest.Base+10)
	if err != nil || !rep.OK {
		t.Fatalf("verify: %v %+v", err, rep)
	}
}

func TestAuditLogTamperDetection(t *testing.T) {
	ctx := context.Background()
	st := openAuditStore(t)
	keys, _ := audittest.NewKeys(t, "audit.example.com")
	l := audittest.NewLog(st, keys, audittest.Now())
	rng := rand.New(rand.NewPCG(3, 4))
	s := audittest.Build(ctx, t, st, l, "acme", "billing", []int{1, 40, 2, 90}, rng)
	n := 2000
	if testing.Short() {
		n = 300
	}
	audittest.Tamper(ctx, t, st, tamperer{st}, l, "acme", "billing", s, n, rng)
}

func TestAuditLogSealTamper(t *testing.T) {
	audittest.SealTamper(t, func(t *testing.T) audittest.Store { return openAuditStore(t) },
		func(st audittest.Store) audittest.Tamperer { return tamperer{st.(*Store)} })
}

func TestAuditLogRetention(t *testing.T) {
	audittest.Retention(t, func(t *testing.T) audittest.Store { return openAuditStore(t) })
}

var _ auditlog.Store = (*Store)(nil)
