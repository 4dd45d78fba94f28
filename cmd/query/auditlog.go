package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"golang.org/x/mod/sumdb/note"

	"github.com/sluicehq/sluice/internal/audit/auditlog"
	"github.com/sluicehq/sluice/internal/audit/canon"
	"github.com/sluicehq/sluice/internal/audit/tree"
	"github.com/sluicehq/sluice/internal/model"
	"github.com/sluicehq/sluice/internal/render"
)

// errAuditBad makes the audit verifiers exit 1 after their report.
var errAuditBad = errors.New("audit log does not verify")

func auditLogCommands() []command {
	return []command{auditCheckpointCommand(), auditCheckpointsCommand(), auditProofCommand(),
		auditConsistencyCommand(), auditVerifyProofCommand(), auditVerifyCommand()}
}

func auditCheckpointCommand() command {
	return command{
		name:     "audit checkpoint",
		synopsis: "--stream S [--format table|csv|json]",
		summary:  "print a stream's latest signed checkpoint (C2SP tlog-checkpoint, signed note)",
		about: `The table format prints the signed note itself, as other tools and 'query
audit consistency' read it; json adds its origin, day, tree size and the
public keys.
`,
		examples: []string{"query audit checkpoint --stream billing-api > latest.checkpoint"},
		flags: func(fs *flagSet, e *env) func(context.Context) error {
			stream := fs.String("stream", "", "audit stream `NAME` (required)")
			formatFlag := addFormatFlag(fs)
			conn := addConnFlags(fs, gatewayOnly)
			return func(ctx context.Context) error {
				if *stream == "" {
					return fs.usagef("--stream is required")
				}
				f, c, err := conn.formatAndClient(fs, *formatFlag)
				if err != nil {
					return err
				}
				var a auditlog.CheckpointAnswer
				if err := c.AuditLog(ctx, "checkpoint", url.Values{"stream": {*stream}}, &a); err != nil {
					return err
				}
				if f == formatTable {
					_, err := fmt.Fprint(e.out, a.Checkpoint)
					return err
				}
				return printOne(e, f, a, []string{"origin", "day", "size", "checkpoint"},
					[]string{a.Origin, a.Day, strconv.FormatInt(a.Size, 10), a.Checkpoint})
			}
		},
	}
}

func auditCheckpointsCommand() command {
	return command{
		name:     "audit checkpoints",
		synopsis: "--stream S [--from YYYY-MM-DD] [--to YYYY-MM-DD] [--format json|table|csv]",
		summary:  "export a stream's seals (signed checkpoints, per-day proofs) and public keys as JSON",
		about: `Keep the export outside Sluice: 'query audit verify' compares the stored
log with a kept export, and reports a removed or rewritten seal or tail.
The export is the json format, the default here; table and csv list the
sealed days only (day, leaves, events, when sealed).
`,
		examples: []string{"query audit checkpoints --stream billing-api > billing-api.checkpoints.json"},
		flags: func(fs *flagSet, e *env) func(context.Context) error {
			stream := fs.String("stream", "", "audit stream `NAME` (required)")
			from := fs.String("from", "", "first UTC day, `YYYY-MM-DD` (default: the first sealed)")
			to := fs.String("to", "", "last UTC day, `YYYY-MM-DD` (default: the last sealed)")
			formatFlag := fs.String("format", string(formatJSON), "output `FORMAT`: json (the export), table or csv")
			conn := addConnFlags(fs, gatewayOnly)
			return func(ctx context.Context) error {
				if *stream == "" {
					return fs.usagef("--stream is required")
				}
				params, err := dayParams(fs, *stream, *from, *to)
				if err != nil {
					return err
				}
				f, c, err := conn.formatAndClient(fs, *formatFlag)
				if err != nil {
					return err
				}
				var exp auditlog.Export
				if err := c.AuditLog(ctx, "checkpoints", params, &exp); err != nil {
					return err
				}
				t := render.Table{Columns: []render.Column{{Name: "day"}, {Name: "start", Right: true}, {Name: "size", Right: true},
					{Name: "events", Right: true}, {Name: "sealed_at"}}}
				for i := range exp.Days {
					d := &exp.Days[i]
					t.Rows = append(t.Rows, []string{d.Day, strconv.FormatInt(d.Start, 10), strconv.FormatInt(d.Size, 10),
						strconv.FormatInt(d.Events(), 10), d.SealedAt.UTC().Format(time.RFC3339)})
				}
				return printAudit(e, f, exp, t)
			}
		},
	}
}

