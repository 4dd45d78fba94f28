package main

import (
	"strings"
	"testing"
	"time"
)

func TestParseTime(t *testing.T) {
	now := time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		in      string
		want    time.Time
		wantErr string
	}{
		{in: "now", want: now},
		{in: "-1h", want: now.Add(-time.Hour)},
		{in: "-30m", want: now.Add(-30 * time.Minute)},
		{in: "-90s", want: now.Add(-90 * time.Second)},
		{in: "-500ms", want: now.Add(-500 * time.Millisecond)},
		{in: "-7d", want: now.Add(-7 * 24 * time.Hour)},
		{in: "-2w", want: now.Add(-14 * 24 * time.Hour)},
		{in: "-1d12h", want: now.Add(-36 * time.Hour)},
		{in: "-1.5h", want: now.Add(-90 * time.Minute)},
		{in: "2026-11-22T10:00:00Z", want: time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC)},
		{in: "2026-11-22T10:00:00.25Z", want: time.Date(2026, 11, 22, 10, 0, 0, 250e6, time.UTC)},
		{in: "2026-11-22T11:00:00+01:00", want: time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC)},
		{in: "2026-11-22", want: time.Date(2026, 11, 22, 0, 0, 0, 0, time.UTC)},
		{in: "1795341600000", want: time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC)},
		{in: "0", want: time.Unix(0, 0)},
		{in: "1795341600", wantErr: "looks like epoch seconds"},
		{in: "99999999999999999999", wantErr: "want RFC 3339"},
		{in: "253402300800000", want: time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC)},
		{in: "253402300800001", wantErr: "outside the valid time range"},
		{in: "9223372036854775807", wantErr: "outside the valid time range"},
		{in: "0000-01-01T00:00:00Z", want: time.Date(0, 1, 1, 0, 0, 0, 0, time.UTC)},
		{in: "", wantErr: "want RFC 3339"},
		{in: "yesterday", wantErr: "want RFC 3339"},
		{in: "2026-11-22 10:00", wantErr: "want RFC 3339"},
		{in: "+1h", wantErr: "want RFC 3339"},
		{in: "-", wantErr: "want a relative time"},
		{in: "-1", wantErr: "want a relative time"},
		{in: "-h", wantErr: "want a relative time"},
		{in: "-1y", wantErr: "want a relative time"},
		{in: "-1h-2m", wantErr: "want a relative time"},
		{in: "-1..2h", wantErr: "want a relative time"},
		{in: "-40000d", wantErr: "more than 100 years"},
	} {
		t.Run(tc.in, func(t *testing.T) {
			got, err := parseTime(tc.in, now)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("parseTime(%q) error = %v, want it to contain %q", tc.in, err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("parseTime(%q): %v", tc.in, err)
			}
			if !got.Equal(tc.want) {
				t.Errorf("parseTime(%q) = %v, want %v", tc.in, got, tc.want)
			}
		})
	}
}

func TestShellWord(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"eyJ2IjoxfQ", "eyJ2IjoxfQ"},
		{"a-b_c.d=", "a-b_c.d="},
		{"", "''"},
		{"a b", "'a b'"},
		{"it's", `'it'\''s'`},
		{"$x", "'$x'"},
	} {
		if got := shellWord(tc.in); got != tc.want {
			t.Errorf("shellWord(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}
