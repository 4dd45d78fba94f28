package main

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/sluicehq/sluice/internal/model"
)

// minEpochMillis is the smallest epoch-milliseconds value taken as such
// (1973-03-03): a smaller positive number is almost surely epoch seconds.
const minEpochMillis = 100_000_000_000

// maxAgo bounds a relative time.
const maxAgo = 100 * 365 * 24 * time.Hour

var errTimeSyntax = errors.New("want RFC 3339 with a zone (2026-11-22T10:00:00Z), a date (2026-11-22), " +
	"epoch milliseconds, now, or a time relative to now like -1h, -30m or -7d")

// parseTime reads a --from or --to value. Relative times count back from now.
func parseTime(s string, now time.Time) (time.Time, error) {
	switch {
	case s == "now":
		return now, nil
	case strings.HasPrefix(s, "-"):
		d, err := parseAgo(s[1:])
		if err != nil {
			return time.Time{}, err
		}
		return now.Add(-d), nil
	case strings.Trim(s, "0123456789") == "":
		ms, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return time.Time{}, errTimeSyntax
		}
		if ms > 0 && ms < minEpochMillis {
			return time.Time{}, errors.New("looks like epoch seconds; want epoch milliseconds (" + s + "000)")
		}
		if err := model.CheckTime(ms); err != nil {
			return time.Time{}, fmt.Errorf("epoch milliseconds %w", err)
		}
		return time.UnixMilli(ms).UTC(), nil
	}
	if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
		return t, nil
	}
	if t, err := time.Parse(time.DateOnly, s); err == nil {
		return t, nil
	}
	return time.Time{}, errTimeSyntax
}

// parseAgo reads a duration such as "90s", "1h30m", "1.5h" or "7d": numbers,
// each followed by a unit (ms, s, m, h, d, w).
func parseAgo(s string) (time.Duration, error) {
	// "ms" must come before "m" and "s".
	units := []struct {
		name string
		d    time.Duration
	}{
		{"ms", time.Millisecond}, {"s", time.Second}, {"m", time.Minute}, {"h", time.Hour},
		{"d", 24 * time.Hour}, {"w", 7 * 24 * time.Hour},
	}
	bad := errors.New("want a relative time like -1h, -30m, -7d or -1d12h (units ms, s, m, h, d, w)")
	if s == "" {
		return 0, bad
	}
	var total float64
	for s != "" {
		i := strings.IndexFunc(s, func(r rune) bool { return (r < '0' || r > '9') && r != '.' })
		if i <= 0 {
			return 0, bad
		}
		n, err := strconv.ParseFloat(s[:i], 64)
		if err != nil {
			return 0, bad
		}
		s = s[i:]
		found := false
		for _, u := range units {
			if rest, ok := strings.CutPrefix(s, u.name); ok {
				total += n * float64(u.d)
				s, found = rest, true
				break
			}
		}
		if !found {
			return 0, bad
		}
	}
	if total > float64(maxAgo) || math.IsNaN(total) {
		return 0, errors.New("relative time is more than 100 years back")
	}
	return time.Duration(total), nil
}
