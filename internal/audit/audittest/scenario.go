package audittest

import (
	"context"
	"encoding/base64"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/audit/auditlog"
	"github.com/sluicehq/sluice/internal/audit/canon"
	"github.com/sluicehq/sluice/internal/model"
	"github.com/sluicehq/sluice/internal/store"
)

// Store is a backend under test.
type Store interface {
	auditlog.Store
	Commit(ctx context.Context, b *store.Batch) error
}

// Tamperer changes a backend's stored events behind Sluice's back.
type Tamperer interface {
	// SetEvent writes e in sub-bucket 0 of its stream-day, replacing the
	// event with the same (ts, event_id).
	SetEvent(ctx context.Context, tenant string, e model.AuditEvent) error
	// DeleteEvent deletes one stored event.
	DeleteEvent(ctx context.Context, tenant string, e model.AuditEvent) error
	// DeleteSeal deletes the seal record of a stream-day.
	DeleteSeal(ctx context.Context, tenant, stream string, d model.Day) error
}

// Base is the first day of the scenarios.
var Base = model.Day(20400) // 2025-11-08

// Now is the clock of the scenarios: every scenario day is due for sealing.
func Now() time.Time { return time.UnixMilli((Base + 40).Start()) }

// Config is the audit configuration of the scenarios.
func Config() auditlog.Config {
	c := auditlog.DefaultConfig()
	c.Enabled = true
	return c
}

// NewKeys returns fresh signing keys and the verifier key.
func NewKeys(t testing.TB, name string) (*auditlog.Keys, string) {
	t.Helper()
	skey, vkey, err := auditlog.GenerateKey(name)
	if err != nil {
		t.Fatal(err)
	}
	k, err := auditlog.ParseKeys(skey, nil)
	if err != nil {
		t.Fatal(err)
	}
	return k, vkey
}

// NewLog returns a Log over st whose clock is now.
func NewLog(st auditlog.Store, keys *auditlog.Keys, now time.Time) *auditlog.Log {
	return auditlog.New(Config(), st, keys, func() time.Time { return now }, slog.New(slog.NewTextHandler(io.Discard, nil)), nil)
}

// Write commits events of one tenant in one batch, each stream-day in
// sub-bucket 0 with a catalogue entry covering the whole day.
func Write(ctx context.Context, t testing.TB, st Store, tenant string, evs []model.AuditEvent) {
	t.Helper()
	byPart := make(map[model.PartitionKey][]model.AuditEvent)
	var keys []model.PartitionKey
	for _, e := range evs {
		pk := model.PartitionKey{Kind: model.KindAudit, Tenant: tenant, Series: e.Stream, Day: model.DayOf(e.TS)}
		if _, ok := byPart[pk]; !ok {
			keys = append(keys, pk)
		}
		byPart[pk] = append(byPart[pk], e)
	}
	var b store.Batch
	for _, pk := range keys {
		b.Partitions = append(b.Partitions, store.PartitionWrite{Key: pk, Events: byPart[pk]})
		b.Catalogue = append(b.Catalogue, model.PartitionInfo{Key: pk, Rows: 1 << 20, Bytes: 1 << 30,
			MinTS: pk.Day.Start(), MaxTS: pk.Day.End() - 1, State: "single"})
	}
	b.Version = time.Now().UnixMicro()
	if err := st.Commit(ctx, &b); err != nil {
		t.Fatal(err)
	}
}

// sealed is a scenario's log as the test knows it.
type sealed struct {
	days   []model.Day
	events map[model.Day][]model.AuditEvent
	start  map[model.Day]int64
}

// Build writes days of events of one stream and seals them.
func Build(ctx context.Context, t testing.TB, st Store, l *auditlog.Log, tenant, stream string, counts []int, rng *rand.Rand) *sealed {
	t.Helper()
	s := &sealed{events: make(map[model.Day][]model.AuditEvent), start: make(map[model.Day]int64)}
	var size int64
	for i, n := range counts {
		d := Base + model.Day(i)
		evs := Events(rng, stream, d, n, stream)
		Write(ctx, t, st, tenant, evs)
		rec, err := l.Seal(ctx, tenant, stream, d)
		if err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			if rec != nil {
				t.Fatalf("day %s without events sealed", d)
			}
			continue
		}
		if rec == nil || rec.Start != size || rec.Events() != int64(n) {
			t.Fatalf("seal of %s: %+v, want start %d and %d events", d, rec, size, n)
		}
		s.days = append(s.days, d)
		s.events[d] = evs
		s.start[d] = size
		size += int64(n)
	}
	return s
}

// op is one kind of tamper.
type op int

const (
	opFlip op = iota
	opDelete
	opInsert
	opSwap
	opAttr
	opTruncate
	opMove
	numOps
)

func (o op) String() string {
	return [...]string{"flip", "delete", "insert", "swap", "attribute", "truncate", "move"}[o]
}

