package decode

import "bytes"

// ReadingCellsBound returns, without decoding, a number of rows (metric
// cells) that Readings cannot exceed on body: a caller can take that much of
// a row budget before decoding. It costs one pass over body.
//
// It is the smaller of two bounds:
//   - Every reading Readings accepts is one object holding one metrics
//     object, so a reading brings exactly two '{' outside strings and at
//     least two keys (ts, metrics) besides one key per metric; a key's ':'
//     follows its closing '"' (blanks aside). Braces and colons inside
//     strings (string metric values may hold any text) are not counted.
//   - A metric cell takes at least six bytes of body: a quoted name of at
//     least one character, ':', a value, and a ',' or '}' after it.
//
// The result is capped by lim.MaxRows × lim.MaxMetrics and is at least 1.
func ReadingCellsBound(body []byte, lim Limits) int {
	keys, braces := keysAndBraces(body)
	n := int64(keys) - int64(braces)
	n = min(n, int64(len(body)/minCellBytes))
	return clampBound(n, int64(max(lim.MaxRows, 0))*int64(max(lim.MaxMetrics, 0)))
}

// minCellBytes is the fewest bytes of JSON one metric cell takes: "a":1,
const minCellBytes = 6

// keysAndBraces counts, outside strings, the colons whose previous byte
// other than a blank closes a string (every colon after an object key) and
// the '{'. A string starts at an unescaped '"' and ends at the next one.
func keysAndBraces(body []byte) (keys, braces int) {
	afterString := false
	for i := 0; i < len(body); i++ {
		switch c := body[i]; c {
		case '"':
			i++
			for i < len(body) && body[i] != '"' {
				if body[i] == '\\' {
					i++
				}
				i++
			}
			afterString = true
			continue
		case ':':
			if afterString {
				keys++
			}
		case '{':
			braces++
		case ' ', '\t', '\n', '\r':
			continue
		}
		afterString = false
	}
	return keys, braces
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