func dayParams(fs *flagSet, stream, from, to string) (url.Values, error) {
	v := url.Values{"stream": {stream}}
	for name, d := range map[string]string{"from": from, "to": to} {
		if d == "" {
			continue
		}
		if _, err := model.ParseDay(d); err != nil {
			return nil, fs.usagef("--%s %q: want YYYY-MM-DD", name, d)
		}
		v.Set(name, d)
	}
	return v, nil
}

func auditProofCommand() command {
	return command{
		name:     "audit proof",
		synopsis: "--stream S --day YYYY-MM-DD --event-id E [--size N] [--format table|csv|json]",
		summary:  "print an event's inclusion proof (c2sp.org/tlog-proof@v1) against a checkpoint",
		about: `--day is the UTC day of the event's ts. The proof is against the latest
checkpoint, or the one of tree size --size. It carries the event's canonical
form and the signed checkpoint: check it with 'query audit verify-proof'.
The table format prints the proof itself; json and csv wrap it in a field.
`,
		examples: []string{"query audit proof --stream billing-api --day 2026-11-20 --event-id evt-123 > evt-123.proof"},
		flags: func(fs *flagSet, e *env) func(context.Context) error {
			stream := fs.String("stream", "", "audit stream `NAME` (required)")
			day := fs.String("day", "", "the event's UTC day, `YYYY-MM-DD` (required)")
			id := fs.String("event-id", "", "the event's `ID` (required)")
			size := fs.Int64("size", 0, "tree `SIZE` of the checkpoint to prove against (default: the latest)")
			formatFlag := addFormatFlag(fs)
			conn := addConnFlags(fs, gatewayOnly)
			return func(ctx context.Context) error {
				if *stream == "" || *id == "" {
					return fs.usagef("--stream and --event-id are required")
				}
				if _, err := model.ParseDay(*day); err != nil {
					return fs.usagef("--day %q: want YYYY-MM-DD", *day)
				}
				if *size < 0 {
					return fs.usagef("--size must be positive")
				}
				f, c, err := conn.formatAndClient(fs, *formatFlag)
				if err != nil {
					return err
				}
				params := url.Values{"stream": {*stream}, "day": {*day}, "event_id": {*id}}
				if *size > 0 {
					params.Set("size", strconv.FormatInt(*size, 10))
				}
				var a auditlog.ProofAnswer
				if err := c.AuditLog(ctx, "proof", params, &a); err != nil {
					return err
				}
				return printProof(e, f, a)
			}
		},
	}
}

func auditConsistencyCommand() command {
	return command{
		name:     "audit consistency",
		synopsis: "--stream S --old SIZE|FILE [--new SIZE|FILE] [--format table|csv|json]",
		summary:  "print a consistency proof between two checkpoints (tlog-witness add-checkpoint body)",
		about: `--old and --new are tree sizes or files holding a signed checkpoint (as
'query audit checkpoint' prints). --new defaults to the latest checkpoint.
The table format prints the proof itself; json and csv wrap it in a field.
`,
		examples: []string{"query audit consistency --stream billing-api --old old.checkpoint > billing-api.consistency"},
		flags: func(fs *flagSet, e *env) func(context.Context) error {
			stream := fs.String("stream", "", "audit stream `NAME` (required)")
			old := fs.String("old", "", "older checkpoint: tree `SIZE` or checkpoint FILE (required)")
			nw := fs.String("new", "", "newer checkpoint: tree `SIZE` or checkpoint FILE (default: the latest)")
			formatFlag := addFormatFlag(fs)
			conn := addConnFlags(fs, gatewayOnly)
			return func(ctx context.Context) error {
				if *stream == "" || *old == "" {
					return fs.usagef("--stream and --old are required")
				}
				f, err := parseFormat(fs, *formatFlag)
				if err != nil {
					return err
				}
				params := url.Values{"stream": {*stream}}
				for name, v := range map[string]string{"old": *old, "new": *nw} {
					if v == "" {
						continue
					}
					size, err := sizeOf(v)
					if err != nil {
						return fs.usagef("--%s: %v", name, err)
					}
					params.Set(name, strconv.FormatInt(size, 10))
				}
				c, err := conn.client(fs)
				if err != nil {
					return err
				}
				var a auditlog.ProofAnswer
				if err := c.AuditLog(ctx, "consistency", params, &a); err != nil {
					return err
				}
				return printProof(e, f, a)
			}
		},
	}
}

