package main

import (
	"encoding/csv"
	"encoding/json"
	"net/http"
	"regexp"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/sluicehq/sluice/internal/client/clienttest"
)

// window selects the five readings of pump-17.
var window = []string{"--device", "pump-17", "--from", "2026-11-22T10:00:00Z", "--to", "2026-11-22T11:00:00Z"}

func readingsArgs(srv *clienttest.Server, extra ...string) []string {
	args := append([]string{"readings"}, window...)
	return append(append(args, extra...), conn(srv)...)
}

func TestReadingsFormats(t *testing.T) {
	srv := newServer(t, nil)
	for _, tc := range []struct {
		name       string
		flags      []string
		wantStdout string
	}{
		{
			name: "table",
			wantStdout: `TS                         rpm  temp_c  vibration  SEQ
2026-11-22T10:00:00.250Z  1180    21.5              42
2026-11-22T10:00:01.000Z  1181
2026-11-22T10:00:02.000Z            22       0.02   44
2026-11-22T10:00:03.000Z  1183                      45
2026-11-22T10:00:04.000Z  1184                      46
`,
		},
		{
			name:  "csv",
			flags: []string{"--format", "csv"},
			wantStdout: `ts,rpm,temp_c,vibration,seq
2026-11-22T10:00:00.250Z,1180,21.5,,42
2026-11-22T10:00:01.000Z,1181,,,
2026-11-22T10:00:02.000Z,,22,0.02,44
2026-11-22T10:00:03.000Z,1183,,,45
2026-11-22T10:00:04.000Z,1184,,,46
`,
		},
		{
			name:  "csv, one page with a subset of the metrics",
			flags: []string{"--format", "csv", "--limit", "2", "--all", "--max-rows", "1"},
			wantStdout: `ts,rpm,temp_c,seq
2026-11-22T10:00:00.250Z,1180,21.5,42
2026-11-22T10:00:01.000Z,1181,,
`,
		},
		{
			name:  "json",
			flags: []string{"--format", "json", "--limit", "2"},
			wantStdout: `{
  "readings": [
    {
      "device_id": "pump-17",
      "ts": "2026-11-22T10:00:00.250Z",
      "seq": 42,
      "metrics": {
        "rpm": 1180.0,
        "temp_c": 21.5
      }
    },
    {
      "device_id": "pump-17",
      "ts": "2026-11-22T10:00:01.000Z",
      "metrics": {
        "rpm": 1181.0
      }
    }
  ],
  "next_cursor": "CURSOR"
}
`,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			stdout, _, err := query(t, readingsArgs(srv, tc.flags...)...)
			if err != nil {
				t.Fatal(err)
			}
			stdout = regexp.MustCompile(`"next_cursor": "[^"]+"`).ReplaceAllString(stdout, `"next_cursor": "CURSOR"`)
			if diff := cmp.Diff(tc.wantStdout, stdout); diff != "" {
				t.Errorf("stdout (-want +got):\n%s", diff)
			}
		})
	}
}

// TestNextCursorPlacement checks where each format puts the cursor of the
// next page, and that the printed cursor continues where the page ended.
func TestNextCursorPlacement(t *testing.T) {
	srv := newServer(t, nil)
	nextLine := regexp.MustCompile(`^next page: --cursor (\S+)\n$`)
	for _, f := range []string{"table", "csv", "json"} {
		t.Run(f, func(t *testing.T) {
			stdout, stderr, err := query(t, readingsArgs(srv, "--format", f, "--limit", "3")...)
			if err != nil {
				t.Fatal(err)
			}
			var cursor string
			switch f {
			case "table":
				if stderr != "" {
					t.Errorf("stderr = %q, want nothing", stderr)
				}
				lines := strings.SplitAfter(strings.TrimSuffix(stdout, "\n"), "\n")
				m := nextLine.FindStringSubmatch(lines[len(lines)-1] + "\n")
				if m == nil || len(lines) != 5 { // header, 3 rows, next page
					t.Fatalf("stdout does not end with the next-page line after 3 rows:\n%s", stdout)
				}
				cursor = m[1]
			case "csv":
				recs, err := csv.NewReader(strings.NewReader(stdout)).ReadAll()
				if err != nil {
					t.Fatalf("stdout is not CSV: %v\n%s", err, stdout)
				}
				if len(recs) != 4 {
					t.Errorf("stdout has %d records, want header + 3", len(recs))
				}
				m := nextLine.FindStringSubmatch(stderr)
				if m == nil {
					t.Fatalf("stderr = %q, want the next-page line", stderr)
				}
				cursor = m[1]
			case "json":
				if stderr != "" {
					t.Errorf("stderr = %q, want nothing", stderr)
				}
				var body struct {
					Readings   []json.RawMessage `json:"readings"`
					NextCursor string            `json:"next_cursor"`
				}
				if err := json.Unmarshal([]byte(stdout), &body); err != nil {
					t.Fatal(err)
				}
				if len(body.Readings) != 3 || body.NextCursor == "" {
					t.Fatalf("got %d readings and cursor %q, want 3 and a cursor", len(body.Readings), body.NextCursor)
				}
				cursor = body.NextCursor
			}

			stdout, stderr, err = query(t, readingsArgs(srv, "--format", f, "--limit", "3", "--cursor", cursor)...)
			if err != nil {
				t.Fatal(err)
			}
			if strings.Contains(stdout+stderr, "next page") || strings.Contains(stdout, "next_cursor") {
				t.Errorf("last page still offers a next page:\n%s%s", stdout, stderr)
			}
			for _, want := range []string{"2026-11-22T10:00:03.000Z", "2026-11-22T10:00:04.000Z"} {
				if !strings.Contains(stdout, want) {
					t.Errorf("second page lacks %s:\n%s", want, stdout)
				}
			}
			if strings.Contains(stdout, "2026-11-22T10:00:02.000Z") {
				t.Errorf("second page repeats a row of the first:\n%s", stdout)
			}
		})
	}
}

