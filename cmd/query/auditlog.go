package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"os"
	"strconv"
	"strings"

	"golang.org/x/mod/sumdb/note"

	"github.com/sluicehq/sluice/internal/audit/auditlog"
	"github.com/sluicehq/sluice/internal/audit/canon"
	"github.com/sluicehq/sluice/internal/audit/tree"
	"github.com/sluicehq/sluice/internal/model"
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
		synopsis: "--stream S",
		summary:  "print a stream's latest signed checkpoint (C2SP tlog-checkpoint, signed note)",
		examples: []string{"query audit checkpoint --stream billing-api > latest.checkpoint"},
		flags: func(fs *flagSet, e *env) func(context.Context) error {
			stream := fs.String("stream", "", "audit stream `NAME` (required)")
			conn := addConnFlags(fs, gatewayOnly)
			return func(ctx context.Context) error {
				if *stream == "" {
					return fs.usagef("--stream is required")
				}
				c, err := conn.client(fs)
				if err != nil {
					return err
				}
				var a auditlog.CheckpointAnswer
				if err := c.AuditLog(ctx, "checkpoint", url.Values{"stream": {*stream}}, &a); err != nil {
					return err
				}
				fmt.Fprint(e.out, a.Checkpoint)
				return nil
			}
		},
	}
}

