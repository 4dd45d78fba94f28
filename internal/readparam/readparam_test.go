package readparam_test

import (
	"math"
	"net/url"
	"strconv"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/internal/model"
	"github.com/sluicehq/sluice/internal/readparam"
)

func TestTime(t *testing.T) {
	tests := []struct {
		in   string
		want int64
		err  string // "" for none
	}{
		{"0", 0, ""},
		{"1763812800000", 1763812800000, ""},
		{"2026-11-22T12:00:00Z", 1795348800000, ""},
		{"2026-11-22T13:00:00+01:00", 1795348800000, ""},
		{"0000-01-01T00:00:00Z", model.MinTime, ""},
		{"9999-12-31T23:59:59.999Z", model.MaxTime - 1, ""},
		{strconv.FormatInt(model.MinTime, 10), model.MinTime, ""},
		{strconv.FormatInt(model.MaxTime, 10), model.MaxTime, ""},
		{strconv.FormatInt(model.MinTime-1, 10), 0, "parameter p: -62167219200001 is outside the valid time range"},
		{strconv.FormatInt(model.MaxTime+1, 10), 0, "parameter p: 253402300800001 is outside the valid time range"},
		{strconv.FormatInt(math.MaxInt64, 10), 0, "outside the valid time range"},
		{strconv.FormatInt(math.MinInt64, 10), 0, "outside the valid time range"},
		{"9223372036854775808", 0, "outside the valid time range"},
		{"-9223372036854775809", 0, "outside the valid time range"},
		{"0000-01-01T00:00:00+00:01", 0, "outside the valid time range"},
		{"9999-12-31T23:59:59-00:01", 0, "outside the valid time range"},
		{"yesterday", 0, `parameter p: "yesterday" is neither RFC 3339 nor epoch milliseconds`},
		{"", 0, "neither RFC 3339"},
		{strings.Repeat("1", 65), 0, "parameter p: longer than 64 characters"},
	}
	for _, tc := range tests {
		got, err := readparam.Time("p", tc.in)
		if tc.err == "" {
			if err != nil || got != tc.want {
				t.Errorf("Time(%q) = %d, %v; want %d", tc.in, got, err, tc.want)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), tc.err) || !readparam.IsParam(err) {
			t.Errorf("Time(%q) = %d, %v; want an error containing %q", tc.in, got, err, tc.err)
		}
	}
}

func TestParseSpan(t *testing.T) {
	const day = model.MillisPerDay
	tests := []struct {
		query    string
		defTo    int64
		from, to int64
		err      string
	}{
		{"", 10 * day, 9 * day, 10 * day, ""},
		{"to=5", 0, 5 - day, 5, ""},
		{"from=1&to=2", 0, 1, 2, ""},
		{"", math.MaxInt64, model.MaxTime - day, model.MaxTime, ""},         // defaults clamp
		{"", math.MinInt64, model.MinTime, model.MinTime, "parameter to"},   // nothing fits
		{"to=-62167219200000", 0, 0, 0, "parameter to: must be after from"}, // from cannot go below MinTime
		{"from=5&to=5", 0, 0, 0, "parameter to: must be after from"},
		{"from=x", 0, 0, 0, "parameter from"},
		{"to=x", 0, 0, 0, "parameter to"},
		{"from=-9223372036854775808&to=9223372036854775807", 0, 0, 0, "parameter to"},
	}
	for _, tc := range tests {
		v, _ := url.ParseQuery(tc.query)
		s, err := readparam.ParseSpan(v, tc.defTo)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("ParseSpan(%q, %d) = %+v, %v; want error %q", tc.query, tc.defTo, s, err, tc.err)
			}
			continue
		}
		if err != nil || s.From != tc.from || s.To != tc.to {
			t.Errorf("ParseSpan(%q, %d) = %+v, %v; want [%d, %d)", tc.query, tc.defTo, s, err, tc.from, tc.to)
		}
	}
}

// spanDays is the number of UTC days s touches, 0 for a span that is not
// valid (model.SpanDays).
func spanDays(s readparam.Span) int64 {
	n, err := model.SpanDays(s.From, s.To)
	if err != nil {
		return 0
	}
	return n
}