func TestReadingsAll(t *testing.T) {
	for _, tc := range []struct {
		name         string
		flags        []string
		wantRows     int
		wantRequests int
		wantNext     bool // the output offers a next page
		wantStderr   string
	}{
		{name: "table, pages of 2", flags: []string{"--limit", "2"}, wantRows: 5, wantRequests: 3},
		{name: "csv, pages of 2", flags: []string{"--limit", "2", "--format", "csv"}, wantRows: 5, wantRequests: 3},
		{name: "json, pages of 2", flags: []string{"--limit", "2", "--format", "json"}, wantRows: 5, wantRequests: 3},
		{name: "one page", wantRows: 5, wantRequests: 1},
		{name: "max-rows stops on a page boundary", flags: []string{"--limit", "2", "--max-rows", "3"},
			wantRows: 4, wantRequests: 2, wantNext: true, wantStderr: "query: --all: stopped after 4 rows (--max-rows 3); more remain\n"},
		{name: "max-rows in json keeps the cursor", flags: []string{"--limit", "2", "--max-rows", "4", "--format", "json"},
			wantRows: 4, wantRequests: 2, wantNext: true, wantStderr: "query: --all: stopped after 4 rows (--max-rows 4); more remain\n"},
		{name: "max-rows equal to all rows", flags: []string{"--limit", "5", "--max-rows", "5"}, wantRows: 5, wantRequests: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := newServer(t, nil)
			stdout, stderr, err := query(t, readingsArgs(srv, append([]string{"--all"}, tc.flags...)...)...)
			if err != nil {
				t.Fatal(err)
			}
			if n := len(srv.Requests()); n != tc.wantRequests {
				t.Errorf("%d requests, want %d", n, tc.wantRequests)
			}
			rows, next := parseReadingsOutput(t, stdout)
			if rows != tc.wantRows {
				t.Errorf("%d rows, want %d:\n%s", rows, tc.wantRows, stdout)
			}
			if next != tc.wantNext {
				t.Errorf("next page offered: %v, want %v:\n%s\n%s", next, tc.wantNext, stdout, stderr)
			}
			if !strings.HasPrefix(stderr, tc.wantStderr) {
				t.Errorf("stderr = %q, want it to start with %q", stderr, tc.wantStderr)
			}
		})
	}
}

// parseReadingsOutput counts the readings in a table, CSV or JSON output
// and says whether it offers a next page (on stdout).
func parseReadingsOutput(t *testing.T, out string) (rows int, next bool) {
	t.Helper()
	if strings.HasPrefix(out, "{") {
		var body struct {
			Readings   []json.RawMessage `json:"readings"`
			NextCursor string            `json:"next_cursor"`
		}
		if err := json.Unmarshal([]byte(out), &body); err != nil {
			t.Fatalf("stdout is not one JSON object: %v", err)
		}
		return len(body.Readings), body.NextCursor != ""
	}
	headers := 0
	for _, line := range strings.Split(strings.TrimSuffix(out, "\n"), "\n") {
		switch {
		case strings.HasPrefix(line, "TS ") || strings.HasPrefix(line, "ts,"):
			headers++
		case strings.HasPrefix(line, "next page: --cursor "):
			next = true
		default:
			rows++
		}
	}
	if headers != 1 {
		t.Errorf("%d header lines, want 1:\n%s", headers, out)
	}
	return rows, next
}

func TestReadingsAllFailsPartWay(t *testing.T) {
	srv := newServer(t, func(w http.ResponseWriter, r *http.Request) bool {
		if r.URL.Query().Has("cursor") {
			clienttest.Error(w, http.StatusInternalServerError, "read failed: disk on fire")
			return true
		}
		return false
	})
	stdout, stderr, err := query(t, readingsArgs(srv, "--all", "--limit", "2")...)
	if err == nil || err.Error() != "read failed: disk on fire (HTTP 500)" {
		t.Fatalf("error = %v, want the server's 500", err)
	}
	if stdout != "" {
		t.Errorf("stdout = %q, want nothing", stdout)
	}
	if !regexp.MustCompile(`^query: --all: failed after 2 rows; resume with --cursor \S+\n$`).MatchString(stderr) {
		t.Errorf("stderr = %q, want a resume hint", stderr)
	}
}

func TestReadingsEmpty(t *testing.T) {
	srv := newServer(t, nil)
	for _, tc := range []struct{ format, want string }{
		{"table", "TS  SEQ\n"},
		{"csv", "ts,seq\n"},
		{"json", "{\n  \"readings\": []\n}\n"},
	} {
		t.Run(tc.format, func(t *testing.T) {
			stdout, stderr, err := query(t, "readings", "--device", "nobody", "--format", tc.format, "--url", srv.URL, "--token", token)
			if err != nil {
				t.Fatal(err)
			}
			if stdout != tc.want || stderr != "" {
				t.Errorf("stdout = %q, stderr = %q; want %q and nothing", stdout, stderr, tc.want)
			}
		})
	}
}
