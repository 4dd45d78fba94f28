package main

import (
	"io"
	"net/http"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestPartitions(t *testing.T) {
	srv := newServer(t, nil)
	for _, tc := range []struct {
		name       string
		args       []string
		wantQuery  string
		wantStdout string
	}{
		{
			name:      "device, table with total",
			args:      []string{"--device", "pump-17", "--day", "2026-11-22"},
			wantQuery: "day=2026-11-22&kind=readings&series=pump-17",
			wantStdout: `SUB_BUCKET  STATE  CLOSED    ROWS    BYTES     SIZE  MIN_TS                    MAX_TS
         0  split  true    200000  1288490  1.2 MiB  2026-11-22T00:00:00.000Z  2026-11-22T09:59:59.999Z
         1  split  false        5      300    300 B  2026-11-22T10:00:00.250Z  2026-11-22T10:00:04.000Z
total: 2 partitions, 1 open, 200005 rows, 1288790 bytes (1.2 MiB)
`,
		},
		{
			name:      "stream, csv",
			args:      []string{"--stream", "billing-api", "--day", "2026-11-22", "--format", "csv"},
			wantQuery: "day=2026-11-22&kind=audit&series=billing-api",
			wantStdout: `sub_bucket,state,closed,rows,bytes,min_ts,max_ts
0,single,false,2,120,2026-11-22T10:00:00.000Z,2026-11-22T10:30:00.000Z
`,
		},
		{
			name:      "stream, json",
			args:      []string{"--stream", "billing-api", "--day", "2026-11-22", "--format", "json"},
			wantQuery: "day=2026-11-22&kind=audit&series=billing-api",
			wantStdout: `{
  "partitions": [
    {
      "kind": "audit",
      "series": "billing-api",
      "day": "2026-11-22",
      "sub_bucket": 0,
      "state": "single",
      "closed": false,
      "rows": 2,
      "bytes": 120,
      "min_ts": "2026-11-22T10:00:00.000Z",
      "max_ts": "2026-11-22T10:30:00.000Z"
    }
  ]
}
`,
		},
		{
			name:      "no partitions",
			args:      []string{"--device", "pump-17", "--day", "2026-11-21"},
			wantQuery: "day=2026-11-21&kind=readings&series=pump-17",
			wantStdout: `SUB_BUCKET  STATE  CLOSED  ROWS  BYTES  SIZE  MIN_TS  MAX_TS
total: 0 partitions, 0 open, 0 rows, 0 bytes (0 B)
`,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			stdout, stderr, err := query(t, append(append([]string{"partitions"}, tc.args...), conn(srv)...)...)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.wantStdout, stdout); diff != "" {
				t.Errorf("stdout (-want +got):\n%s", diff)
			}
			if stderr != "" {
				t.Errorf("stderr = %q, want nothing", stderr)
			}
			reqs := srv.Requests()
			if got := reqs[len(reqs)-1]; got.Path != "/v1/partitions" || got.RawQuery != tc.wantQuery {
				t.Errorf("request %s?%s, want /v1/partitions?%s", got.Path, got.RawQuery, tc.wantQuery)
			}
		})
	}
}

// TestPartitionsUnsettled: a listing the gateway could not settle says so,
// in the JSON object and, for the other formats, on stderr.
func TestPartitionsUnsettled(t *testing.T) {
	srv := newServer(t, func(w http.ResponseWriter, r *http.Request) bool {
		if r.URL.Path != "/v1/partitions" {
			return false
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"partitions":[{"kind":"readings","series":"pump-17","day":"2026-11-22","sub_bucket":0,"state":"single",`+
			`"closed":false,"rows":3,"bytes":90,"min_ts":"2026-11-22T10:00:00.000Z","max_ts":"2026-11-22T10:00:02.000Z"}],"unsettled":true}`)
		return true
	})
	const warning = "query: the gateway could not settle these entries first: their rows, bytes and times may run ahead of the partitions\n"
	for _, tc := range []struct {
		format               string
		wantStdout, wantWarn string
	}{
		{"json", `{
  "partitions": [
    {
      "kind": "readings",
      "series": "pump-17",
      "day": "2026-11-22",
      "sub_bucket": 0,
      "state": "single",
      "closed": false,
      "rows": 3,
      "bytes": 90,
      "min_ts": "2026-11-22T10:00:00.000Z",
      "max_ts": "2026-11-22T10:00:02.000Z"
    }
  ],
  "unsettled": true
}
`, ""},
		{"csv", "sub_bucket,state,closed,rows,bytes,min_ts,max_ts\n0,single,false,3,90,2026-11-22T10:00:00.000Z,2026-11-22T10:00:02.000Z\n", warning},
	} {
		t.Run(tc.format, func(t *testing.T) {
			stdout, stderr, err := query(t, append([]string{"partitions", "--device", "pump-17", "--day", "2026-11-22", "--format", tc.format}, conn(srv)...)...)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.wantStdout, stdout); diff != "" {
				t.Errorf("stdout (-want +got):\n%s", diff)
			}
			if stderr != tc.wantWarn {
				t.Errorf("stderr = %q, want %q", stderr, tc.wantWarn)
			}
		})
	}
}
