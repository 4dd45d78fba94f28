package auditlog

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"golang.org/x/mod/sumdb/note"

	"github.com/sluicehq/sluice/internal/audit/canon"
	"github.com/sluicehq/sluice/internal/audit/tree"
	"github.com/sluicehq/sluice/internal/model"
	"github.com/sluicehq/sluice/internal/store"
)

// Problem kinds, in the words verify reports.
const (
	KindChanged   = "changed"   // the event at this position differs from the sealed one
	KindMissing   = "missing"   // a sealed event is not stored
	KindInserted  = "inserted"  // a stored event was never sealed
	KindReordered = "reordered" // a sealed event is stored at another position
	KindTruncated = "truncated" // the day, or the log, ends early
	KindSeal      = "seal"      // a seal record is invalid or does not match the exported checkpoints
	KindIndex     = "index"     // the day's stored leaves do not match its signed checkpoint
	KindUnsealed  = "unsealed"  // a day past its seal time has events but no seal
)

// Problem is one finding of Verify.
type Problem struct {
	Day     string `json:"day"`
	Kind    string `json:"kind"`
	Index   *int64 `json:"index,omitempty"` // leaf index in the stream's tree
	EventID string `json:"event_id,omitempty"`
	TS      *int64 `json:"ts,omitempty"`
	Detail  string `json:"detail"`
}

func (p Problem) String() string {
	s := p.Day + ": " + p.Kind
	if p.EventID != "" {
		s += fmt.Sprintf(" event %q", p.EventID)
	}
	if p.Index != nil {
		s += fmt.Sprintf(" (leaf %d)", *p.Index)
	}
	return s + ": " + p.Detail
}

// DayStatus is what Verify found of one day.
type DayStatus struct {
	Day    string `json:"day"`
	Status string `json:"status"` // ok, bad, dropped (by retention), unsealed (not due yet), outside (before the log began)
	Start  int64  `json:"start,omitempty"`
	Size   int64  `json:"size,omitempty"`
	Events int64  `json:"events"`
}

// Report is Verify's answer. Problems are in log order: the first is the
// first bad event or seal.
type Report struct {
	Origin   string      `json:"origin"`
	Days     []DayStatus `json:"days"`
	Problems []Problem   `json:"problems"`
	OK       bool        `json:"ok"`
}

// Verify checks the seal chain of a stream and recomputes the days from
// from to to (inclusive) from the stored events: every seal's signature,
// origin, frontier and consistency with the previous one; every day's
// stored leaves against its signed root; every stored event against its
// leaf. The first problem of each day is reported, with the event.
func (l *Log) Verify(ctx context.Context, tenant, name string, from, to model.Day) (*Report, error) {
	recs, err := l.Records(ctx, tenant, name)
	if err != nil {
		return nil, err
	}
	return l.verify(ctx, tenant, name, recs, from, to)
}