// allowed lists the kinds verify may report for each tamper.
var allowed = map[op][]string{
	opFlip:     {auditlog.KindChanged},
	opDelete:   {auditlog.KindMissing, auditlog.KindTruncated},
	opInsert:   {auditlog.KindInserted},
	opSwap:     {auditlog.KindChanged},
	opAttr:     {auditlog.KindChanged},
	opTruncate: {auditlog.KindTruncated},
	opMove:     {auditlog.KindInserted, auditlog.KindMissing, auditlog.KindReordered, auditlog.KindTruncated},
}

// Tamper applies n random tampers to a sealed stream, one at a time, and
// checks that verify reports each one with the exact first bad leaf, then
// undoes it and checks that verify reports nothing (no false positive).
func Tamper(ctx context.Context, t *testing.T, st Store, tam Tamperer, l *auditlog.Log, tenant, stream string, s *sealed, n int, rng *rand.Rand) {
	t.Helper()
	from, to := s.days[0], s.days[len(s.days)-1]
	verifyDays := func(from, to model.Day) *auditlog.Report {
		rep, err := l.Verify(ctx, tenant, stream, from, to)
		if err != nil {
			t.Fatalf("verify: %v", err)
		}
		return rep
	}
	verify := func() *auditlog.Report { return verifyDays(from, to) }
	if rep := verify(); !rep.OK {
		t.Fatalf("untampered log does not verify: %v", rep.Problems)
	}
	counts := make(map[op]int)
	for i := range n {
		d := s.days[rng.IntN(len(s.days))]
		orig := s.events[d]
		o := op(rng.IntN(int(numOps)))
		if len(orig) < 2 && (o == opSwap) {
			o = opFlip
		}
		tampered := slices.Clone(orig)
		var set, del []model.AuditEvent // applied to the store
		var undoSet, undoDel []model.AuditEvent
		k := rng.IntN(len(orig))
		switch o {
		case opFlip:
			e := orig[k]
			f := []*string{&e.Actor, &e.Action, &e.Resource, &e.Outcome}[rng.IntN(4)]
			b := []byte(*f)
			j := rng.IntN(len(b))
			b[j] ^= 1 << rng.IntN(7)
			*f = string(b)
			tampered[k] = e
			set, undoSet = []model.AuditEvent{e}, []model.AuditEvent{orig[k]}
		case opAttr:
			e := orig[k]
			for string(e.Attributes) == string(orig[k].Attributes) {
				e.Attributes = RandomAttributes(rng)
			}
			tampered[k] = e
			set, undoSet = []model.AuditEvent{e}, []model.AuditEvent{orig[k]}
		case opDelete:
			tampered = slices.Delete(tampered, k, k+1)
			del, undoSet = []model.AuditEvent{orig[k]}, []model.AuditEvent{orig[k]}
		case opTruncate:
			m := 1 + rng.IntN(min(len(orig), 5))
			tampered = tampered[:len(orig)-m]
			del = slices.Clone(orig[len(orig)-m:])
			undoSet = del
		case opInsert:
			e := Events(rng, stream, d, 1, fmt.Sprintf("x%d", i))[0]
			tampered = append(tampered, e)
			SortEvents(tampered)
			set, undoDel = []model.AuditEvent{e}, []model.AuditEvent{e}
		case opSwap:
			j := rng.IntN(len(orig) - 1)
			if j >= k {
				j++
			}
			a, b := orig[k], orig[j]
			na, nb := b, a
			na.TS, na.EventID = a.TS, a.EventID
			nb.TS, nb.EventID = b.TS, b.EventID
			tampered[k], tampered[j] = na, nb
			set, undoSet = []model.AuditEvent{na, nb}, []model.AuditEvent{a, b}
			if canon.Equal(&na, &a) {
				continue // identical payloads: nothing changed
			}
		case opMove:
			e := orig[k]
			moved := e
			moved.TS = d.Start() + rng.Int64N(model.MillisPerDay)
			if moved.TS == e.TS {
				continue
			}
			tampered = slices.Delete(tampered, k, k+1)
			tampered = append(tampered, moved)
			SortEvents(tampered)
			del, set = []model.AuditEvent{e}, []model.AuditEvent{moved}
			undoDel, undoSet = []model.AuditEvent{moved}, []model.AuditEvent{e}
		}
		apply := func(sets, dels []model.AuditEvent) {
			for _, e := range dels {
				if err := tam.DeleteEvent(ctx, tenant, e); err != nil {
					t.Fatal(err)
				}
			}
			for _, e := range sets {
				if err := tam.SetEvent(ctx, tenant, e); err != nil {
					t.Fatal(err)
				}
			}
		}
		apply(set, del)
		rep := verifyDays(d, d)
		want := firstDiff(orig, tampered)
		if rep.OK || len(rep.Problems) == 0 {
			t.Fatalf("tamper %d (%s of %s event %d) not detected", i, o, d, k)
		}
		p := rep.Problems[0]
		if p.Day != d.String() || p.Index == nil || *p.Index != s.start[d]+int64(want) || !slices.Contains(allowed[o], p.Kind) {
			t.Fatalf("tamper %d (%s of %s event %d): first bad leaf should be %d (a %v), verify reported %s", i, o, d, k, s.start[d]+int64(want), allowed[o], p)
		}
		if wantID := idAt(orig, tampered, want, p.Kind); p.EventID != wantID {
			t.Fatalf("tamper %d (%s): reported event %q, want %q (%s)", i, o, p.EventID, wantID, p)
		}
		apply(undoSet, undoDel)
		if i%10 == 0 || o == opMove || o == opInsert {
			if rep := verify(); !rep.OK {
				t.Fatalf("after undoing tamper %d (%s), verify reports %v", i, o, rep.Problems)
			}
		}
		counts[o]++
	}
	if rep := verify(); !rep.OK {
		t.Fatalf("after all tampers, verify reports %v", rep.Problems)
	}
	t.Logf("tampers detected exactly: %v", counts)
}

