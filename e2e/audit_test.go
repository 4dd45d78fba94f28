package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// auditEnv configures the audit log for a gateway run.
func auditEnv(keyFile, acceptLate, sealDelay string) []string {
	return []string{"SLUICE_AUDIT_ENABLED=true", "SLUICE_AUDIT_KEY_FILE=" + keyFile,
		"SLUICE_AUDIT_ACCEPT_LATE=" + acceptLate, "SLUICE_AUDIT_SEAL_DELAY=" + sealDelay,
		"SLUICE_AUDIT_CHECKPOINT_INTERVAL=1s", "SLUICE_LOG_LEVEL=info"}
}

// queryStatus runs the query binary and returns stdout, stderr and the
// exit status.
func (g *gateway) queryStatus(args ...string) (string, string, int) {
	g.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(bin, "query"), args...)
	cmd.Env = append(os.Environ(), "SLUICE_URL="+g.url, "SLUICE_TOKEN="+token)
	var out, errb strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	if ee, ok := err.(*exec.ExitError); ok {
		return out.String(), errb.String(), ee.ExitCode()
	}
	if err != nil {
		g.t.Fatalf("query %s: %v", strings.Join(args, " "), err)
	}
	return out.String(), errb.String(), 0
}

// killOnFirstSeal runs the gateway and sends it SIGKILL as soon as it logs
// its first sealed day; it returns how many seals it logged by then.
func killOnFirstSeal(t *testing.T, dataDir string, env []string) int {
	t.Helper()
	cmd := exec.Command(filepath.Join(bin, "ingest"))
	cmd.Dir = t.TempDir()
	cmd.Env = append(append(os.Environ(), "SLUICE_HTTP_ADDR=127.0.0.1:0", "SLUICE_DATA_DIR="+dataDir,
		"SLUICE_AUTH_TOKENS="+token+"=acme"), env...)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	sealed := 0
	sc := bufio.NewScanner(stderr)
	var log strings.Builder
	for sc.Scan() {
		log.WriteString(sc.Text() + "\n")
		if strings.Contains(sc.Text(), `msg="audit day sealed"`) {
			sealed++
			if sealed == 1 {
				_ = cmd.Process.Signal(syscall.SIGKILL)
			}
		}
	}
	_ = cmd.Wait()
	if sealed == 0 {
		t.Fatalf("the gateway sealed nothing before it exited:\n%s", log.String())
	}
	return sealed
}