// sizeOf reads a tree size, or the size of the checkpoint in a file (its
// signature is checked by the verifier, not here).
func sizeOf(v string) (int64, error) {
	if n, err := strconv.ParseInt(v, 10, 64); err == nil {
		if n < 1 {
			return 0, fmt.Errorf("tree size %d must be at least 1", n)
		}
		return n, nil
	}
	raw, err := readSmall(v)
	if err != nil {
		return 0, err
	}
	text, _, ok := strings.Cut(string(raw), "\n\n")
	if !ok {
		return 0, fmt.Errorf("%s is not a signed checkpoint", v)
	}
	cp, err := tree.ParseCheckpoint([]byte(text + "\n"))
	if err != nil {
		return 0, fmt.Errorf("%s: %w", v, err)
	}
	return cp.Size, nil
}

// maxAuditFile bounds the files the audit commands read.
const maxAuditFile = 64 << 20

func readSmall(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	// Read, not Stat: a pipe (--proof <(curl …)) has no size.
	b, err := io.ReadAll(io.LimitReader(f, maxAuditFile+1))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	if len(b) > maxAuditFile {
		return nil, fmt.Errorf("%s: larger than %d bytes", path, maxAuditFile)
	}
	return b, nil
}

// verifierKeys collects --key values (comma-separated verifier keys) and
// the keys of an export file.
func verifierKeys(keys, keysFile string) (note.Verifiers, error) {
	var list []string
	for k := range strings.SplitSeq(keys, ",") {
		if k = strings.TrimSpace(k); k != "" {
			list = append(list, k)
		}
	}
	if keysFile != "" {
		raw, err := readSmall(keysFile)
		if err != nil {
			return nil, err
		}
		var exp auditlog.Export
		if json.Unmarshal(raw, &exp) == nil && len(exp.PublicKeys) > 0 {
			list = append(list, exp.PublicKeys...)
		} else {
			for l := range strings.SplitSeq(string(raw), "\n") {
				if l = strings.TrimSpace(l); l != "" {
					list = append(list, l)
				}
			}
		}
	}
	if len(list) == 0 {
		return nil, errors.New("no public key: give --key or --keys")
	}
	return auditlog.VerifiersOf(list)
}

