package main

import (
	"regexp"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestAudit(t *testing.T) {
	srv := newServer(t, nil)
	base := []string{"audit", "--stream", "billing-api", "--from", "2026-11-22T00:00:00Z", "--to", "2026-11-23T00:00:00Z"}
	for _, tc := range []struct {
		name       string
		flags      []string
		wantStdout string
		wantStderr string // a regular expression
	}{
		{
			name: "table",
			wantStdout: `TS                        EVENT_ID  ACTOR    ACTION          RESOURCE     OUTCOME  ATTRIBUTES
2026-11-22T10:00:00.000Z  evt-1     user:42  invoice.refund  invoice:981  success  {"amount":12.5}
2026-11-22T10:30:00.000Z  evt-2              login
`,
		},
		{
			name:  "csv with a next page",
			flags: []string{"--format", "csv", "--limit", "1"},
			wantStdout: `ts,event_id,actor,action,resource,outcome,attributes
2026-11-22T10:00:00.000Z,evt-1,user:42,invoice.refund,invoice:981,success,"{""amount"":12.5}"
`,
			wantStderr: `next page: --cursor \S+\n`,
		},
		{
			name:  "json, all pages",
			flags: []string{"--format", "json", "--limit", "1", "--all"},
			wantStdout: `{
  "events": [
    {
      "event_id": "evt-1",
      "stream": "billing-api",
      "ts": "2026-11-22T10:00:00.000Z",
      "actor": "user:42",
      "action": "invoice.refund",
      "resource": "invoice:981",
      "outcome": "success",
      "attributes": {
        "amount": 12.5
      }
    },
    {
      "event_id": "evt-2",
      "stream": "billing-api",
      "ts": "2026-11-22T10:30:00.000Z",
      "action": "login"
    }
  ]
}
`,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			stdout, stderr, err := query(t, append(append(base, tc.flags...), conn(srv)...)...)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.wantStdout, stdout); diff != "" {
				t.Errorf("stdout (-want +got):\n%s", diff)
			}
			if !regexp.MustCompile("^" + tc.wantStderr + "$").MatchString(stderr) {
				t.Errorf("stderr = %q, want it to match %q", stderr, tc.wantStderr)
			}
		})
	}
}
