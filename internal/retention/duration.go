package retention

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Day and Year are the units retention policies are usually written in. A
// year is 365 days: policies are about storage, not calendars.
const (
	Day  = 24 * time.Hour
	Year = 365 * Day
)

// Duration is a time.Duration that also parses whole days, weeks and years
// ("30d", "2w", "2y"), which time.ParseDuration does not. Anything else is
// parsed by time.ParseDuration ("12h", "90m", "1h30m").
type Duration time.Duration

// ParseDuration parses "30d", "2w", "2y" or a Go duration.
func ParseDuration(s string) (Duration, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return 0, fmt.Errorf("empty duration (want e.g. 30d, 2y, 12h)")
	}
	unit := map[byte]time.Duration{'d': Day, 'w': 7 * Day, 'y': Year}[s[len(s)-1]]
	if unit != 0 {
		n, err := strconv.ParseInt(s[:len(s)-1], 10, 64)
		if err != nil || n < 0 {
			return 0, fmt.Errorf("%q is not a duration: want a whole number of days, weeks or years (30d, 2w, 2y) or a Go duration (12h, 90m)", s)
		}
		if n > int64(1<<63-1)/int64(unit) {
			return 0, fmt.Errorf("%q is too long a duration", s)
		}
		return Duration(time.Duration(n) * unit), nil
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, fmt.Errorf("%q is not a duration: want e.g. 30d, 2w, 2y, 12h or 90m", s)
	}
	return Duration(d), nil
}

// D returns the value as a time.Duration.
func (d Duration) D() time.Duration { return time.Duration(d) }

// String formats whole years as "2y", whole days as "30d", anything else as
// time.Duration does. ParseDuration reads it back.
func (d Duration) String() string {
	td := time.Duration(d)
	switch {
	case td > 0 && td%Year == 0:
		return strconv.FormatInt(int64(td/Year), 10) + "y"
	case td > 0 && td%Day == 0:
		return strconv.FormatInt(int64(td/Day), 10) + "d"
	}
	return td.String()
}

// UnmarshalText lets configuration files and environment variables use the
// forms ParseDuration accepts.
func (d *Duration) UnmarshalText(b []byte) error {
	v, err := ParseDuration(string(b))
	if err != nil {
		return err
	}
	*d = v
	return nil
}

// MarshalText writes the String form.
func (d Duration) MarshalText() ([]byte, error) { return []byte(d.String()), nil }
