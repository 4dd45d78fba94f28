package model

import (
	"errors"
	"fmt"
	"time"
)

// The valid time range: every time, day and cursor position that comes from
// outside must lie in [MinTime, MaxTime], the years 0000 through 9999 UTC
// (MaxTime is the first millisecond after them, so that it may close a
// half-open range [from, to)). Inside it, day numbers and their millisecond
// bounds fit their types with room to spare, so arithmetic on checked values
// cannot overflow.
const (
	MinTime int64 = -62167219200000 // 0000-01-01T00:00:00Z in epoch milliseconds
	MaxTime int64 = 253402300800000 // 10000-01-01T00:00:00Z in epoch milliseconds
)

// TimeRule states the valid time range for error messages and docs.
const TimeRule = "0000-01-01T00:00:00Z..10000-01-01T00:00:00Z (epoch milliseconds -62167219200000..253402300800000)"

// MinDay and MaxDay are the days of MinTime and MaxTime.
const (
	MinDay Day = -719528 // 0000-01-01
	MaxDay Day = 2932897 // 10000-01-01
)

// ErrTimeRange is returned for a time outside [MinTime, MaxTime].
var ErrTimeRange = errors.New("outside the valid time range " + TimeRule)

// CheckTime reports whether ts (epoch milliseconds) lies in the valid range.
func CheckTime(ts int64) error {
	if ts < MinTime || ts > MaxTime {
		return fmt.Errorf("%d is %w", ts, ErrTimeRange)
	}
	return nil
}

// CheckedDayOf is DayOf for a timestamp from outside: it refuses one outside
// the valid range instead of wrapping. DayOf itself assumes a valid
// timestamp (ingest bounds every timestamp it accepts).
func CheckedDayOf(ts int64) (Day, error) {
	if err := CheckTime(ts); err != nil {
		return 0, err
	}
	return DayOf(ts), nil
}

// Valid reports whether the day lies in [MinDay, MaxDay].
func (d Day) Valid() bool { return d >= MinDay && d <= MaxDay }

// SpanDays returns how many UTC days the range [from, to) touches, at least
// 1. Both bounds must be valid (CheckTime) and from < to; it refuses
// anything else, so the count never overflows.
func SpanDays(from, to int64) (int64, error) {
	if err := CheckTime(from); err != nil {
		return 0, fmt.Errorf("from: %w", err)
	}
	if err := CheckTime(to); err != nil {
		return 0, fmt.Errorf("to: %w", err)
	}
	if to <= from {
		return 0, fmt.Errorf("to (%d) must be after from (%d)", to, from)
	}
	return int64(DayOf(to-1)-DayOf(from)) + 1, nil
}

// timeOfMillis is time.UnixMilli for a valid timestamp, in UTC.
func timeOfMillis(ts int64) time.Time { return time.UnixMilli(ts).UTC() }