// firstDiff is the first position where the sealed and the tampered
// sequences differ, by their independent canonical forms.
func firstDiff(a, b []model.AuditEvent) int {
	n := min(len(a), len(b))
	for i := range n {
		if string(Canonical(a[i])) != string(Canonical(b[i])) {
			return i
		}
	}
	return n
}

// idAt is the event a report of kind names at position i.
func idAt(orig, tampered []model.AuditEvent, i int, kind string) string {
	switch kind {
	case auditlog.KindMissing, auditlog.KindTruncated:
		return orig[i].EventID
	}
	return tampered[i].EventID
}

// ProveAll checks every event's inclusion proof (against its day's
// checkpoint and the latest) and every pair of checkpoints' consistency
// proof with the independent verifier.
func ProveAll(ctx context.Context, t *testing.T, l *auditlog.Log, vkey, tenant, stream string, s *sealed) {
	t.Helper()
	recs, err := l.Records(ctx, tenant, stream)
	if err != nil {
		t.Fatal(err)
	}
	cps := make([]Checkpoint, len(recs))
	var all [][32]byte
	for i, r := range recs {
		if cps[i], err = OpenNote(r.Checkpoint, vkey); err != nil {
			t.Fatalf("checkpoint of %s: %v", r.Day, err)
		}
		d, _ := model.ParseDay(r.Day)
		for _, e := range s.events[d] {
			all = append(all, LeafHash(Canonical(e)))
		}
		if cps[i].Size != int64(len(all)) || cps[i].Root != Root(all) {
			t.Fatalf("checkpoint of %s: size %d root %x, independently %d %x", r.Day, cps[i].Size, cps[i].Root, len(all), Root(all))
		}
		if want := auditlog.Origin(strings.SplitN(vkey, "+", 2)[0], tenant, stream); cps[i].Origin != want {
			t.Fatalf("origin %q, want %q", cps[i].Origin, want)
		}
	}
	for _, r := range recs {
		d, _ := model.ParseDay(r.Day)
		for j, e := range s.events[d] {
			for _, size := range []int64{r.Size, 0} {
				p, err := l.Inclusion(ctx, tenant, stream, d, e.EventID, size)
				if err != nil {
					t.Fatal(err)
				}
				checkInclusion(t, p.Marshal(), vkey, e, s.start[d]+int64(j))
			}
		}
	}
	for i := range recs {
		for j := i; j < len(recs); j++ {
			p, err := l.Consistency(ctx, tenant, stream, recs[i].Size, recs[j].Size)
			if err != nil {
				t.Fatal(err)
			}
			text := string(p.Marshal())
			head, note, _ := strings.Cut(text, "\n\n")
			lines := strings.Split(head, "\n")
			if lines[0] != fmt.Sprintf("old %d", recs[i].Size) {
				t.Fatalf("consistency proof starts %q", lines[0])
			}
			path, err := ParseProofLines(lines[1:])
			if err != nil {
				t.Fatal(err)
			}
			nc, err := OpenNote(note, vkey)
			if err != nil {
				t.Fatal(err)
			}
			if err := VerifyConsistency(cps[i].Size, nc.Size, cps[i].Root, nc.Root, path); err != nil {
				t.Fatalf("consistency %d -> %d: %v", cps[i].Size, nc.Size, err)
			}
		}
	}
}

func base64Std(b []byte) string { return base64.StdEncoding.EncodeToString(b) }

func checkInclusion(t *testing.T, proof []byte, vkey string, e model.AuditEvent, index int64) {
	t.Helper()
	head, note, ok := strings.Cut(string(proof), "\n\n")
	if !ok {
		t.Fatal("no checkpoint in proof")
	}
	lines := strings.Split(head, "\n")
	if lines[0] != "c2sp.org/tlog-proof@v1" || lines[2] != fmt.Sprintf("index %d", index) {
		t.Fatalf("proof header %q", lines[:3])
	}
	if want := "extra " + base64Std(Canonical(e)); lines[1] != want {
		t.Fatalf("proof extra %q, want %q", lines[1], want)
	}
	path, err := ParseProofLines(lines[3:])
	if err != nil {
		t.Fatal(err)
	}
	cp, err := OpenNote(note, vkey)
	if err != nil {
		t.Fatal(err)
	}
	if err := VerifyInclusion(index, cp.Size, LeafHash(Canonical(e)), path, cp.Root); err != nil {
		t.Fatalf("event %s (leaf %d of %d): %v", e.EventID, index, cp.Size, err)
	}
}
