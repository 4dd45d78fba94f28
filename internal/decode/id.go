package decode

import (
	"fmt"
	"time"
)

// CheckID returns why b may not be a device id, stream or metric name of at
// most maxLen bytes, or "" when it may: 1..maxLen bytes of A-Z a-z 0-9 _ . : -.
// Other transports (line protocol) validate their ids with it, so that every
// way in accepts exactly the same ids.
func CheckID(b []byte, maxLen int) string { return checkID(b, maxLen) }

// IDCharset describes the characters CheckID allows, for messages and docs.
const IDCharset = idCharset

// MaxEpochMillis is the last timestamp the decoders accept,
// 9999-12-31T23:59:59.999Z.
const MaxEpochMillis = maxEpochMillis

// TimeBounds are the timestamps a request may carry at a given time: from
// the epoch, or from the retention horizon (Limits.Oldest) when one is
// set, to Limits.MaxFuture after now, and never after year 9999. Every
// decoder checks its timestamps with them, so that every way in refuses
// the same times with the same words.
type TimeBounds struct {
	nowMs, minTS, maxTS int64
	oldest              time.Time
	maxFuture           time.Duration
}

// Bounds returns the time bounds of a request received at now.
func (l Limits) Bounds(now time.Time) TimeBounds {
	b := TimeBounds{nowMs: now.UnixMilli(), oldest: l.Oldest, maxFuture: l.MaxFuture}
	b.maxTS = b.nowMs + l.MaxFuture.Milliseconds()
	if !l.Oldest.IsZero() && l.Oldest.UnixMilli() > 0 {
		b.minTS = l.Oldest.UnixMilli()
		// A horizon with sub-millisecond precision refuses its own millisecond.
		if l.Oldest.Nanosecond()%int(time.Millisecond) != 0 {
			b.minTS++
		}
	}
	return b
}

// NowMillis is the receive time the bounds were made for.
func (b TimeBounds) NowMillis() int64 { return b.nowMs }

// Check returns why ts (milliseconds since the epoch) is out of bounds, or
// "" when it is within them.
func (b TimeBounds) Check(ts int64) string {
	switch {
	case ts < 0:
		return fmt.Sprintf("%s is before 1970-01-01T00:00:00Z", fmtMillis(ts))
	case ts > maxEpochMillis:
		return fmt.Sprintf("%d ms since the epoch is after year 9999", ts)
	case ts > b.maxTS:
		return fmt.Sprintf("is %s in the future; at most %s allowed", millisString(ts-b.nowMs), b.maxFuture)
	case ts < b.minTS:
		return fmt.Sprintf("%s is older than the retention horizon %s", fmtMillis(ts), b.oldest.UTC().Format(time.RFC3339Nano))
	}
	return ""
}
