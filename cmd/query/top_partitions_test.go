package main

import (
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestPartitionsRanking: --largest and --hottest ask GET /v1/partitions/top
// and print the ranking in every format.
func TestPartitionsRanking(t *testing.T) {
	srv := newServer(t, func(w http.ResponseWriter, r *http.Request) bool {
		if r.URL.Path != "/v1/partitions/top" {
			return false
		}
		by := r.URL.Query().Get("by")
		rate := ""
		if by == "rate" {
			rate = `,"rows_per_second":12.5`
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"kind":"readings","day":"2026-11-22","by":"`+by+`","partitions":[{"kind":"readings","series":"press-4","day":"2026-11-22","sub_bucket":16777217,"state":"split",`+
			`"closed":true,"rows":100000,"bytes":3000000,"min_ts":"2026-11-22T00:00:00.000Z","max_ts":"2026-11-22T06:00:00.000Z"`+rate+`}]}`)
		return true
	})
	for _, tc := range []struct {
		name       string
		args       []string
		wantQuery  string
		wantStdout string
	}{
		{
			name:      "largest, json",
			args:      []string{"--largest", "--day", "2026-11-22", "--limit", "5", "--format", "json"},
			wantQuery: "by=rows&day=2026-11-22&kind=readings&limit=5",
			wantStdout: `{
  "kind": "readings",
  "day": "2026-11-22",
  "by": "rows",
  "partitions": [
    {
      "kind": "readings",
      "series": "press-4",
      "day": "2026-11-22",
      "sub_bucket": 16777217,
      "state": "split",
      "closed": true,
      "rows": 100000,
      "bytes": 3000000,
      "min_ts": "2026-11-22T00:00:00.000Z",
      "max_ts": "2026-11-22T06:00:00.000Z"
    }
  ]
}
`,
		},
		{
			name:      "largest by bytes of audit streams, csv",
			args:      []string{"--largest", "--by", "bytes", "--audit", "--format", "csv"},
			wantQuery: "by=bytes&kind=audit",
			wantStdout: "series,sub_bucket,state,closed,rows,bytes,min_ts,max_ts\n" +
				"press-4,16777217,split,true,100000,3000000,2026-11-22T00:00:00.000Z,2026-11-22T06:00:00.000Z\n",
		},
		{
			name:       "hottest, json",
			args:       []string{"--hottest", "--format", "json"},
			wantQuery:  "by=rate&kind=readings",
			wantStdout: `"rows_per_second": 12.5`,
		},
		{
			name:       "hottest, table",
			args:       []string{"--hottest"},
			wantQuery:  "by=rate&kind=readings",
			wantStdout: "ROWS_PER_SECOND",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			stdout, stderr, err := query(t, append(append([]string{"partitions"}, tc.args...), conn(srv)...)...)
			if err != nil {
				t.Fatal(err)
			}
			if strings.HasPrefix(tc.wantStdout, "{") || strings.Contains(tc.wantStdout, "\n") {
				if diff := cmp.Diff(tc.wantStdout, stdout); diff != "" {
					t.Errorf("stdout (-want +got):\n%s", diff)
				}
			} else if !strings.Contains(stdout, tc.wantStdout) {
				t.Errorf("stdout %q, want it to contain %q", stdout, tc.wantStdout)
			}
			if stderr != "" {
				t.Errorf("stderr = %q, want nothing", stderr)
			}
			reqs := srv.Requests()
			if got := reqs[len(reqs)-1]; got.Path != "/v1/partitions/top" || got.RawQuery != tc.wantQuery {
				t.Errorf("request %s?%s, want /v1/partitions/top?%s", got.Path, got.RawQuery, tc.wantQuery)
			}
		})
	}
}

func TestPartitionsRankingUsage(t *testing.T) {
	srv := newServer(t, nil)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--largest", "--hottest"}, "give --largest or --hottest, not both"},
		{[]string{"--largest", "--device", "d"}, "give neither --device nor --stream"},
		{[]string{"--largest", "--by", "size"}, `--by "size": want rows or bytes`},
		{[]string{"--hottest", "--limit", "101"}, "--limit 101: want 1..100"},
		{[]string{"--largest", "--day", "22-11-2026"}, `--day "22-11-2026"`},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			_, _, err := query(t, append(append([]string{"partitions"}, tc.args...), conn(srv)...)...)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %v, want it to contain %q", err, tc.want)
			}
		})
	}
}