func auditVerifyProofCommand() command {
	return command{
		name:     "audit verify-proof",
		synopsis: "--proof FILE [--old-checkpoint FILE] (--key VKEY | --keys FILE) [--format table|csv|json]",
		summary:  "check an inclusion or consistency proof offline, without a gateway",
		about: `An inclusion proof (query audit proof) is checked against its own signed
checkpoint: the leaf hash is recomputed from the canonical event it carries,
which is printed. A consistency proof (query audit consistency) needs the
older signed checkpoint too (--old-checkpoint). Public keys come from --key
(verifier keys, comma-separated) or --keys (an export of 'query audit
checkpoints', or one key a line). Exit status 1 if the proof does not hold.
It reads only files, never a gateway.
`,
		examples: []string{"query audit verify-proof --proof evt-123.proof --keys billing-api.checkpoints.json"},
		flags: func(fs *flagSet, e *env) func(context.Context) error {
			proof := fs.String("proof", "", "proof `FILE` (required)")
			oldCP := fs.String("old-checkpoint", "", "the older signed checkpoint `FILE`, for a consistency proof")
			key := fs.String("key", "", "public verifier `KEYS`, comma-separated")
			keys := fs.String("keys", "", "`FILE` of public keys: an export, or one key a line")
			formatFlag := addFormatFlag(fs)
			return func(context.Context) error {
				if *proof == "" {
					return fs.usagef("--proof is required")
				}
				f, err := parseFormat(fs, *formatFlag)
				if err != nil {
					return err
				}
				known, err := verifierKeys(*key, *keys)
				if err != nil {
					return fs.usagef("%v", err)
				}
				raw, err := readSmall(*proof)
				if err != nil {
					return err
				}
				if strings.HasPrefix(string(raw), "old ") {
					if *oldCP == "" {
						return fs.usagef("a consistency proof needs --old-checkpoint")
					}
					oldRaw, err := readSmall(*oldCP)
					if err != nil {
						return err
					}
					r, err := verifyConsistencyProof(raw, oldRaw, known)
					if err != nil {
						return err
					}
					return printProofCheck(e, f, r)
				}
				r, err := verifyInclusionProof(raw, known)
				if err != nil {
					return err
				}
				return printProofCheck(e, f, r)
			}
		},
	}
}

// proofCheck is what verify-proof found: the proof holds (a proof that
// does not hold is an error).
type proofCheck struct {
	Kind   string `json:"kind"` // inclusion or consistency
	Origin string `json:"origin"`
	Size   int64  `json:"size"` // tree size of the (newer) checkpoint
	Root   string `json:"root"`
	// Of an inclusion proof: the leaf index and the event's canonical form.
	Index *int64  `json:"index,omitempty"`
	Event *string `json:"event,omitempty"`
	// Of a consistency proof: the older checkpoint's tree size.
	OldSize *int64 `json:"old_size,omitempty"`
}

func verifyInclusionProof(raw []byte, known note.Verifiers) (proofCheck, error) {
	p, err := tree.ParseInclusionProof(raw)
	if err != nil {
		return proofCheck{}, fmt.Errorf("%w: %w", errAuditBad, err)
	}
	cp, err := auditlog.OpenCheckpoint(p.Checkpoint, known)
	if err != nil {
		return proofCheck{}, fmt.Errorf("%w: %w", errAuditBad, err)
	}
	if err := tree.CheckInclusion(p.Hashes, cp.Size, cp.Root, p.Index, canon.LeafHash(p.Leaf)); err != nil {
		return proofCheck{}, fmt.Errorf("%w: %w", errAuditBad, err)
	}
	leaf := string(p.Leaf)
	return proofCheck{Kind: "inclusion", Origin: cp.Origin, Size: cp.Size, Root: fmt.Sprint(cp.Root), Index: &p.Index, Event: &leaf}, nil
}

func verifyConsistencyProof(raw, oldRaw []byte, known note.Verifiers) (proofCheck, error) {
	p, err := tree.ParseConsistencyProof(raw)
	if err != nil {
		return proofCheck{}, fmt.Errorf("%w: %w", errAuditBad, err)
	}
	nc, err := auditlog.OpenCheckpoint(p.Checkpoint, known)
	if err != nil {
		return proofCheck{}, fmt.Errorf("%w: new checkpoint: %w", errAuditBad, err)
	}
	oc, err := auditlog.OpenCheckpoint(oldRaw, known)
	if err != nil {
		return proofCheck{}, fmt.Errorf("%w: old checkpoint: %w", errAuditBad, err)
	}
	switch {
	case oc.Origin != nc.Origin:
		return proofCheck{}, fmt.Errorf("%w: the checkpoints are of different logs (%s, %s)", errAuditBad, oc.Origin, nc.Origin)
	case oc.Size != p.Old:
		return proofCheck{}, fmt.Errorf("%w: the proof starts at size %d, the old checkpoint has %d", errAuditBad, p.Old, oc.Size)
	}
	if err := tree.CheckConsistency(p.Hashes, oc.Size, oc.Root, nc.Size, nc.Root); err != nil {
		return proofCheck{}, fmt.Errorf("%w: %w", errAuditBad, err)
	}
	return proofCheck{Kind: "consistency", Origin: nc.Origin, Size: nc.Size, Root: fmt.Sprint(nc.Root), OldSize: &oc.Size}, nil
}

