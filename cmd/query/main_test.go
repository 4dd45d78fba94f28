package main

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/client"
	"github.com/sluicehq/sluice/internal/client/clienttest"
	"github.com/sluicehq/sluice/internal/model"
)

const token = "tenant-a-token"

func ts(s string) int64 {
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		panic(err)
	}
	return t.UnixMilli()
}

// fixture is the tenant the fake server serves: five readings of pump-17
// (metrics and seq vary), one of pump-18, two audit events, and partitions.
func fixture() clienttest.Tenant {
	day, _ := model.ParseDay("2026-11-22")
	m := func(kv ...any) []model.Metric {
		var out []model.Metric
		for i := 0; i < len(kv); i += 2 {
			out = append(out, model.Metric{Name: kv[i].(string), Value: kv[i+1].(float64)})
		}
		return out
	}
	return clienttest.Tenant{
		Readings: []model.Reading{
			{DeviceID: "pump-17", TS: ts("2026-11-22T10:00:00.25Z"), Seq: 42, HasSeq: true, Metrics: m("rpm", 1180.0, "temp_c", 21.5)},
			{DeviceID: "pump-17", TS: ts("2026-11-22T10:00:01Z"), Metrics: m("rpm", 1181.0)},
			{DeviceID: "pump-17", TS: ts("2026-11-22T10:00:02Z"), Seq: 44, HasSeq: true, Metrics: m("temp_c", 22.0, "vibration", 0.02)},
			{DeviceID: "pump-17", TS: ts("2026-11-22T10:00:03Z"), Seq: 45, HasSeq: true, Metrics: m("rpm", 1183.0)},
			{DeviceID: "pump-17", TS: ts("2026-11-22T10:00:04Z"), Seq: 46, HasSeq: true, Metrics: m("rpm", 1184.0)},
			{DeviceID: "pump-18", TS: ts("2026-11-22T10:00:00Z"), Metrics: m("rpm", 1.0)},
		},
		Events: []model.AuditEvent{
			{EventID: "evt-1", Stream: "billing-api", TS: ts("2026-11-22T10:00:00Z"), Actor: "user:42",
				Action: "invoice.refund", Resource: "invoice:981", Outcome: "success", Attributes: []byte(`{"amount": 12.5}`)},
			{EventID: "evt-2", Stream: "billing-api", TS: ts("2026-11-22T10:30:00Z"), Action: "login"},
		},
		Partitions: []model.PartitionInfo{
			{Key: model.PartitionKey{Kind: model.KindReadings, Series: "pump-17", Day: day, Sub: 0}, State: "split",
				Closed: true, Rows: 200000, Bytes: 1288490, MinTS: ts("2026-11-22T00:00:00Z"), MaxTS: ts("2026-11-22T09:59:59.999Z")},
			{Key: model.PartitionKey{Kind: model.KindReadings, Series: "pump-17", Day: day, Sub: 1}, State: "split",
				Rows: 5, Bytes: 300, MinTS: ts("2026-11-22T10:00:00.25Z"), MaxTS: ts("2026-11-22T10:00:04Z")},
			{Key: model.PartitionKey{Kind: model.KindAudit, Series: "billing-api", Day: day}, State: "single",
				Rows: 2, Bytes: 120, MinTS: ts("2026-11-22T10:00:00Z"), MaxTS: ts("2026-11-22T10:30:00Z")},
		},
	}
}

func newServer(t *testing.T, hook func(http.ResponseWriter, *http.Request) bool) *clienttest.Server {
	t.Helper()
	return clienttest.New(t, clienttest.Config{
		Tenants: map[string]clienttest.Tenant{token: fixture()},
		Now:     func() time.Time { return time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC) },
		Hook:    hook,
	})
}

// conn returns the flags that point a command at srv.
func conn(srv *clienttest.Server) []string { return []string{"--url", srv.URL, "--token", token} }

// query calls run with args and returns what it wrote.
func query(t *testing.T, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	var out, errb bytes.Buffer
	err = run(context.Background(), args, &out, &errb)
	return out.String(), errb.String(), err
}

// queryEnv is query with a fixed clock, no environment and retries that do
// not wait.
func queryEnv(t *testing.T, now time.Time, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	var out, errb bytes.Buffer
	e := &env{stdout: &out, stderr: &errb, getenv: func(string) string { return "" },
		now: func() time.Time { return now }, retry: client.Retry{Attempts: 3}}
	err = runEnv(context.Background(), e, args)
	return out.String(), errb.String(), err
}

