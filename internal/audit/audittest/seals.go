package audittest

import (
	"context"
	"encoding/json"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/sluicehq/sluice/internal/audit/auditlog"
	"github.com/sluicehq/sluice/internal/audit/tree"
	"github.com/sluicehq/sluice/internal/model"
	"github.com/sluicehq/sluice/internal/reader"
	"github.com/sluicehq/sluice/internal/retention"
	"github.com/sluicehq/sluice/internal/store"
)

// Opener opens an empty store for one test.
type Opener func(t *testing.T) Store

func export(ctx context.Context, t *testing.T, l *auditlog.Log, keys *auditlog.Keys, origin, tenant, stream string) *auditlog.Export {
	recs, err := l.Records(ctx, tenant, stream)
	if err != nil {
		t.Fatal(err)
	}
	exp := &auditlog.Export{Origin: origin, PublicKeys: keys.Public}
	for _, r := range recs {
		exp.Days = append(exp.Days, *r)
	}
	// Through JSON, as an auditor keeps it.
	b, _ := json.Marshal(exp)
	var out auditlog.Export
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}
	return &out
}

func putRecord(ctx context.Context, t *testing.T, st Store, tenant, stream string, r *auditlog.DayRecord) {
	t.Helper()
	d, _ := model.ParseDay(r.Day)
	b, _ := json.Marshal(r)
	if _, err := st.PutAuditSeal(ctx, store.AuditSeal{Tenant: tenant, Stream: stream, Day: d, Record: b}, true); err != nil {
		t.Fatal(err)
	}
}

// SealTamper checks that altered seals, altered leaf indexes and a removed
// tail are reported.
func SealTamper(t *testing.T, open Opener, tam func(Store) Tamperer) {
	ctx := context.Background()
	tenant, stream := "acme", "seals"
	keys, _ := NewKeys(t, "audit.example.com")
	origin := auditlog.Origin("audit.example.com", tenant, stream)
	firstProblem := func(t *testing.T, l *auditlog.Log, exp *auditlog.Export) auditlog.Problem {
		t.Helper()
		rep, err := l.Verify(ctx, tenant, stream, Base, Base+5)
		if err != nil {
			t.Fatal(err)
		}
		probs := rep.Problems
		if exp != nil {
			recs, err := l.Records(ctx, tenant, stream)
			if err != nil {
				t.Fatal(err)
			}
			more, err := auditlog.CompareExport(exp, recs)
			if err != nil {
				t.Fatal(err)
			}
			probs = append(probs, more...)
		}
		if len(probs) == 0 {
			t.Fatal("tamper not detected")
		}
		return probs[0]
	}
	setup := func(t *testing.T) (Store, *auditlog.Log, *sealed, *auditlog.Export) {
		st := open(t)
		l := NewLog(st, keys, Now())
		s := Build(ctx, t, st, l, tenant, stream, []int{5, 8, 3}, rand.New(rand.NewPCG(5, 6)))
		return st, l, s, export(ctx, t, l, keys, origin, tenant, stream)
	}
	t.Run("frontier", func(t *testing.T) {
		st, l, _, _ := setup(t)
		recs, _ := l.Records(ctx, tenant, stream)
		r := recs[1]
		r.Frontier[0][3] ^= 1
		putRecord(ctx, t, st, tenant, stream, r)
		if p := firstProblem(t, l, nil); p.Kind != auditlog.KindSeal || p.Day != r.Day {
			t.Fatalf("reported %s", p)
		}
	})
	t.Run("forged checkpoint", func(t *testing.T) {
		st, l, _, _ := setup(t)
		recs, _ := l.Records(ctx, tenant, stream)
		r := recs[2]
		other, _ := NewKeys(t, "audit.example.com")
		cp, err := auditlog.SignCheckpoint(tree.Checkpoint{Origin: origin, Size: r.Size + 1, Root: tree.Hash{1}}, other.Signer)
		if err != nil {
			t.Fatal(err)
		}
		r.Checkpoint = string(cp)
		putRecord(ctx, t, st, tenant, stream, r)
		if p := firstProblem(t, l, nil); p.Kind != auditlog.KindSeal || p.Day != r.Day {
			t.Fatalf("reported %s", p)
		}
	})
	t.Run("leaf index", func(t *testing.T) {
		st, l, s, _ := setup(t)
		d := s.days[1]
		var leaves []store.AuditLeaf
		for _, e := range s.events[d] {
			leaves = append(leaves, store.AuditLeaf{TS: e.TS, EventID: e.EventID, Hash: LeafHash(Canonical(e))})
		}
		leaves[4].Hash[0] ^= 1
		// Written again over the sealed day's leaves, as a seal writes them.
		lw, err := st.AuditLeafWriter(ctx, tenant, stream, d)
		if err != nil {
			t.Fatal(err)
		}
		if err := lw.Put(ctx, 0, leaves); err != nil {
			t.Fatal(err)
		}
		if err := lw.Commit(ctx); err != nil {
			t.Fatal(err)
		}
		if p := firstProblem(t, l, nil); p.Kind != auditlog.KindIndex || p.Day != d.String() {
			t.Fatalf("reported %s", p)
		}
	})
	t.Run("seal removed, events kept", func(t *testing.T) {
		st, l, s, _ := setup(t)
		d := s.days[2]
		if err := tam(st).DeleteSeal(ctx, tenant, stream, d); err != nil {
			t.Fatal(err)
		}
		if p := firstProblem(t, l, nil); p.Kind != auditlog.KindUnsealed || p.Day != d.String() {
			t.Fatalf("reported %s", p)
		}
	})
	t.Run("middle seal removed", func(t *testing.T) {
		st, l, s, _ := setup(t)
		d := s.days[1]
		if err := tam(st).DeleteSeal(ctx, tenant, stream, d); err != nil {
			t.Fatal(err)
		}
		if p := firstProblem(t, l, nil); p.Day != d.String() || p.Kind != auditlog.KindUnsealed {
			t.Fatalf("reported %s", p)
		}
	})
	t.Run("first seal removed", func(t *testing.T) {
		st, l, s, _ := setup(t)
		if err := tam(st).DeleteSeal(ctx, tenant, stream, s.days[0]); err != nil {
			t.Fatal(err)
		}
		if p := firstProblem(t, l, nil); p.Day != s.days[1].String() || p.Kind != auditlog.KindSeal {
			t.Fatalf("reported %s", p)
		}
	})
	t.Run("tail truncated", func(t *testing.T) {
		st, l, s, exp := setup(t)
		d := s.days[2]
		if err := tam(st).DeleteSeal(ctx, tenant, stream, d); err != nil {
			t.Fatal(err)
		}
		for _, e := range s.events[d] {
			if err := tam(st).DeleteEvent(ctx, tenant, e); err != nil {
				t.Fatal(err)
			}
		}
		// Without the auditor's copy the log looks whole: the tail is gone
		// with its seal. The exported checkpoints show it.
		if rep, err := l.Verify(ctx, tenant, stream, Base, Base+5); err != nil || !rep.OK {
			t.Fatalf("verify without export: %v %+v", err, rep)
		}
		p := firstProblem(t, l, exp)
		if p.Kind != auditlog.KindTruncated || p.Day != d.String() || p.Index == nil || *p.Index != s.start[d] {
			t.Fatalf("reported %s", p)
		}
	})
}