func printProofCheck(e *env, f format, r proofCheck) error {
	if f == formatTable {
		var err error
		if r.Index != nil {
			_, err = fmt.Fprintf(e.out, "OK: leaf %d is in %s at tree size %d (root %s)\nevent: %s\n", *r.Index, r.Origin, r.Size, r.Root, *r.Event)
		} else {
			_, err = fmt.Fprintf(e.out, "OK: %s at size %d extends size %d\n", r.Origin, r.Size, *r.OldSize)
		}
		return err
	}
	cols := []string{"kind", "origin", "size", "root", "index", "event", "old_size"}
	row := []string{r.Kind, r.Origin, strconv.FormatInt(r.Size, 10), r.Root, "", "", ""}
	if r.Index != nil {
		row[4], row[5] = strconv.FormatInt(*r.Index, 10), *r.Event
	} else {
		row[6] = strconv.FormatInt(*r.OldSize, 10)
	}
	return printOne(e, f, r, cols, row)
}

// printOne writes one record: v as JSON, or a one-row CSV of cols.
func printOne(e *env, f format, v any, cols, row []string) error {
	t := render.Table{Rows: [][]string{row}}
	for _, c := range cols {
		t.Columns = append(t.Columns, render.Column{Name: c})
	}
	return printAudit(e, f, v, t)
}

// printAudit writes v as indented JSON, or t as a text table or CSV.
func printAudit(e *env, f format, v any, t render.Table) error {
	switch f {
	case formatJSON:
		enc := json.NewEncoder(e.out)
		enc.SetIndent("", "  ")
		return enc.Encode(v)
	case formatCSV:
		return t.WriteCSV(e.out)
	}
	return t.WriteText(e.out)
}

// printProof writes a proof: as is in a table, else in a "proof" field.
func printProof(e *env, f format, a auditlog.ProofAnswer) error {
	if f == formatTable {
		_, err := fmt.Fprint(e.out, a.Proof)
		return err
	}
	return printOne(e, f, a, []string{"proof"}, []string{a.Proof})
}

func auditVerifyCommand() command {
	return command{
		name:     "audit verify",
		synopsis: "--stream S [--from YYYY-MM-DD] [--to YYYY-MM-DD] [--checkpoints FILE] [--format table|csv|json]",
		summary:  "recompute a stream's log from the stored events; report the first bad event",
		about: `The gateway recomputes every day of the range from its stored events and
checks them, and the chain of seals, against the signed checkpoints. With
--checkpoints (an earlier 'query audit checkpoints' export) the stored seals
are also checked, with the export's public keys, against that copy: a
removed tail or a rewritten seal shows there. Each problem names the day,
the kind (changed, missing, inserted, reordered, truncated, seal, index,
unsealed), the leaf index and the event. Exit status 1 if any. json prints
the whole report (days, problems, ok); csv the days, the problems on stderr.
`,
		examples: []string{"query audit verify --stream billing-api --checkpoints billing-api.checkpoints.json"},
		flags: func(fs *flagSet, e *env) func(context.Context) error {
			stream := fs.String("stream", "", "audit stream `NAME` (required)")
			from := fs.String("from", "", "first UTC day, `YYYY-MM-DD` (default: the first sealed)")
			to := fs.String("to", "", "last UTC day, `YYYY-MM-DD` (default: today)")
			cps := fs.String("checkpoints", "", "an exported checkpoints `FILE` to compare with")
			formatFlag := addFormatFlag(fs)
			conn := addConnFlags(fs, gatewayOnly)
			return func(ctx context.Context) error {
				if *stream == "" {
					return fs.usagef("--stream is required")
				}
				params, err := dayParams(fs, *stream, *from, *to)
				if err != nil {
					return err
				}
				f, err := parseFormat(fs, *formatFlag)
				if err != nil {
					return err
				}
				var exp *auditlog.Export
				if *cps != "" {
					raw, err := readSmall(*cps)
					if err != nil {
						return err
					}
					exp = &auditlog.Export{}
					if err := json.Unmarshal(raw, exp); err != nil {
						return fs.usagef("--checkpoints %s: not an export of query audit checkpoints: %v", *cps, err)
					}
				}
				c, err := conn.client(fs)
				if err != nil {
					return err
				}
				var rep auditlog.Report
				if err := c.AuditLog(ctx, "verify", params, &rep); err != nil {
					return err
				}
				probs := rep.Problems
				if exp != nil {
					var stored auditlog.Export
					if err := c.AuditLog(ctx, "checkpoints", url.Values{"stream": {*stream}}, &stored); err != nil {
						return err
					}
					more, err := compareWithExport(exp, &stored)
					if err != nil {
						return err
					}
					probs = append(more, probs...)
				}
				rep.Problems = probs
				if rep.Problems == nil {
					rep.Problems = []auditlog.Problem{}
				}
				if rep.Days == nil {
					rep.Days = []auditlog.DayStatus{}
				}
				rep.OK = len(probs) == 0
				if err := printReport(e, f, &rep); err != nil {
					return err
				}
				if len(probs) == 0 {
					return nil
				}
				return fmt.Errorf("%w: %d problems, first: %s", errAuditBad, len(probs), probs[0])
			}
		},
	}
}