func TestUsageErrors(t *testing.T) {
	t.Setenv("SLUICE_URL", "")
	t.Setenv("SLUICE_TOKEN", "")
	srv := newServer(t, nil)
	for _, tc := range []struct {
		name    string
		args    []string
		noConn  bool // do not add --url and --token
		wantErr string
	}{
		{name: "no command", args: nil, noConn: true, wantErr: "no command given"},
		{name: "unknown command", args: []string{"frobnicate"}, noConn: true, wantErr: `unknown command "frobnicate"`},
		{name: "help for unknown command", args: []string{"help", "frobnicate"}, noConn: true, wantErr: `unknown command "frobnicate"`},
		{name: "flags before command", args: []string{"--url", "x", "readings"}, noConn: true, wantErr: "flags go after the command"},
		{name: "missing device", args: []string{"readings"}, wantErr: "--device is required"},
		{name: "unknown flag", args: []string{"readings", "--devise", "pump-17"}, wantErr: "flag provided but not defined: -devise"},
		{name: "positional argument", args: []string{"readings", "--device", "pump-17", "extra"}, wantErr: `unexpected argument "extra"`},
		{name: "bad from", args: []string{"readings", "--device", "d", "--from", "yesterday"}, wantErr: `--from "yesterday": want RFC 3339`},
		{name: "bad to", args: []string{"readings", "--device", "d", "--to", "2026-11-22T10:00:00"}, wantErr: `--to "2026-11-22T10:00:00": want RFC 3339 with a zone`},
		{name: "bad relative", args: []string{"readings", "--device", "d", "--from", "-3y"}, wantErr: `--from "-3y": want a relative time like -1h`},
		{name: "epoch seconds", args: []string{"readings", "--device", "d", "--from", "1763800000"}, wantErr: "looks like epoch seconds; want epoch milliseconds (1763800000000)"},
		{name: "from after to", args: []string{"readings", "--device", "d", "--from", "2026-11-23", "--to", "2026-11-22"},
			wantErr: "--from (2026-11-23T00:00:00.000Z) must be before --to (2026-11-22T00:00:00.000Z)"},
		{name: "empty relative range", args: []string{"readings", "--device", "d", "--from", "-1h", "--to", "-2h"}, wantErr: "must be before --to"},
		{name: "limit 0", args: []string{"readings", "--device", "d", "--limit", "0"}, wantErr: "--limit 0: want 1..10000"},
		{name: "limit too big", args: []string{"audit", "--stream", "s", "--limit", "10001"}, wantErr: "--limit 10001: want 1..10000"},
		{name: "limit not a number", args: []string{"readings", "--device", "d", "--limit", "ten"}, wantErr: `invalid value "ten" for flag -limit`},
		{name: "bad format", args: []string{"readings", "--device", "d", "--format", "xml"}, wantErr: `--format "xml": want table, csv or json`},
		{name: "max-rows without all", args: []string{"readings", "--device", "d", "--max-rows", "5"}, wantErr: "--max-rows only applies with --all"},
		{name: "max-rows 0", args: []string{"readings", "--device", "d", "--all", "--max-rows", "0"}, wantErr: "--max-rows 0: must be at least 1"},
		{name: "timeout 0", args: []string{"readings", "--device", "d", "--timeout", "0s"}, wantErr: "--timeout 0s: must be positive"},
		{name: "no token", args: []string{"readings", "--device", "d", "--url", "http://127.0.0.1:1"}, noConn: true, wantErr: "no token: set --token or SLUICE_TOKEN"},
		{name: "bad url", args: []string{"readings", "--device", "d", "--token", "t", "--url", "localhost:8080"}, noConn: true, wantErr: `--url: base URL "localhost:8080"`},
		{name: "missing stream", args: []string{"audit", "--from", "-1h"}, wantErr: "--stream is required"},
		{name: "partitions device and stream", args: []string{"partitions", "--device", "d", "--stream", "s", "--day", "2026-11-22"}, wantErr: "give --device or --stream, not both"},
		{name: "partitions neither", args: []string{"partitions", "--day", "2026-11-22"}, wantErr: "--device or --stream is required"},
		{name: "partitions no day", args: []string{"partitions", "--device", "d"}, wantErr: "--day is required"},
		{name: "partitions bad day", args: []string{"partitions", "--device", "d", "--day", "22/11/2026"}, wantErr: `--day "22/11/2026": want YYYY-MM-DD`},
		{name: "rollups from after to", args: []string{"rollups", "--device", "d", "--metric", "m", "--from", "2026-11-23", "--to", "2026-11-22"},
			wantErr: "--from (2026-11-23T00:00:00.000Z) must be before --to (2026-11-22T00:00:00.000Z)"},
		{name: "top bad from", args: []string{"top", "--metric", "m", "--from", "yesterday"}, wantErr: `--from "yesterday": want RFC 3339`},
		{name: "rebuild without to", args: []string{"rollups", "rebuild", "--from", "-1h"}, wantErr: "--from and --to are required"},
		{name: "rebuild bad to", args: []string{"rollups", "rebuild", "--from", "-1h", "--to", "soon"}, wantErr: `--to "soon"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := len(srv.Requests())
			args := tc.args
			if !tc.noConn {
				args = append(args, conn(srv)...)
			}
			stdout, _, err := query(t, args...)
			var ue *usageError
			if !errors.As(err, &ue) {
				t.Fatalf("error = %v (%T), want a usage error", err, err)
			}
			if !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("error = %q, want it to contain %q", err, tc.wantErr)
			}
			if code := report(&bytes.Buffer{}, err); code != 2 {
				t.Errorf("exit status %d, want 2", code)
			}
			if stdout != "" {
				t.Errorf("stdout = %q, want nothing", stdout)
			}
			if n := len(srv.Requests()) - before; n != 0 {
				t.Errorf("%d requests reached the server, want none", n)
			}
		})
	}
}

func TestHelp(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want []string
	}{
		{[]string{"help"}, []string{"Usage:\n  query <command> [flags]", "readings", "audit", "partitions", "Examples:", "query readings --device pump-17 --from -1h"}},
		{[]string{"-h"}, []string{"Commands:", "partitions"}},
		{[]string{"--help"}, []string{"Commands:"}},
		{[]string{"help", "readings"}, []string{"Usage: query readings --device D [--from T]", "--max-rows N", "--url URL", "Examples:"}},
		{[]string{"readings", "-h"}, []string{"Usage: query readings", "--cursor CURSOR"}},
		{[]string{"audit", "--help"}, []string{"Usage: query audit --stream S"}},
		{[]string{"partitions", "-h"}, []string{"Usage: query partitions (--device D | --stream S) --day YYYY-MM-DD"}},
		{[]string{"help", "rollups", "verify"}, []string{"Usage: query rollups verify --day YYYY-MM-DD [--format table|csv|json]"}},
		{[]string{"rollups", "rebuild", "-h"}, []string{"Usage: query rollups rebuild --from T --to T [--device D] [--format table|csv|json]"}},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			stdout, stderr, err := query(t, tc.args...)
			if err != nil {
				t.Fatalf("error = %v, want none", err)
			}
			if stderr != "" {
				t.Errorf("stderr = %q, want nothing", stderr)
			}
			for _, w := range tc.want {
				if !strings.Contains(stdout, w) {
					t.Errorf("help does not contain %q:\n%s", w, stdout)
				}
			}
		})
	}
}

func TestReport(t *testing.T) {
	for _, tc := range []struct {
		name     string
		err      error
		wantCode int
		wantOut  string
	}{
		{"success", nil, 0, ""},
		{"usage", usagef("readings", "--device is required"), 2, "query: --device is required\nrun 'query readings -h' for usage\n"},
		{"top-level usage", &usageError{err: errors.New("no command given")}, 2, "query: no command given\nrun 'query help' for usage\n"},
		{"server", &client.APIError{Status: 400, Message: "parameter limit: must be 1..10000"}, 1, "query: parameter limit: must be 1..10000 (HTTP 400)\n"},
		{"other", errors.New("get http://x/v1/readings: connection refused"), 1, "query: get http://x/v1/readings: connection refused\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var b bytes.Buffer
			if code := report(&b, tc.err); code != tc.wantCode {
				t.Errorf("exit status %d, want %d", code, tc.wantCode)
			}
			if b.String() != tc.wantOut {
				t.Errorf("output %q, want %q", b.String(), tc.wantOut)
			}
		})
	}
}

func TestServerErrors(t *testing.T) {
	srv := newServer(t, func(w http.ResponseWriter, r *http.Request) bool {
		if r.URL.Query().Get("device") == "broken" {
			clienttest.Error(w, http.StatusBadRequest, "parameter device: no such thing")
			return true
		}
		return false
	})
	for _, tc := range []struct {
		name    string
		args    []string
		wantOut string
	}{
		{"400 names the parameter", append([]string{"readings", "--device", "broken"}, conn(srv)...),
			"query: parameter device: no such thing (HTTP 400)\n"},
		{"401 bad token", []string{"readings", "--device", "pump-17", "--url", srv.URL, "--token", "nope"},
			"query: invalid or missing bearer token (HTTP 401)\n"},
		{"bad cursor", append([]string{"audit", "--stream", "billing-api", "--cursor", "garbage!"}, conn(srv)...),
			"query: parameter cursor: invalid cursor (HTTP 400)\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			stdout, _, err := query(t, tc.args...)
			var apiErr *client.APIError
			if !errors.As(err, &apiErr) {
				t.Fatalf("error = %v (%T), want *client.APIError", err, err)
			}
			var b bytes.Buffer
			if code := report(&b, err); code != 1 {
				t.Errorf("exit status %d, want 1", code)
			}
			if b.String() != tc.wantOut {
				t.Errorf("reported %q, want %q", b.String(), tc.wantOut)
			}
			if stdout != "" {
				t.Errorf("stdout = %q, want nothing", stdout)
			}
		})
	}
}

func TestBusyIsRetried(t *testing.T) {
	busy := 1
	srv := newServer(t, func(w http.ResponseWriter, r *http.Request) bool {
		if busy > 0 {
			busy--
			clienttest.Busy(w, 0)
			return true
		}
		return false
	})
	args := append([]string{"partitions", "--device", "pump-17", "--day", "2026-11-22", "--format", "csv"}, conn(srv)...)
	stdout, stderr, err := queryEnv(t, time.Now(), args...)
	if err != nil {
		t.Fatal(err)
	}
	if want := "query: busy, retry later (HTTP 503); retrying in 0s\n"; stderr != want {
		t.Errorf("stderr = %q, want %q", stderr, want)
	}
	if n := strings.Count(stdout, "\n"); n != 3 {
		t.Errorf("stdout has %d lines, want 3:\n%s", n, stdout)
	}
}

func TestEnvironment(t *testing.T) {
	srv := newServer(t, nil)
	args := []string{"readings", "--device", "pump-17", "--from", "2026-11-22T10:00:00Z", "--to", "2026-11-22T11:00:00Z"}
	for _, tc := range []struct {
		name       string
		envURL     string
		envToken   string
		extra      []string
		wantStatus int // 0 for success
	}{
		{name: "url and token from env", envURL: srv.URL, envToken: token},
		{name: "flag token beats env", envURL: srv.URL, envToken: "wrong", extra: []string{"--token", token}},
		{name: "env token used when flag absent", envURL: srv.URL, envToken: "wrong", wantStatus: 401},
		{name: "flag url beats env", envURL: "http://127.0.0.1:1", envToken: token, extra: []string{"--url", srv.URL}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("SLUICE_URL", tc.envURL)
			t.Setenv("SLUICE_TOKEN", tc.envToken)
			_, _, err := query(t, append(args, tc.extra...)...)
			var apiErr *client.APIError
			switch {
			case tc.wantStatus == 0 && err != nil:
				t.Fatalf("error = %v, want none", err)
			case tc.wantStatus != 0 && (!errors.As(err, &apiErr) || apiErr.Status != tc.wantStatus):
				t.Fatalf("error = %v, want HTTP %d", err, tc.wantStatus)
			}
		})
	}
}

func TestDefaultRange(t *testing.T) {
	srv := newServer(t, nil)
	now := time.Date(2026, 11, 22, 12, 0, 0, 123456789, time.UTC)
	for _, tc := range []struct {
		name             string
		flags            []string
		wantFrom, wantTo string
	}{
		{"defaults: the 24h before now", nil, "2026-11-21T12:00:00.123Z", "2026-11-22T12:00:00.123Z"},
		{"relative from", []string{"--from", "-1h"}, "2026-11-22T11:00:00.123Z", "2026-11-22T12:00:00.123Z"},
		{"relative to moves the default from", []string{"--to", "-1h"}, "2026-11-21T11:00:00.123Z", "2026-11-22T11:00:00.123Z"},
		{"now and days", []string{"--from", "-7d", "--to", "now"}, "2026-11-15T12:00:00.123Z", "2026-11-22T12:00:00.123Z"},
		{"epoch ms and date", []string{"--from", "1763805600000", "--to", "2026-11-23"}, "2025-11-22T10:00:00.000Z", "2026-11-23T00:00:00.000Z"},
		{"offset is converted to UTC", []string{"--from", "2026-11-22T10:00:00+01:00", "--to", "2026-11-22T10:00:00.5-01:00"},
			"2026-11-22T09:00:00.000Z", "2026-11-22T11:00:00.500Z"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := append(append([]string{"readings", "--device", "pump-17", "--format", "json"}, tc.flags...), conn(srv)...)
			if _, _, err := queryEnv(t, now, args...); err != nil {
				t.Fatal(err)
			}
			reqs := srv.Requests()
			q := reqs[len(reqs)-1].Query()
			if q.Get("from") != tc.wantFrom || q.Get("to") != tc.wantTo {
				t.Errorf("sent from=%s to=%s, want from=%s to=%s", q.Get("from"), q.Get("to"), tc.wantFrom, tc.wantTo)
			}
			if q.Has("limit") || q.Has("cursor") {
				t.Errorf("sent %s, want no limit or cursor", q.Encode())
			}
		})
	}
}
