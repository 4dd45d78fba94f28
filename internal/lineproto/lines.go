package lineproto

import "bytes"

// entryLine returns the 1-based line of body on which its entry-th
// (0-based) entry starts, skipping blank lines and comments as the parser
// does. An entry spans several lines only when a string field value holds
// a raw newline. It runs only to report an error, so the happy path pays
// nothing for line numbers.
func entryLine(body []byte, entry int) int {
	line, i, n := 1, 0, 0
	for i < len(body) {
		for i < len(body) && body[i] == ' ' {
			i++
		}
		if i == len(body) {
			break
		}
		switch body[i] {
		case '\n':
			line++
			i++
			continue
		case '\r':
			if i+1 < len(body) && body[i+1] == '\n' {
				line++
				i += 2
				continue
			}
		case '#':
			j := bytes.IndexByte(body[i:], '\n')
			if j < 0 {
				return line
			}
			line++
			i += j + 1
			continue
		}
		if n == entry {
			return line
		}
		n++
		i, line = skipEntry(body, i, line)
	}
	return line
}

// skipEntry returns the offset after the entry starting at i (and its
// newline), and the line there.
func skipEntry(body []byte, i, line int) (int, int) {
	// The measurement and tags end at the first unescaped space; they hold
	// no newline.
	for i < len(body) && body[i] != ' ' && body[i] != '\n' {
		if body[i] == '\\' && i+1 < len(body) && body[i+1] == ' ' {
			i++
		}
		i++
	}
	// Fields and the timestamp: only a string value may hold a newline.
	for i < len(body) {
		switch c := body[i]; {
		case c == '\n':
			return i + 1, line + 1
		case c == '\\' && i+1 < len(body) && (body[i+1] == ' ' || body[i+1] == ',' || body[i+1] == '='):
			i += 2
			continue
		case c == '=' && i+1 < len(body) && body[i+1] == '"':
			for i += 2; i < len(body) && body[i] != '"'; i++ {
				switch body[i] {
				case '\\':
					if i+1 < len(body) && isStringEscape(body[i+1]) {
						i++
					}
				case '\n':
					line++
				}
			}
		}
		i++
	}
	return i, line
}

// isStringEscape reports whether c after a backslash in a string field
// value is an escape.
func isStringEscape(c byte) bool {
	return c == '\\' || c == '"' || c == 'n' || c == 'r' || c == 't'
}
