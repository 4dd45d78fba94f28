package pebblestore

import (
	"context"
	"io"
	"log/slog"
	"math/rand/v2"
	"sync"
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

// TestAuditSealConsistencyLargeDays checks the consistency proof each seal
// stores, with the independent verifier, on days large enough that the
// seal hashes the proof's subtrees from the blocks of 256 leaves it kept,
// starting at offsets that are not a multiple of 256.
func TestAuditSealConsistencyLargeDays(t *testing.T) {
	ctx := context.Background()
	st := openAuditStore(t)
	keys, vkey := audittest.NewKeys(t, "audit.example.com")
	l := audittest.NewLog(st, keys, audittest.Now())
	rng := rand.New(rand.NewPCG(3, 4))
	audittest.Build(ctx, t, st, l, "acme", "big", []int{1000, 300, 2100, 5}, rng)
	recs, err := l.Records(ctx, "acme", "big")
	if err != nil || len(recs) != 4 {
		t.Fatalf("records: %d, %v", len(recs), err)
	}
	for i := 1; i < len(recs); i++ {
		old, err := audittest.OpenNote(recs[i-1].Checkpoint, vkey)
		if err != nil {
			t.Fatal(err)
		}
		cur, err := audittest.OpenNote(recs[i].Checkpoint, vkey)
		if err != nil {
			t.Fatal(err)
		}
		var path [][]byte
		for _, h := range recs[i].Consistency {
			path = append(path, h[:])
		}
		if err := audittest.VerifyConsistency(old.Size, cur.Size, old.Root, cur.Root, path); err != nil {
			t.Errorf("seal of %s: its consistency proof from %d to %d: %v", recs[i].Day, old.Size, cur.Size, err)
		}
	}
}

// pagedStore hides EachAudit: the audit log then reads a day through the
// read API's pages, as it does on Cassandra.
type pagedStore struct{ auditlog.Store }

// TestAuditLogPagedAndStreamed seals a day of more than one page of events
// through each way of reading it and verifies it through the other: both
// must read the same events in the same order.
func TestAuditLogPagedAndStreamed(t *testing.T) {
	ctx := context.Background()
	st := openAuditStore(t)
	keys, _ := audittest.NewKeys(t, "audit.example.com")
	streamed := audittest.NewLog(st, keys, audittest.Now())
	paged := audittest.NewLog(pagedStore{st}, keys, audittest.Now())
	rng := rand.New(rand.NewPCG(5, 6))
	const n = 12_345 // more than reader.MaxLimit
	for _, tc := range []struct {
		stream         string
		seal, checkRec *auditlog.Log
	}{
		{"by-pages", paged, streamed},
		{"streamed", streamed, paged},
	} {
		audittest.Write(ctx, t, st, "acme", audittest.Events(rng, tc.stream, audittest.Base, n, tc.stream))
		rec, err := tc.seal.Seal(ctx, "acme", tc.stream, audittest.Base)
		if err != nil || rec == nil || rec.Events() != n {
			t.Fatalf("%s: seal: %v, %+v", tc.stream, err, rec)
		}
		rep, err := tc.checkRec.Verify(ctx, "acme", tc.stream, audittest.Base, audittest.Base)
		if err != nil || !rep.OK {
			t.Fatalf("%s: verify through the other reader: %v %+v", tc.stream, err, rep)
		}
	}
}

// Two seals of one day at once in one process (the sealer's round and
// retention's seal before a drop) write the day's leaves once: the second
// finds the first one's record.
func TestAuditSealsOfOneDaySerialised(t *testing.T) {
	ctx := context.Background()
	st := openAuditStore(t)
	keys, _ := audittest.NewKeys(t, "audit.example.com")
	l := audittest.NewLog(st, keys, audittest.Now())
	d := audittest.Base
	audittest.Write(ctx, t, st, "acme", audittest.Events(rand.New(rand.NewPCG(5, 6)), "ops", d, 3000, "ops"))
	recs := make(chan *auditlog.DayRecord, 2)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for range 2 {
		wg.Go(func() {
			<-start
			rec, err := l.Seal(ctx, "acme", "ops", d)
			if err != nil {
				t.Error(err)
			}
			recs <- rec
		})
	}
	close(start)
	wg.Wait()
	a, b := <-recs, <-recs
	if a == nil || b == nil || a.Checkpoint != b.Checkpoint {
		t.Fatalf("the two seals returned different records: %+v, %+v", a, b)
	}
	if n := st.db.Metrics().Ingest.Count; n != 1 {
		t.Fatalf("the day's leaves were written %d times, want once", n)
	}
}