// TestAuditLogThroughTheBinary writes audit events, kills the gateway with
// SIGKILL while it seals them, restarts it, and checks through the query
// binary that every stream's log verifies, holds every acknowledged event,
// and proves its events offline; resubmitting an event_id with another
// payload gets 409, a late event 422.
func TestAuditLogThroughTheBinary(t *testing.T) {
	dir := t.TempDir()
	keyFile := filepath.Join(dir, "audit.key")
	out, err := exec.Command(filepath.Join(bin, "ingest"), "audit", "keygen", "--name", "audit.e2e.example", "--out", keyFile).CombinedOutput()
	if err != nil {
		t.Fatalf("ingest audit keygen: %v\n%s", err, out)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	vkey := lines[len(lines)-1]
	if !strings.HasPrefix(vkey, "audit.e2e.example+") {
		t.Fatalf("keygen printed %q", out)
	}

	data := t.TempDir()
	d := day(2) // the day's events are accepted in the first run only
	const streams, perStream = 6, 2500
	// First run: days end well within accept_late, nothing is due.
	g := startGateway(t, data, auditEnv(keyFile, "84h", "84h10m")...)
	// An earlier day of one stream, so that its log has two checkpoints.
	early := day(3).Add(time.Hour).Format(time.RFC3339)
	for i := range 3 {
		body := fmt.Sprintf(`{"event_id":"early-%d","stream":"s3","ts":%q,"actor":"a","action":"b","resource":"c","outcome":"d"}`, i, early)
		if status, resp := g.post("/v1/audit", "application/json", []byte(body)); status != 202 {
			t.Fatalf("POST audit: %d %s", status, resp)
		}
	}
	for s := range streams {
		for part := range perStream / 500 {
			var b strings.Builder
			for i := part * 500; i < (part+1)*500; i++ {
				ts := d.Add(time.Duration(i*7919%86_400_000) * time.Millisecond)
				fmt.Fprintf(&b, `{"event_id":"ev-%d-%05d","stream":"s%d","ts":%q,"actor":"user:%d","action":"pay","resource":"inv:%d","outcome":"success","attributes":{"amount":%d,"note":"ü<&>"}}`+"\n",
					s, i, s, ts.Format(time.RFC3339Nano), i%17, i, i*3)
			}
			if status, body := g.post("/v1/audit", "application/x-ndjson", []byte(b.String())); status != 202 {
				t.Fatalf("POST audit: %d %s", status, body)
			}
		}
	}
	ev := func(actor string) []byte {
		return fmt.Appendf(nil, `{"event_id":"ev-0-00007","stream":"s0","ts":%q,"actor":%q,"action":"pay","resource":"inv:7","outcome":"success","attributes":{"amount":21,"note":"ü<&>"}}`,
			d.Add(time.Duration(7*7919)*time.Millisecond).Format(time.RFC3339Nano), actor)
	}
	if status, body := g.post("/v1/audit", "application/json", ev("user:7")); status != 202 {
		t.Fatalf("identical resubmission: %d %s", status, body)
	}
	if status, body := g.post("/v1/audit", "application/json", ev("mallory")); status != 409 || !strings.Contains(body, "ev-0-00007") {
		t.Fatalf("resubmission with another payload: %d %s, want 409 naming ev-0-00007", status, body)
	}
	g.stop()

	// Second run: the day is due. Kill it as it seals, three times.
	env := auditEnv(keyFile, "0s", "10m")
	for range 3 {
		if n := killOnFirstSeal(t, data, env); n >= streams {
			t.Logf("the kill came after every seal (%d)", n)
		}
	}
	g = startGateway(t, data, env...)
	deadline := time.Now().Add(time.Minute)
	for s := range streams {
		for {
			_, _, code := g.queryStatus("audit", "checkpoint", "--stream", fmt.Sprintf("s%d", s))
			if code == 0 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("stream s%d not sealed after a minute:\n%s", s, g.logs())
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
	if status, body := g.post("/v1/audit", "application/json", ev("user:7")); status != 422 {
		t.Fatalf("event of a sealed day: %d %s, want 422", status, body)
	}
	for s := range streams {
		stream := fmt.Sprintf("s%d", s)
		out, errOut, code := g.queryStatus("audit", "verify", "--stream", stream, "--from", day(3).Format(time.DateOnly))
		if code != 0 || !strings.Contains(out, "OK:") || !strings.Contains(out, fmt.Sprintf("events %d", perStream)) {
			t.Fatalf("verify %s: exit %d\n%s%s", stream, code, out, errOut)
		}
	}
	// A third party checks a proof with the published key only.
	proof, _ := g.query("audit", "proof", "--stream", "s3", "--day", d.Format(time.DateOnly), "--event-id", "ev-3-01234")
	pf := filepath.Join(dir, "proof")
	if err := os.WriteFile(pf, []byte(proof), 0o600); err != nil {
		t.Fatal(err)
	}
	out2, errOut, code := g.queryStatus("audit", "verify-proof", "--proof", pf, "--key", vkey)
	if code != 0 || !strings.Contains(out2, `"event_id":"ev-3-01234"`) {
		t.Fatalf("verify-proof: exit %d\n%s%s", code, out2, errOut)
	}
	// The export, a consistency proof from the first checkpoint to the
	// latest, checked offline, and verify against the export.
	export, _ := g.query("audit", "checkpoints", "--stream", "s3")
	ef := filepath.Join(dir, "s3.json")
	if err := os.WriteFile(ef, []byte(export), 0o600); err != nil {
		t.Fatal(err)
	}
	var exp struct {
		Days []struct {
			Size       int64  `json:"size"`
			Checkpoint string `json:"checkpoint"`
		} `json:"days"`
	}
	if err := json.Unmarshal([]byte(export), &exp); err != nil || len(exp.Days) != 2 || exp.Days[0].Size != 3 {
		t.Fatalf("export: %v\n%s", err, export)
	}
	oldCP := filepath.Join(dir, "old.checkpoint")
	if err := os.WriteFile(oldCP, []byte(exp.Days[0].Checkpoint), 0o600); err != nil {
		t.Fatal(err)
	}
	cons, _ := g.query("audit", "consistency", "--stream", "s3", "--old", oldCP)
	cf := filepath.Join(dir, "cons")
	if err := os.WriteFile(cf, []byte(cons), 0o600); err != nil {
		t.Fatal(err)
	}
	if out, errOut, code := g.queryStatus("audit", "verify-proof", "--proof", cf, "--old-checkpoint", oldCP, "--keys", ef); code != 0 || !strings.Contains(out, "extends size 3") {
		t.Fatalf("verify-proof of the consistency proof: exit %d\n%s%s", code, out, errOut)
	}
	if out, errOut, code := g.queryStatus("audit", "verify", "--stream", "s3", "--from", day(3).Format(time.DateOnly), "--checkpoints", ef); code != 0 {
		t.Fatalf("verify against the export: exit %d\n%s%s", code, out, errOut)
	}
	// A proof altered in one byte does not verify.
	bad := strings.Replace(proof, "index ", "index 1", 1)
	if err := os.WriteFile(pf, []byte(bad), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, _, code := g.queryStatus("audit", "verify-proof", "--proof", pf, "--key", vkey); code != 1 {
		t.Fatalf("verify-proof of an altered proof: exit %d, want 1", code)
	}
	g.stop()
}

// TestCassandraAuditTwoGateways runs two gateways on one Cassandra
// keyspace that both receive events of one stream and both seal it: one
// log results, the same through either gateway, and it verifies.
func TestCassandraAuditTwoGateways(t *testing.T) {
	env := cassandraEnv(t)
	if _, errOut, err := runBin(t, env, "ingest", "migrate"); err != nil {
		t.Fatalf("ingest migrate: %v\n%s", err, errOut)
	}
	dir := t.TempDir()
	keyFile := filepath.Join(dir, "audit.key")
	if out, err := exec.Command(filepath.Join(bin, "ingest"), "audit", "keygen", "--name", "audit.e2e.example", "--out", keyFile).CombinedOutput(); err != nil {
		t.Fatalf("keygen: %v\n%s", err, out)
	}
	d := day(2)
	start := func(writer int, acceptLate, sealDelay string) *gateway {
		return startGateway(t, t.TempDir(), append(append([]string{fmt.Sprintf("SLUICE_BUCKETS_WRITER_ID=%d", writer)}, env...),
			auditEnv(keyFile, acceptLate, sealDelay)...)...)
	}
	gs := []*gateway{start(1, "60h", "60h10m"), start(2, "60h", "60h10m")}
	const perReq, reqs = 250, 8
	for r := range reqs {
		var b strings.Builder
		for i := r * perReq; i < (r+1)*perReq; i++ {
			fmt.Fprintf(&b, `{"event_id":"tw-%05d","stream":"shared","ts":%q,"actor":"a%d","action":"x","resource":"r","outcome":"ok"}`+"\n",
				i, d.Add(time.Duration(i*104729%86_400_000)*time.Millisecond).Format(time.RFC3339Nano), i%7)
		}
		if status, body := gs[r%2].post("/v1/audit", "application/x-ndjson", []byte(b.String())); status != 202 {
			t.Fatalf("POST audit: %d %s", status, body)
		}
	}
	for _, g := range gs {
		g.stop()
	}
	gs = []*gateway{start(1, "0s", "10m"), start(2, "0s", "10m")}
	deadline := time.Now().Add(time.Minute)
	var cps [2]string
	for i, g := range gs {
		for {
			out, _, code := g.queryStatus("audit", "checkpoint", "--stream", "shared")
			if code == 0 {
				cps[i] = out
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("not sealed after a minute:\n%s", g.logs())
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
	if cps[0] != cps[1] || !strings.Contains(cps[0], fmt.Sprintf("\n%d\n", perReq*reqs)) {
		t.Fatalf("the gateways serve different checkpoints:\n%s\n%s", cps[0], cps[1])
	}
	for _, g := range gs {
		out, errOut, code := g.queryStatus("audit", "verify", "--stream", "shared", "--from", d.Format(time.DateOnly))
		if code != 0 || !strings.Contains(out, fmt.Sprintf("events %d", perReq*reqs)) {
			t.Fatalf("verify: exit %d\n%s%s", code, out, errOut)
		}
		g.stop()
	}
}