// verify is Verify over the stream's seal records, read by the caller.
func (l *Log) verify(ctx context.Context, tenant, name string, recs []*DayRecord, from, to model.Day) (*Report, error) {
	rep := &Report{Origin: l.origin(tenant, name)}
	rep.Problems = CheckChain(rep.Origin, recs, l.keys.Verifiers)
	byDay := make(map[model.Day]int, len(recs))
	for i, r := range recs {
		byDay[r.day] = i
	}
	var firstSealed, lastSealed model.Day = 1 << 30, -1 << 30
	if len(recs) > 0 {
		firstSealed, lastSealed = recs[0].day, recs[len(recs)-1].day
	}
	overdue := l.LastSealable(l.now().Add(-2 * l.cfg.CheckpointInterval))
	for d := from; d <= to; d++ {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		i, sealed := byDay[d]
		if !sealed {
			// Days before the log began are outside it (removing the first
			// seal shows in the next one's start); days between seals, or
			// past their seal time after the last, should have a seal.
			should := d > firstSealed && (d < lastSealed || d <= overdue)
			st, p, err := l.verifyUnsealed(ctx, tenant, name, d, should)
			if err != nil {
				return nil, err
			}
			if st.Events > 0 || p != nil {
				rep.Days = append(rep.Days, st)
			}
			if p != nil {
				rep.Problems = append(rep.Problems, *p)
			}
			continue
		}
		r := recs[i]
		if r.DroppedAt != nil {
			rep.Days = append(rep.Days, DayStatus{Day: r.Day, Status: "dropped", Start: r.Start, Size: r.Size, Events: r.Events()})
			continue
		}
		prev := tree.Frontier{}
		if i > 0 {
			pf := recs[i-1].frontier()
			prev = pf.Clone()
		}
		st, ps, err := l.verifyDay(ctx, tenant, name, r, prev)
		if err != nil {
			return nil, err
		}
		rep.Days = append(rep.Days, st)
		rep.Problems = append(rep.Problems, ps...)
	}
	slices.SortStableFunc(rep.Problems, func(a, b Problem) int {
		if a.Day != b.Day {
			if a.Day < b.Day {
				return -1
			}
			return 1
		}
		return 0
	})
	rep.OK = len(rep.Problems) == 0
	return rep, nil
}

// CheckChain checks the seal records of a stream, in day order: each
// checkpoint signed by a known key, for origin, of the record's size, with
// the frontier's root, consistent with the previous one by the stored
// proof, and each day starting where the previous one ended.
func CheckChain(origin string, recs []*DayRecord, known note.Verifiers) []Problem {
	var out []Problem
	var prevSize int64
	prevRoot := tree.EmptyRoot
	var prevDay string
	for _, r := range recs {
		bad := func(format string, args ...any) {
			out = append(out, Problem{Day: r.Day, Kind: KindSeal, Detail: fmt.Sprintf(format, args...)})
		}
		if prevDay != "" && r.Day <= prevDay {
			bad("seal out of day order after %s", prevDay)
		}
		prevDay = r.Day
		cp, err := OpenCheckpoint([]byte(r.Checkpoint), known)
		if err != nil {
			bad("checkpoint: %v", err)
			prevSize, prevRoot = r.Size, tree.Hash{}
			continue
		}
		f := r.frontier()
		switch {
		case cp.Origin != origin:
			bad("checkpoint is for origin %q, not %q", cp.Origin, origin)
		case cp.Size != r.Size:
			bad("checkpoint size %d, seal size %d", cp.Size, r.Size)
		case r.Start != prevSize:
			bad("day starts at leaf %d, the previous seal ended at %d (seals removed or altered)", r.Start, prevSize)
		case r.Size <= r.Start:
			bad("empty day (start %d, size %d)", r.Start, r.Size)
		case !f.Valid() || f.Root() != cp.Root:
			bad("frontier does not hash to the checkpoint's root")
		default:
			if prevRoot != (tree.Hash{}) {
				if err := tree.CheckConsistency(r.Consistency, prevSize, prevRoot, r.Size, cp.Root); err != nil {
					bad("not consistent with the previous checkpoint: %v", err)
				}
			}
		}
		prevSize, prevRoot = r.Size, cp.Root
	}
	return out
}