func TestCheckDays(t *testing.T) {
	const day = model.MillisPerDay
	tests := []struct {
		s    readparam.Span
		max  int
		days int64
		ok   bool
	}{
		{readparam.Span{From: 0, To: day}, 1, 1, true},
		{readparam.Span{From: 0, To: day + 1}, 1, 2, false},
		{readparam.Span{From: day - 1, To: day + 1}, 1, 2, false},
		{readparam.Span{From: 0, To: 400 * day}, 400, 400, true},
		{readparam.Span{From: model.MinTime, To: model.MaxTime}, 400, int64(model.MaxDay - model.MinDay), false},
		{readparam.Span{From: math.MinInt64, To: math.MaxInt64}, math.MaxInt, 0, false},
	}
	for _, tc := range tests {
		err := tc.s.CheckDays(tc.max, "read.max_days")
		if (err == nil) != tc.ok || spanDays(tc.s) != tc.days {
			t.Errorf("%+v.CheckDays(%d) = %v, days %d; want ok %v, %d days", tc.s, tc.max, err, spanDays(tc.s), tc.ok, tc.days)
		}
		if err != nil && tc.days > 0 && !strings.Contains(err.Error(), "read.max_days ("+strconv.Itoa(tc.max)+")") {
			t.Errorf("error %q does not name the limit", err)
		}
	}
}

func TestLimitAndDay(t *testing.T) {
	for _, tc := range []struct {
		q    string
		want int
		ok   bool
	}{
		{"", 7, true}, {"limit=1", 1, true}, {"limit=100", 100, true}, {"limit=0", 0, false},
		{"limit=101", 0, false}, {"limit=-1", 0, false}, {"limit=1e3", 0, false},
		{"limit=99999999999999999999999999999999", 0, false},
	} {
		v, _ := url.ParseQuery(tc.q)
		got, err := readparam.Limit(v, "limit", 7, 100)
		if (err == nil) != tc.ok || got != tc.want {
			t.Errorf("Limit(%q) = %d, %v; want %d, ok %v", tc.q, got, err, tc.want, tc.ok)
		}
		if err != nil && (!strings.HasPrefix(err.Error(), "parameter limit: ") || len(err.Error()) > 80) {
			t.Errorf("Limit(%q) error %q", tc.q, err)
		}
	}
	if d, err := readparam.Day("day", "0000-01-01"); err != nil || d != model.MinDay {
		t.Errorf("Day(0000-01-01) = %d, %v", d, err)
	}
	if _, err := readparam.Day("day", "10000-01-01"); err == nil || !strings.HasPrefix(err.Error(), "parameter day: ") {
		t.Errorf("Day(10000-01-01) error = %v", err)
	}
}

func FuzzTime(f *testing.F) {
	for _, s := range []string{"0", "-62167219200000", "253402300800000", "9223372036854775807", "2026-11-22T12:00:00Z",
		"0000-01-01T00:00:00+00:01", "9999-12-31T23:59:59.999999999-23:59", "x"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		ms, err := readparam.Time("p", s)
		if err != nil {
			if !readparam.IsParam(err) || !strings.HasPrefix(err.Error(), "parameter p: ") {
				t.Fatalf("Time(%q) error %v does not name the parameter", s, err)
			}
			return
		}
		if model.CheckTime(ms) != nil {
			t.Fatalf("Time(%q) = %d, outside the valid range", s, ms)
		}
	})
}

func FuzzSpan(f *testing.F) {
	f.Add("from=0&to=1&limit=5", int64(0), 400)
	f.Add("from=-9223372036854775808&to=9223372036854775807", int64(math.MaxInt64), 1)
	f.Add("to=-62167219200000", int64(math.MinInt64), 3660)
	f.Fuzz(func(t *testing.T, query string, defTo int64, maxDays int) {
		v, err := url.ParseQuery(query)
		if err != nil {
			return
		}
		if _, err := readparam.Limit(v, "limit", 10, 10_000); err != nil && !readparam.IsParam(err) {
			t.Fatalf("Limit error %v is not a parameter error", err)
		}
		s, err := readparam.ParseSpan(v, defTo)
		if err != nil {
			if !readparam.IsParam(err) {
				t.Fatalf("ParseSpan error %v is not a parameter error", err)
			}
			return
		}
		if model.CheckTime(s.From) != nil || model.CheckTime(s.To) != nil || s.To <= s.From {
			t.Fatalf("ParseSpan(%q, %d) = %+v, not a valid span", query, defTo, s)
		}
		if err := s.CheckDays(maxDays, "read.max_days"); err == nil && spanDays(s) > int64(maxDays) {
			t.Fatalf("%+v passed CheckDays(%d) with %d days", s, maxDays, spanDays(s))
		}
	})
}
