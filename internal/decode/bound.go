package decode

import "bytes"

// ReadingCellsBound returns, without decoding, a number of rows (metric
// cells) that Readings cannot exceed on body: a caller can take that much of
// a row budget before decoding. It costs two vectorised passes over body.
//
// Every reading Readings accepts is one object holding one metrics object,
// and no string it accepts holds a brace (ids are restricted to
// A-Z a-z 0-9 _ . : -; timestamps to RFC 3339), so a reading brings exactly
// two '{' and at least two ':' (ts, metrics) besides one ':' per metric. The
// result is capped by lim.MaxRows × lim.MaxMetrics and is at least 1.
func ReadingCellsBound(body []byte, lim Limits) int {
	n := int64(bytes.Count(body, []byte{':'})) - int64(bytes.Count(body, []byte{'{'}))
	return clampBound(n, int64(max(lim.MaxRows, 0))*int64(max(lim.MaxMetrics, 0)))
}

// AuditRowsBound returns, without decoding, a number of events that Audit
// cannot exceed on body: every event it accepts opens with a '{'. The result
// is capped by lim.MaxRows and is at least 1.
func AuditRowsBound(body []byte, lim Limits) int {
	return clampBound(int64(bytes.Count(body, []byte{'{'})), int64(lim.MaxRows))
}

func clampBound(n, most int64) int {
	return int(max(min(n, most), 1))
}
