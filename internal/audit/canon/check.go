package canon

import (
	"bytes"
	"strconv"
	"unicode/utf8"
)

// Canonical reports whether in is already in its RFC 8785 form, so that
// Transform(in) would return in unchanged. It builds nothing: it is the
// fast path for attributes a producer already wrote canonically (sorted
// names, no white space, plain numbers), which is what Go's encoding/json
// writes for a map. False means only "not known to be canonical": a member
// name with an escape, for one, is left to Transform to decide.
func Canonical(in []byte) bool {
	c := checker{in: in}
	return c.value(0) && c.pos == len(in)
}

// checker walks a JSON text and fails at the first byte Transform would
// write differently. Its depth limit is Transform's.
type checker struct {
	in      []byte
	pos     int
	scratch []byte
}

func (c *checker) peek() byte {
	if c.pos < len(c.in) {
		return c.in[c.pos]
	}
	return 0
}

func (c *checker) value(depth int) bool {
	if depth > maxDepth || c.pos >= len(c.in) {
		return false
	}
	switch ch := c.in[c.pos]; {
	case ch == '{':
		return c.object(depth)
	case ch == '[':
		c.pos++
		if c.peek() == ']' {
			c.pos++
			return true
		}
		for {
			if !c.value(depth + 1) {
				return false
			}
			switch c.peek() {
			case ',':
				c.pos++
			case ']':
				c.pos++
				return true
			default:
				return false
			}
		}
	case ch == '"':
		_, ok := c.str()
		return ok
	case ch == '-' || ch >= '0' && ch <= '9':
		return c.number()
	case ch == 't':
		return c.literal("true")
	case ch == 'f':
		return c.literal("false")
	case ch == 'n':
		return c.literal("null")
	}
	return false
}

func (c *checker) literal(lit string) bool {
	if !bytes.HasPrefix(c.in[c.pos:], []byte(lit)) {
		return false
	}
	c.pos += len(lit)
	return true
}

// object checks that the members are written without space, each name free
// of escapes and after the previous one in UTF-16 order (so no name twice).
func (c *checker) object(depth int) bool {
	c.pos++ // {
	if c.peek() == '}' {
		c.pos++
		return true
	}
	var prev []byte
	for i := 0; ; i++ {
		if c.peek() != '"' {
			return false
		}
		name, ok := c.str()
		if !ok || bytes.IndexByte(name, '\\') >= 0 {
			return false
		}
		if i > 0 && !lessUTF16(prev, name) {
			return false
		}
		prev = name
		if c.peek() != ':' {
			return false
		}
		c.pos++
		if !c.value(depth + 1) {
			return false
		}
		switch c.peek() {
		case ',':
			c.pos++
		case '}':
			c.pos++
			return true
		default:
			return false
		}
	}
}

// lessUTF16 reports whether name a sorts before b by UTF-16 code units.
func lessUTF16(a, b []byte) bool {
	for i := 0; i < len(a) && i < len(b); i++ {
		if a[i] >= utf8.RuneSelf || b[i] >= utf8.RuneSelf {
			return compareUTF16(string(a[i:]), string(b[i:])) < 0
		}
		if a[i] != b[i] {
			return a[i] < b[i]
		}
	}
	return len(a) < len(b)
}

// str checks a string at c.pos and returns its bytes between the quotes.
// Only the escapes appendString writes are canonical: \" \\ \b \f \n \r
// \t, and \u00xx in lower-case hex for the other control characters.
func (c *checker) str() ([]byte, bool) {
	c.pos++ // the opening quote
	start := c.pos
	for c.pos < len(c.in) {
		if c.pos += plainLen(c.in[c.pos:]); c.pos == len(c.in) {
			break
		}
		ch := c.in[c.pos]
		switch {
		case ch == '"':
			s := c.in[start:c.pos]
			c.pos++
			return s, true
		case ch < 0x20:
			return nil, false
		case ch == '\\':
			if !c.escape() {
				return nil, false
			}
		case ch >= utf8.RuneSelf:
			r, n := utf8.DecodeRune(c.in[c.pos:])
			if r == utf8.RuneError && n == 1 {
				return nil, false
			}
			c.pos += n
		default:
			c.pos++
		}
	}
	return nil, false
}

// escape checks the escape at c.pos and steps over it.
func (c *checker) escape() bool {
	if c.pos+1 >= len(c.in) {
		return false
	}
	switch c.in[c.pos+1] {
	case '"', '\\', 'b', 'f', 'n', 'r', 't':
		c.pos += 2
		return true
	case 'u':
		const lowerHex = "0123456789abcdef"
		if c.pos+6 > len(c.in) || c.in[c.pos+2] != '0' || c.in[c.pos+3] != '0' || c.in[c.pos+4] != '0' && c.in[c.pos+4] != '1' {
			return false
		}
		lo := bytes.IndexByte([]byte(lowerHex), c.in[c.pos+5])
		if lo < 0 {
			return false
		}
		switch r := int(c.in[c.pos+4]-'0')<<4 | lo; r {
		case '\b', '\f', '\n', '\r', '\t':
			return false // these have short escapes
		}
		c.pos += 6
		return true
	}
	return false
}

// number checks that the number at c.pos is written as AppendNumber
// writes the double it denotes.
func (c *checker) number() bool {
	end := numberEnd(c.in, c.pos)
	if end < 0 {
		return false
	}
	tok := c.in[c.pos:end]
	c.pos = end
	// A plain integer of up to 15 digits is exact in a double and written
	// back digit for digit (but -0 is written 0).
	digits := tok
	if digits[0] == '-' {
		digits = digits[1:]
	}
	if len(digits) <= 15 && !bytes.ContainsAny(digits, ".eE") && (digits[0] != '0' || len(tok) == 1) {
		return true
	}
	// Otherwise the number is canonical if it is its own canonical form.
	f, err := strconv.ParseFloat(string(tok), 64)
	if err != nil {
		return false
	}
	c.scratch = AppendNumber(c.scratch[:0], f)
	return bytes.Equal(c.scratch, tok)
}

// numberEnd returns the end of the JSON number (RFC 8259 §6) at in[pos:],
// or -1 if there is none.
func numberEnd(in []byte, i int) int {
	if i < len(in) && in[i] == '-' {
		i++
	}
	digits := func() int {
		n := 0
		for i < len(in) && in[i] >= '0' && in[i] <= '9' {
			i++
			n++
		}
		return n
	}
	intStart := i
	if n := digits(); n == 0 || n > 1 && in[intStart] == '0' {
		return -1
	}
	if i < len(in) && in[i] == '.' {
		i++
		if digits() == 0 {
			return -1
		}
	}
	if i < len(in) && (in[i] == 'e' || in[i] == 'E') {
		i++
		if i < len(in) && (in[i] == '+' || in[i] == '-') {
			i++
		}
		if digits() == 0 {
			return -1
		}
	}
	return i
}