func auditCheckpointsCommand() command {
	return command{
		name:     "audit checkpoints",
		synopsis: "--stream S [--from YYYY-MM-DD] [--to YYYY-MM-DD]",
		summary:  "export a stream's seals (signed checkpoints, per-day proofs) and public keys as JSON",
		about: `Keep the export outside Sluice: 'query audit verify --checkpoints FILE' compares
the stored log with it, and reports a removed or rewritten seal or tail.
`,
		examples: []string{"query audit checkpoints --stream billing-api > billing-api.checkpoints.json"},
		flags: func(fs *flagSet, e *env) func(context.Context) error {
			stream := fs.String("stream", "", "audit stream `NAME` (required)")
			from := fs.String("from", "", "first UTC day, `YYYY-MM-DD` (default: the first sealed)")
			to := fs.String("to", "", "last UTC day, `YYYY-MM-DD` (default: the last sealed)")
			conn := addConnFlags(fs, gatewayOnly)
			return func(ctx context.Context) error {
				if *stream == "" {
					return fs.usagef("--stream is required")
				}
				params, err := dayParams(fs, *stream, *from, *to)
				if err != nil {
					return err
				}
				c, err := conn.client(fs)
				if err != nil {
					return err
				}
				var exp auditlog.Export
				if err := c.AuditLog(ctx, "checkpoints", params, &exp); err != nil {
					return err
				}
				enc := json.NewEncoder(e.out)
				enc.SetIndent("", "  ")
				return enc.Encode(exp)
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
		synopsis: "--stream S --day YYYY-MM-DD --event-id E [--size N]",
		summary:  "print an event's inclusion proof (c2sp.org/tlog-proof@v1) against a checkpoint",
		about: `--day is the UTC day of the event's ts. The proof is against the latest
checkpoint, or the one of tree size --size. It carries the event's canonical
form and the signed checkpoint: check it with 'query audit verify-proof'.
`,
		examples: []string{"query audit proof --stream billing-api --day 2026-11-20 --event-id evt-123 > evt-123.proof"},
		flags: func(fs *flagSet, e *env) func(context.Context) error {
			stream := fs.String("stream", "", "audit stream `NAME` (required)")
			day := fs.String("day", "", "the event's UTC day, `YYYY-MM-DD` (required)")
			id := fs.String("event-id", "", "the event's `ID` (required)")
			size := fs.Int64("size", 0, "tree `SIZE` of the checkpoint to prove against (default: the latest)")
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
				c, err := conn.client(fs)
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
				fmt.Fprint(e.out, a.Proof)
				return nil
			}
		},
	}
}

func auditConsistencyCommand() command {
	return command{
		name:     "audit consistency",
		synopsis: "--stream S --old SIZE|FILE [--new SIZE|FILE]",
		summary:  "print a consistency proof between two checkpoints (tlog-witness add-checkpoint body)",
		about: `--old and --new are tree sizes or files holding a signed checkpoint (as
'query audit checkpoint' prints). --new defaults to the latest checkpoint.
`,
		examples: []string{"query audit consistency --stream billing-api --old old.checkpoint > billing-api.consistency"},
		flags: func(fs *flagSet, e *env) func(context.Context) error {
			stream := fs.String("stream", "", "audit stream `NAME` (required)")
			old := fs.String("old", "", "older checkpoint: tree `SIZE` or checkpoint FILE (required)")
			nw := fs.String("new", "", "newer checkpoint: tree `SIZE` or checkpoint FILE (default: the latest)")
			conn := addConnFlags(fs, gatewayOnly)
			return func(ctx context.Context) error {
				if *stream == "" || *old == "" {
					return fs.usagef("--stream and --old are required")
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
				fmt.Fprint(e.out, a.Proof)
				return nil
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
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if st.Size() > maxAuditFile {
		return nil, fmt.Errorf("%s: larger than %d bytes", path, maxAuditFile)
	}
	b := make([]byte, st.Size())
	if _, err := f.ReadAt(b, 0); err != nil && st.Size() > 0 {
		return nil, fmt.Errorf("read %s: %w", path, err)
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
		synopsis: "--proof FILE [--old-checkpoint FILE] (--key VKEY | --keys FILE)",
		summary:  "check an inclusion or consistency proof offline, without a gateway",
		about: `An inclusion proof (query audit proof) is checked against its own signed
checkpoint: the leaf hash is recomputed from the canonical event it carries,
which is printed. A consistency proof (query audit consistency) needs the
older signed checkpoint too (--old-checkpoint). Public keys come from --key
(verifier keys, comma-separated) or --keys (an export of 'query audit
checkpoints', or one key a line). Exit status 1 if the proof does not hold.
`,
		examples: []string{"query audit verify-proof --proof evt-123.proof --keys billing-api.checkpoints.json"},
		flags: func(fs *flagSet, e *env) func(context.Context) error {
			proof := fs.String("proof", "", "proof `FILE` (required)")
			oldCP := fs.String("old-checkpoint", "", "the older signed checkpoint `FILE`, for a consistency proof")
			key := fs.String("key", "", "public verifier `KEYS`, comma-separated")
			keys := fs.String("keys", "", "`FILE` of public keys: an export, or one key a line")
			return func(context.Context) error {
				if *proof == "" {
					return fs.usagef("--proof is required")
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
					return verifyConsistencyProof(e, raw, oldRaw, known)
				}
				return verifyInclusionProof(e, raw, known)
			}
		},
	}
}

func verifyInclusionProof(e *env, raw []byte, known note.Verifiers) error {
	p, err := tree.ParseInclusionProof(raw)
	if err != nil {
		return fmt.Errorf("%w: %w", errAuditBad, err)
	}
	cp, err := auditlog.OpenCheckpoint(p.Checkpoint, known)
	if err != nil {
		return fmt.Errorf("%w: %w", errAuditBad, err)
	}
	if err := tree.CheckInclusion(p.Hashes, cp.Size, cp.Root, p.Index, canon.LeafHash(p.Leaf)); err != nil {
		return fmt.Errorf("%w: %w", errAuditBad, err)
	}
	fmt.Fprintf(e.out, "OK: leaf %d is in %s at tree size %d (root %s)\nevent: %s\n", p.Index, cp.Origin, cp.Size, cp.Root, p.Leaf)
	return nil
}

func verifyConsistencyProof(e *env, raw, oldRaw []byte, known note.Verifiers) error {
	p, err := tree.ParseConsistencyProof(raw)
	if err != nil {
		return fmt.Errorf("%w: %w", errAuditBad, err)
	}
	nc, err := auditlog.OpenCheckpoint(p.Checkpoint, known)
	if err != nil {
		return fmt.Errorf("%w: new checkpoint: %w", errAuditBad, err)
	}
	oc, err := auditlog.OpenCheckpoint(oldRaw, known)
	if err != nil {
		return fmt.Errorf("%w: old checkpoint: %w", errAuditBad, err)
	}
	switch {
	case oc.Origin != nc.Origin:
		return fmt.Errorf("%w: the checkpoints are of different logs (%s, %s)", errAuditBad, oc.Origin, nc.Origin)
	case oc.Size != p.Old:
		return fmt.Errorf("%w: the proof starts at size %d, the old checkpoint has %d", errAuditBad, p.Old, oc.Size)
	}
	if err := tree.CheckConsistency(p.Hashes, oc.Size, oc.Root, nc.Size, nc.Root); err != nil {
		return fmt.Errorf("%w: %w", errAuditBad, err)
	}
	fmt.Fprintf(e.out, "OK: %s at size %d extends size %d\n", nc.Origin, nc.Size, oc.Size)
	return nil
}

func auditVerifyCommand() command {
	return command{
		name:     "audit verify",
		synopsis: "--stream S [--from YYYY-MM-DD] [--to YYYY-MM-DD] [--checkpoints FILE]",
		summary:  "recompute a stream's log from the stored events; report the first bad event",
		about: `The gateway recomputes every day of the range from its stored events and
checks them, and the chain of seals, against the signed checkpoints. With
--checkpoints (an earlier 'query audit checkpoints' export) the stored seals
are also checked, with the export's public keys, against that copy: a
removed tail or a rewritten seal shows there. Each problem names the day,
the kind (changed, missing, inserted, reordered, truncated, seal, index,
unsealed), the leaf index and the event. Exit status 1 if any.
`,
		examples: []string{"query audit verify --stream billing-api --checkpoints billing-api.checkpoints.json"},
		flags: func(fs *flagSet, e *env) func(context.Context) error {
			stream := fs.String("stream", "", "audit stream `NAME` (required)")
			from := fs.String("from", "", "first UTC day, `YYYY-MM-DD` (default: the first sealed)")
			to := fs.String("to", "", "last UTC day, `YYYY-MM-DD` (default: today)")
			cps := fs.String("checkpoints", "", "an exported checkpoints `FILE` to compare with")
			conn := addConnFlags(fs, gatewayOnly)
			return func(ctx context.Context) error {
				if *stream == "" {
					return fs.usagef("--stream is required")
				}
				params, err := dayParams(fs, *stream, *from, *to)
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
				for _, d := range rep.Days {
					fmt.Fprintf(e.out, "%s  %-8s  leaves %d..%d  events %d\n", d.Day, d.Status, d.Start, d.Size, d.Events)
				}
				if len(probs) == 0 {
					fmt.Fprintf(e.out, "OK: %s verifies\n", rep.Origin)
					return nil
				}
				fmt.Fprintf(e.out, "FIRST BAD: %s\n", probs[0])
				for _, p := range probs[1:] {
					fmt.Fprintf(e.out, "also: %s\n", p)
				}
				return fmt.Errorf("%w: %d problems, first: %s", errAuditBad, len(probs), probs[0])
			}
		},
	}
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