// verifyDay recomputes one sealed day.
func (l *Log) verifyDay(ctx context.Context, tenant, name string, r *DayRecord, prev tree.Frontier) (DayStatus, []Problem, error) {
	st := DayStatus{Day: r.Day, Status: "ok", Start: r.Start, Size: r.Size}
	var want []store.AuditLeaf
	err := l.st.AuditLeaves(ctx, tenant, name, r.day, func(lf store.AuditLeaf) error {
		if int64(len(want)) < r.Events() {
			want = append(want, lf)
		}
		return nil
	})
	if err != nil {
		return st, nil, err
	}
	var got []store.AuditLeaf
	var hasher canon.Hasher
	err = eachEvent(ctx, l.st, tenant, name, r.day, func(e *model.AuditEvent) error {
		got = append(got, store.AuditLeaf{TS: e.TS, EventID: strings.Clone(e.EventID), Hash: hasher.EventHash(e)})
		return nil
	})
	if err != nil {
		return st, nil, err
	}
	st.Events = int64(len(got))
	var probs []Problem
	cp, cerr := tree.ParseCheckpoint(checkpointText(r.Checkpoint))
	root := func(ls []store.AuditLeaf) tree.Hash {
		f := prev.Clone()
		for _, lf := range ls {
			f.Append(lf.Hash)
		}
		return f.Root()
	}
	indexOK := cerr == nil && int64(len(want)) == r.Events() && root(want) == cp.Root
	if !indexOK {
		st.Status = "bad"
		// The index is no guide: say whether the events themselves match.
		detail := "the day's stored leaf index does not reproduce its signed checkpoint (altered)"
		if cerr == nil && int64(len(got)) == r.Events() && root(got) == cp.Root {
			detail += "; the stored events do reproduce it"
		} else {
			detail += "; the stored events do not reproduce it either: the day was altered"
		}
		return st, append(probs, Problem{Day: r.Day, Kind: KindIndex, Detail: detail}), nil
	}
	if p := firstDifference(r, want, got); p != nil {
		st.Status = "bad"
		probs = append(probs, *p)
	}
	return st, probs, nil
}

// firstDifference compares the sealed leaves with the stored events and
// describes the first difference.
func firstDifference(r *DayRecord, want, got []store.AuditLeaf) *Problem {
	key := func(lf store.AuditLeaf) store.Pos { return store.Pos{TS: lf.TS, Key: lf.EventID} }
	mk := func(kind string, i int, lf store.AuditLeaf, detail string) *Problem {
		idx := r.Start + int64(i)
		ts := lf.TS
		return &Problem{Day: r.Day, Kind: kind, Index: &idx, EventID: lf.EventID, TS: &ts, Detail: detail}
	}
	n := min(len(want), len(got))
	i := 0
	for i < n && want[i] == got[i] {
		i++
	}
	if i == n {
		switch {
		case len(got) < len(want):
			return mk(KindTruncated, i, want[i], fmt.Sprintf("the day's last %d sealed events are not stored (the stored day ends after %d of %d)", len(want)-i, i, len(want)))
		case len(got) > len(want):
			return mk(KindInserted, i, got[i], fmt.Sprintf("stored after the day's %d sealed events, never sealed", len(want)))
		}
		return nil
	}
	w, g := want[i], got[i]
	if key(w) == key(g) {
		return mk(KindChanged, i, g, "stored event differs from the sealed one (its canonical form hashes differently)")
	}
	inWant := slices.IndexFunc(want, func(lf store.AuditLeaf) bool { return key(lf) == key(g) })
	inGot := slices.IndexFunc(got, func(lf store.AuditLeaf) bool { return key(lf) == key(w) })
	switch {
	case inWant < 0:
		return mk(KindInserted, i, g, fmt.Sprintf("stored at position %d of the day, never sealed", i))
	case inGot < 0:
		return mk(KindMissing, i, w, "sealed at this position, not stored")
	default:
		return mk(KindReordered, i, g, fmt.Sprintf("stored at position %d of the day, sealed at position %d", i, inWant))
	}
}