// Retention checks that dropping old days keeps the rest verifiable and
// provable, and that the dropped days are reported as dropped.
func Retention(t *testing.T, open Opener) {
	ctx := context.Background()
	tenant, stream := "acme", "kept"
	st := open(t)
	rs, ok := st.(retention.Store)
	if !ok {
		t.Fatalf("%T cannot drop buckets", st)
	}
	keys, vkey := NewKeys(t, "audit.example.com")
	l := NewLog(st, keys, Now())
	rng := rand.New(rand.NewPCG(7, 8))
	s := Build(ctx, t, st, l, tenant, stream, []int{4, 6, 5, 7}, rng)
	// A day written but never sealed is sealed before it is dropped.
	late := Events(rng, "unsealed", Base, 3, "u")
	Write(ctx, t, st, tenant, late)
	wrapped := l.Retention(rs)
	for _, d := range s.days[:2] {
		b := store.Bucket{Kind: store.BucketAudit, Tenant: tenant, Day: d}
		if _, err := wrapped.DropData(ctx, b); err != nil {
			t.Fatal(err)
		}
		if _, err := wrapped.DropCatalogue(ctx, b); err != nil {
			t.Fatal(err)
		}
	}
	evs, _, err := reader.Audit(ctx, st, reader.Query{Tenant: tenant, Series: stream, From: Base.Start(), To: (Base + 10).Start(), Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	if want := len(s.events[s.days[2]]) + len(s.events[s.days[3]]); len(evs) != want {
		t.Fatalf("%d events left after the drop, want %d", len(evs), want)
	}
	rep, err := l.Verify(ctx, tenant, stream, Base, Base+10)
	if err != nil || !rep.OK {
		t.Fatalf("verify after retention: %v %+v", err, rep)
	}
	var statuses []string
	for _, d := range rep.Days {
		statuses = append(statuses, d.Status)
	}
	if !slices.Equal(statuses, []string{"dropped", "dropped", "ok", "ok"}) {
		t.Fatalf("day statuses %v", statuses)
	}
	recs, _ := l.Records(ctx, tenant, stream)
	if probs := auditlog.CheckChain(auditlog.Origin("audit.example.com", tenant, stream), recs, keys.Verifiers); len(probs) > 0 {
		t.Fatalf("chain after retention: %v", probs)
	}
	// Retained events are still provable against the latest checkpoint,
	// and the latest extends the first retained day's checkpoint.
	for _, d := range s.days[2:] {
		for j, e := range s.events[d] {
			p, err := l.Inclusion(ctx, tenant, stream, d, e.EventID, 0)
			if err != nil {
				t.Fatal(err)
			}
			checkInclusion(t, p.Marshal(), vkey, e, s.start[d]+int64(j))
		}
	}
	if _, err := l.Consistency(ctx, tenant, stream, recs[2].Size, 0); err != nil {
		t.Fatal(err)
	}
	// The day never sealed before its drop was sealed, then dropped.
	urecs, err := l.Records(ctx, tenant, "unsealed")
	if err != nil || len(urecs) != 1 || urecs[0].DroppedAt == nil || urecs[0].Events() != 3 {
		t.Fatalf("seal of the unsealed stream: %v %+v", err, urecs)
	}
}
