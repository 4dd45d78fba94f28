package decode

import "bytes"

// ReadingCellsBound returns, without decoding, a number of rows (metric
// cells) that Readings cannot exceed on body: a caller can take that much of
// a row budget before decoding. It costs a few passes over body.
//
// It is the smaller of two bounds:
//   - Every reading Readings accepts is one object holding one metrics
//     object, and no string it accepts holds a brace (ids are restricted to
//     A-Z a-z 0-9 _ . : -; timestamps to RFC 3339), so a reading brings
//     exactly two '{' and at least two keys (ts, metrics) besides one key
//     per metric; a key's ':' follows its closing '"' (blanks aside), which
//     a colon inside a timestamp does not.
//   - A metric cell takes at least six bytes of body: a quoted name of at
//     least one character, ':', a value, and a ',' or '}' after it.
//
// The result is capped by lim.MaxRows × lim.MaxMetrics and is at least 1.
func ReadingCellsBound(body []byte, lim Limits) int {
	n := int64(keyColons(body)) - int64(bytes.Count(body, []byte{'{'}))
	n = min(n, int64(len(body)/minCellBytes))
	return clampBound(n, int64(max(lim.MaxRows, 0))*int64(max(lim.MaxMetrics, 0)))
}

// minCellBytes is the fewest bytes of JSON one metric cell takes: "a":1,
const minCellBytes = 6

// keyColons counts the colons whose previous byte other than a blank is a
// '"': every colon after an object key, and the few inside strings that
// follow a quote (which only loosens the bound).
func keyColons(body []byte) int {
	n := 0
	for i := 0; ; {
		j := bytes.IndexByte(body[i:], ':')
		if j < 0 {
			return n
		}
		k := i + j - 1
		for k >= 0 && (body[k] == ' ' || body[k] == '\t' || body[k] == '\n' || body[k] == '\r') {
			k--
		}
		if k >= 0 && body[k] == '"' {
			n++
		}
		i += j + 1
	}
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
