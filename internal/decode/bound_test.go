package decode

import (
	"strings"
	"testing"
)

func TestBounds(t *testing.T) {
	lim := DefaultLimits()
	lim.MaxRows, lim.MaxMetrics = 100, 4
	cases := []struct {
		name            string
		body            string
		readings, audit int
	}{
		{"empty", "", 1, 1},
		{"one reading", `{"device_id":"d","ts":1,"metrics":{"a":1,"b":2}}`, 3, 2},
		{"rfc 3339 time: its colons are not keys'", `{"device_id":"d","ts":"2026-01-01T00:00:00Z","metrics":{"a":1}}`, 2, 2},
		{"blanks before a key's colon", `{"device_id" : "d", "ts"` + "\n\t:1, \"metrics\"\r: {\"a\" :1}}", 2, 2},
		{"array", `[{"ts":1,"metrics":{"a":1}},{"ts":2,"metrics":{"a":1,"b":2,"c":3}}]`, 4, 4},
		{"capped by max_rows × max_metrics", strings.Repeat(`{"ts":1,"metrics":{"a":1,"b":2,"c":3,"d":4}}`+"\n", 200), 400, 100},
		{"colons in a string", `{"device_id":"` + strings.Repeat(":", 50) + `","ts":1,"metrics":{"a":1}}`, 2, 2},
		{"braces and keys in string values", `{"ts":1,"metrics":{"a":"{{{{","b":"\"}{:\"","c":1}}`, 3, 7},
		{"bare colons reserve nothing", strings.Repeat(":", 6000), 1, 1},
		{"empty keys: at most one cell per six bytes", strings.Repeat(`"":`, 60), 30, 1},
		{"not json", strings.Repeat("}{", 10), 1, 10},
	}
	for _, tc := range cases {
		if got := ReadingCellsBound([]byte(tc.body), lim); got != tc.readings {
			t.Errorf("%s: ReadingCellsBound %d, want %d", tc.name, got, tc.readings)
		}
		if got := AuditRowsBound([]byte(tc.body), lim); got != tc.audit {
			t.Errorf("%s: AuditRowsBound %d, want %d", tc.name, got, tc.audit)
		}
	}
}