// verifyUnsealed looks at a day without a seal: events there are either
// not due yet or (bad) were never sealed.
func (l *Log) verifyUnsealed(ctx context.Context, tenant, name string, d model.Day, shouldBeSealed bool) (DayStatus, *Problem, error) {
	st := DayStatus{Day: d.String(), Status: "unsealed"}
	var first *model.AuditEvent
	err := eachEvent(ctx, l.st, tenant, name, d, func(e *model.AuditEvent) error {
		if first == nil {
			c := *e
			first = &c
		}
		st.Events++
		return nil
	})
	if err != nil || first == nil {
		return st, nil, err
	}
	if !shouldBeSealed {
		if first != nil && !l.now().Before(time.UnixMilli(d.End()).Add(l.cfg.SealDelay)) {
			st.Status = "outside" // before the log began: not covered
		}
		return st, nil, nil
	}
	st.Status = "bad"
	ts := first.TS
	return st, &Problem{Day: st.Day, Kind: KindUnsealed, EventID: first.EventID, TS: &ts,
		Detail: fmt.Sprintf("%d stored events on a day that is past its seal time but has no seal (inserted, or the seal was removed)", st.Events)}, nil
}

// checkpointText returns the body of a signed note without checking it
// (CheckChain does).
func checkpointText(msg string) []byte {
	for i := 0; i+1 < len(msg); i++ {
		if msg[i] == '\n' && msg[i+1] == '\n' {
			return []byte(msg[:i+1])
		}
	}
	return nil
}

// CompareExport checks exported seals (an auditor's copy) against the
// stored ones: each exported checkpoint must verify with the export's own
// keys and equal the stored seal of its day; an exported day past the
// stored log is a truncated tail.
func CompareExport(exp *Export, stored []*DayRecord) ([]Problem, error) {
	known, err := VerifiersOf(exp.PublicKeys)
	if err != nil {
		return nil, err
	}
	var out []Problem
	byDay := make(map[string]*DayRecord, len(stored))
	var last string
	var lastSize int64
	for _, r := range stored {
		byDay[r.Day] = r
		last, lastSize = r.Day, r.Size
	}
	for _, e := range exp.Days {
		cp, err := OpenCheckpoint([]byte(e.Checkpoint), known)
		if err != nil {
			out = append(out, Problem{Day: e.Day, Kind: KindSeal, Detail: fmt.Sprintf("exported checkpoint: %v", err)})
			continue
		}
		if cp.Origin != exp.Origin {
			out = append(out, Problem{Day: e.Day, Kind: KindSeal, Detail: fmt.Sprintf("exported checkpoint is for origin %q, not %q", cp.Origin, exp.Origin)})
			continue
		}
		r, ok := byDay[e.Day]
		switch {
		case !ok && e.Day > last:
			idx := lastSize
			out = append(out, Problem{Day: e.Day, Kind: KindTruncated, Index: &idx,
				Detail: fmt.Sprintf("the exported checkpoint has %d leaves; the stored log ends at %d (on %s): the tail was removed", cp.Size, lastSize, last)})
		case !ok:
			out = append(out, Problem{Day: e.Day, Kind: KindSeal, Detail: "exported seal has no stored counterpart (the seal was removed)"})
		default:
			sc, err := tree.ParseCheckpoint(checkpointText(r.Checkpoint))
			if err != nil || sc != cp {
				out = append(out, Problem{Day: e.Day, Kind: KindSeal,
					Detail: fmt.Sprintf("stored seal differs from the exported checkpoint (size %d, root %s)", cp.Size, cp.Root)})
			}
		}
	}
	return out, nil
}

// Drop marks the seal of a stream-day as dropped by retention. The seal
// itself stays.
func (l *Log) Drop(ctx context.Context, tenant, name string, d model.Day) error {
	recs, err := l.Records(ctx, tenant, name)
	if err != nil {
		return err
	}
	i := slices.IndexFunc(recs, func(r *DayRecord) bool { return r.day == d })
	if i < 0 || recs[i].DroppedAt != nil {
		return nil
	}
	r := recs[i]
	at := l.now().UTC().Truncate(time.Second)
	r.DroppedAt = &at
	_, err = l.st.PutAuditSeal(ctx, store.AuditSeal{Tenant: tenant, Stream: name, Day: d, Record: encodeRecord(r)}, true)
	return err
}
