// Package readparam parses the query parameters of the read endpoints:
// times, time ranges, days and page limits. Every value is checked against
// its documented range (times: model.TimeRule) and refused with an error
// naming the parameter, so nothing downstream does arithmetic on a value
// that could overflow.
package readparam

import (
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/sluicehq/sluice/internal/model"
)

// maxTimeLen bounds a time parameter; RFC 3339 with nanoseconds and a zone
// is 35 characters.
const maxTimeLen = 64

// Error is a bad query parameter.
type Error struct {
	Param  string // e.g. "from", or "from, to" for both
	Reason string
}

func (e *Error) Error() string {
	word := "parameter"
	if strings.Contains(e.Param, ",") {
		word = "parameters"
	}
	return word + " " + e.Param + ": " + e.Reason
}

// IsParam reports whether err is (or wraps) a bad query parameter.
func IsParam(err error) bool {
	var pe *Error
	return errors.As(err, &pe)
}

// Time parses a time parameter: RFC 3339 or integer epoch milliseconds,
// within the valid time range.
func Time(param, s string) (int64, error) {
	if len(s) > maxTimeLen {
		return 0, &Error{param, fmt.Sprintf("longer than %d characters", maxTimeLen)}
	}
	ms, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		var ne *strconv.NumError
		if errors.As(err, &ne) && errors.Is(ne.Err, strconv.ErrRange) {
			return 0, &Error{param, fmt.Sprintf("%s is %v", s, model.ErrTimeRange)}
		}
		t, terr := time.Parse(time.RFC3339Nano, s)
		if terr != nil {
			return 0, &Error{param, fmt.Sprintf("%q is neither RFC 3339 nor epoch milliseconds", s)}
		}
		ms = t.UnixMilli()
	}
	if err := model.CheckTime(ms); err != nil {
		return 0, &Error{param, err.Error()}
	}
	return ms, nil
}

// Span is a half-open time range [From, To) of valid times.
type Span struct{ From, To int64 }

// ParseSpan parses the parameters from and to. An absent to is defTo
// (clamped to the valid range); an absent from is 24 hours before to (not
// before model.MinTime). to must be after from.
func ParseSpan(v url.Values, defTo int64) (Span, error) {
	s := Span{To: min(max(defTo, model.MinTime), model.MaxTime)}
	if str := v.Get("to"); str != "" {
		t, err := Time("to", str)
		if err != nil {
			return s, err
		}
		s.To = t
	}
	s.From = max(s.To-model.MillisPerDay, model.MinTime) // s.To is valid: no overflow
	if str := v.Get("from"); str != "" {
		t, err := Time("from", str)
		if err != nil {
			return s, err
		}
		s.From = t
	}
	if s.To <= s.From {
		return s, &Error{"to", "must be after from"}
	}
	return s, nil
}

// CheckDays refuses a span that touches more than maxDays UTC days; key
// names the setting that sets maxDays, for the message.
func (s Span) CheckDays(maxDays int, key string) error {
	n, err := model.SpanDays(s.From, s.To)
	if err != nil {
		return &Error{"from, to", err.Error()}
	}
	if n > int64(maxDays) {
		return &Error{"from, to", fmt.Sprintf("the range spans %d days, more than %s (%d)", n, key, maxDays)}
	}
	return nil
}

// Limit parses a page size parameter in 1..maxLimit; absent is def.
func Limit(v url.Values, param string, def, maxLimit int) (int, error) {
	s := v.Get(param)
	if s == "" {
		return def, nil
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 || n > maxLimit {
		if len(s) > 24 {
			s = s[:24] + "…"
		}
		return 0, &Error{param, fmt.Sprintf("must be 1..%d, got %q", maxLimit, s)}
	}
	return n, nil
}

// Day parses a day parameter, YYYY-MM-DD in years 0000..9999.
func Day(param, s string) (model.Day, error) {
	d, err := model.ParseDay(s)
	if err != nil {
		return 0, &Error{param, err.Error()}
	}
	return d, nil
}