// printReport writes a verify report: in a table the days then the
// verdict; in CSV the days, the verdict on stderr (stdout stays CSV).
func printReport(e *env, f format, rep *auditlog.Report) error {
	var verdict strings.Builder
	if rep.OK {
		fmt.Fprintf(&verdict, "OK: %s verifies\n", rep.Origin)
	} else {
		fmt.Fprintf(&verdict, "FIRST BAD: %s\n", rep.Problems[0])
		for _, p := range rep.Problems[1:] {
			fmt.Fprintf(&verdict, "also: %s\n", p)
		}
	}
	switch f {
	case formatJSON:
		enc := json.NewEncoder(e.out)
		enc.SetIndent("", "  ")
		return enc.Encode(rep)
	case formatCSV:
		t := render.Table{Columns: []render.Column{{Name: "day"}, {Name: "status"}, {Name: "start"}, {Name: "size"}, {Name: "events"}}}
		for _, d := range rep.Days {
			t.Rows = append(t.Rows, []string{d.Day, d.Status, strconv.FormatInt(d.Start, 10), strconv.FormatInt(d.Size, 10), strconv.FormatInt(d.Events, 10)})
		}
		if err := t.WriteCSV(e.out); err != nil {
			return err
		}
		// Flush first so that on a terminal the verdict follows the rows.
		if err := e.out.Flush(); err != nil {
			return err
		}
		_, err := fmt.Fprint(e.stderr, verdict.String())
		return err
	}
	for _, d := range rep.Days {
		fmt.Fprintf(e.out, "%s  %-8s  leaves %d..%d  events %d\n", d.Day, d.Status, d.Start, d.Size, d.Events)
	}
	_, err := fmt.Fprint(e.out, verdict.String())
	return err
}

// compareWithExport checks the stored seals with the keys of the
// auditor's export, then against the export itself.
func compareWithExport(exp, stored *auditlog.Export) ([]auditlog.Problem, error) {
	known, err := auditlog.VerifiersOf(exp.PublicKeys)
	if err != nil {
		return nil, fmt.Errorf("--checkpoints: %w", err)
	}
	recs := make([]*auditlog.DayRecord, len(stored.Days))
	for i := range stored.Days {
		recs[i] = &stored.Days[i]
	}
	probs := auditlog.CheckChain(exp.Origin, recs, known)
	more, err := auditlog.CompareExport(exp, recs)
	if err != nil {
		return nil, err
	}
	return append(probs, more...), nil
}
