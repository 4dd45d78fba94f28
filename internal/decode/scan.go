package decode

import (
	"encoding/binary"
	"fmt"
	"math/bits"
	"unicode/utf8"

	"github.com/sluicehq/sluice/internal/model"
)

// decoder is a single-pass JSON scanner specialised for Sluice's row
// objects, with the state of one request. It walks the body once without
// building a tree: each field is checked and converted where it is read. buf[pos:end] is what is left of the current window (the body, or
// one NDJSON line); offsets in errors are offsets into buf.
//
// Strings read by str alias buf, or tmp when they had escapes; either way they
// are only valid until the next str call and must be copied (or interned)
// before they are kept.
type decoder struct {
	buf      []byte
	pos, end int
	tmp      []byte // unescaped string contents

	lim    Limits
	bounds TimeBounds

	row, line, rows int
	estimate        int    // rows expected in the request
	field           string // field being read, for syntax errors
	keyAt           int    // offset of the metric key being read, or -1: field "metrics.<key>"

	arena []model.Metric // backing array for the Metrics of this request
	// recent holds metric names of this request (a ring), for recentName.
	recent     [8]string
	recentNext uint8
	lastDevice string // device id of the previous reading
	nMetrics   int    // metrics kept so far in this request

	ids  internTable // device ids, metric names, streams: valid ids only
	text internTable // actions, outcomes
}

func (d *decoder) peek() byte {
	if d.pos < d.end {
		return d.buf[d.pos]
	}
	return 0
}

func (d *decoder) ws() {
	for d.pos < d.end {
		switch d.buf[d.pos] {
		case ' ', '\t', '\n', '\r':
			d.pos++
		default:
			return
		}
	}
}

// fail returns a FieldError for the current row.
func (d *decoder) fail(field, reason string) error {
	return &FieldError{Row: d.row, Line: d.line, Field: field, Reason: reason}
}

// syntax returns a FieldError for malformed JSON at offset off.
func (d *decoder) syntax(off int, msg string) error {
	field := d.field
	if d.keyAt >= 0 {
		field += "." + d.keyString(d.keyAt)
	}
	return d.fail(field, fmt.Sprintf("malformed JSON at offset %d: %s", off, msg))
}

// keyString reads the (valid) key at offset at again, for an error message.
func (d *decoder) keyString(at int) string {
	k := decoder{buf: d.buf, pos: at, end: d.end, keyAt: -1}
	b, _ := k.str()
	return string(b)
}

// syntaxExpected reports what was found at d.pos instead of what.
func (d *decoder) syntaxExpected(what string) error {
	if d.pos >= d.end {
		if d.end < len(d.buf) {
			return d.syntax(d.pos, "unexpected end of line, expected "+what)
		}
		return d.syntax(d.pos, "unexpected end of input, expected "+what)
	}
	return d.syntax(d.pos, fmt.Sprintf("invalid character %s, expected %s", quoteByte(d.buf[d.pos]), what))
}

func quoteByte(c byte) string {
	if c >= 0x20 && c < 0x7f {
		return fmt.Sprintf("%q", rune(c))
	}
	return fmt.Sprintf("0x%02x", c)
}

// kindOf names the JSON type of the value starting with c, or "" when no
// value starts with c.
func kindOf(c byte) string {
	switch c {
	case '"':
		return "string"
	case '{':
		return "object"
	case '[':
		return "array"
	case 't', 'f':
		return "boolean"
	case 'n':
		return "null"
	case '-', '0', '1', '2', '3', '4', '5', '6', '7', '8', '9':
		return "number"
	}
	return ""
}

// valueKind names the JSON type of the value at d.pos, or "" when no value
// starts there. A literal (true, false, null) must be whole.
func (d *decoder) valueKind() string {
	if d.pos >= d.end {
		return ""
	}
	k := kindOf(d.buf[d.pos])
	var word string
	switch d.buf[d.pos] {
	case 't':
		word = "true"
	case 'f':
		word = "false"
	case 'n':
		word = "null"
	default:
		return k
	}
	if d.end-d.pos < len(word) || string(d.buf[d.pos:d.pos+len(word)]) != word {
		return ""
	}
	return k
}

// wrongType reports the value at d.pos as not of the expected type; bytes
// that start no value are a syntax error instead.
func (d *decoder) wrongType(field, want string) error {
	if k := d.valueKind(); k != "" {
		return d.fail(field, want+", got "+k)
	}
	return d.syntaxExpected("a value")
}

// colon consumes the ':' after a key and the space around it.
func (d *decoder) colon() error {
	d.ws()
	if d.peek() != ':' {
		return d.syntaxExpected("':' after an object key")
	}
	d.pos++
	d.ws()
	return nil
}

// next consumes the ',' or '}' after an object member. It reports whether
// the object ended.
func (d *decoder) next() (bool, error) {
	d.ws()
	switch d.peek() {
	case ',':
		d.pos++
		d.ws()
		if d.peek() != '"' {
			return false, d.syntaxExpected("a string key")
		}
		return false, nil
	case '}':
		d.pos++
		return true, nil
	}
	return false, d.syntaxExpected("',' or '}' after an object member")
}

// open consumes the '{' at d.pos and reports whether the object is empty
// ("{}", consumed whole). Otherwise d.pos is left at the first key.
func (d *decoder) open() (bool, error) {
	d.pos++
	d.ws()
	switch d.peek() {
	case '}':
		d.pos++
		return true, nil
	case '"':
		return false, nil
	}
	return false, d.syntaxExpected("a string key or '}'")
}

// Constants of the SWAR (SIMD within a register) string scan.
const (
	lsb = 0x0101010101010101
	msb = 0x8080808080808080
)

// scanStr returns the index of the first '"', '\\' or control byte in
// buf[i:end], or end. It looks at eight bytes at a time (SWAR).
func scanStr(buf []byte, i, end int) int {
	for i+8 <= end {
		x := binary.LittleEndian.Uint64(buf[i:])
		q := x ^ (lsb * '"')
		bs := x ^ (lsb * '\\')
		m := ((q - lsb) &^ q) | ((bs - lsb) &^ bs) | ((x - lsb*0x20) &^ x)
		if m &= msb; m != 0 {
			return i + bits.TrailingZeros64(m)/8
		}
		i += 8
	}
	for ; i < end; i++ {
		if c := buf[i]; c == '"' || c == '\\' || c < 0x20 {
			return i
		}
	}
	return end
}

// str reads the string at d.pos (which must be '"') and returns its
// contents, unescaped. The result aliases buf or tmp: see decoder.
func (d *decoder) str() ([]byte, error) {
	start := d.pos + 1
	i := scanStr(d.buf, start, d.end)
	if i < d.end {
		switch c := d.buf[i]; {
		case c == '"':
			d.pos = i + 1
			return d.buf[start:i], nil
		case c == '\\':
			return d.strEscaped(start, i)
		default:
			return nil, d.syntax(i, fmt.Sprintf("control character %s in string", quoteByte(c)))
		}
	}
	d.pos = d.end
	return nil, d.syntaxExpected("closing '\"' of the string")
}

// internID reads the id string at d.pos (which must be '"') and returns it
// interned. It reports false, leaving d.pos, when the string is not a
// valid id or has escapes: the caller then takes the general path (id).
// Strings found in the intern table were checked when they were added, so
// repeated ids cost one hash and one comparison.
func (d *decoder) internID() (string, bool) {
	start := d.pos + 1
	i := scanStr(d.buf, start, d.end)
	if i >= d.end || d.buf[i] != '"' || i == start || i-start > d.lim.MaxIDLength {
		return "", false
	}
	b := d.buf[start:i]
	s, slot := d.ids.lookup(b)
	if s == "" {
		if !validIDChars(b) {
			return "", false
		}
		s = d.ids.insert(slot, b)
	}
	d.pos = i + 1
	return s, true
}

// id reads the string at d.pos (which must be '"') as an id and returns it
// (aliasing buf or tmp), or a reason it is not a valid id.
func (d *decoder) id() ([]byte, string, error) {
	b, err := d.str()
	if err != nil {
		return nil, "", err
	}
	return b, checkID(b, d.lim.MaxIDLength), nil
}

// strEscaped continues str from the first backslash at i, unescaping into tmp.
func (d *decoder) strEscaped(start, i int) ([]byte, error) {
	out := append(d.tmp[:0], d.buf[start:i]...)
	for i < d.end {
		c := d.buf[i]
		switch {
		case c == '"':
			d.pos = i + 1
			d.tmp = out
			return out, nil
		case c < 0x20:
			return nil, d.syntax(i, fmt.Sprintf("control character %s in string", quoteByte(c)))
		case c != '\\':
			out = append(out, c)
			i++
			continue
		}
		if i+1 >= d.end {
			break
		}
		switch e := d.buf[i+1]; e {
		case '"', '\\', '/':
			out = append(out, e)
		case 'b':
			out = append(out, '\b')
		case 'f':
			out = append(out, '\f')
		case 'n':
			out = append(out, '\n')
		case 'r':
			out = append(out, '\r')
		case 't':
			out = append(out, '\t')
		case 'u':
			r, ok := d.hex4(i + 2)
			if !ok {
				return nil, d.syntax(i, `invalid \u escape in string`)
			}
			i += 6
			if utf16IsSurrogate(r) {
				// A high surrogate followed by an escaped low one is one rune;
				// anything else becomes U+FFFD, as encoding/json does.
				if r < 0xdc00 && i+1 < d.end && d.buf[i] == '\\' && d.buf[i+1] == 'u' {
					if r2, ok := d.hex4(i + 2); ok && r2 >= 0xdc00 && r2 <= 0xdfff {
						r = (r-0xd800)<<10 | (r2 - 0xdc00) + 0x10000
						i += 6
						out = utf8.AppendRune(out, r)
						continue
					}
				}
				r = utf8.RuneError
			}
			out = utf8.AppendRune(out, r)
			continue
		default:
			return nil, d.syntax(i, fmt.Sprintf("invalid escape %s in string", quoteByte(e)))
		}
		i += 2
	}
	d.tmp = out
	d.pos = d.end
	return nil, d.syntaxExpected("closing '\"' of the string")
}

func utf16IsSurrogate(r rune) bool { return r >= 0xd800 && r <= 0xdfff }

// hex4 decodes the four hex digits at i.
func (d *decoder) hex4(i int) (rune, bool) {
	if i+4 > d.end {
		return 0, false
	}
	var r rune
	for _, c := range d.buf[i : i+4] {
		switch {
		case c >= '0' && c <= '9':
			c -= '0'
		case c >= 'a' && c <= 'f':
			c = c - 'a' + 10
		case c >= 'A' && c <= 'F':
			c = c - 'A' + 10
		default:
			return 0, false
		}
		r = r<<4 | rune(c)
	}
	return r, true
}

// number reads the number at d.pos and returns its literal. It checks the
// JSON grammar: -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?
func (d *decoder) number() ([]byte, error) {
	start, i := d.pos, d.pos
	if i < d.end && d.buf[i] == '-' {
		i++
	}
	switch {
	case i < d.end && d.buf[i] == '0':
		i++
	case i < d.end && d.buf[i] >= '1' && d.buf[i] <= '9':
		i++
		for i < d.end && isDigit(d.buf[i]) {
			i++
		}
	default:
		d.pos = i
		return nil, d.syntaxExpected("a digit")
	}
	if i < d.end && d.buf[i] == '.' {
		i++
		if i >= d.end || !isDigit(d.buf[i]) {
			d.pos = i
			return nil, d.syntaxExpected("a digit after the decimal point")
		}
		for i < d.end && isDigit(d.buf[i]) {
			i++
		}
	}
	if i < d.end && (d.buf[i] == 'e' || d.buf[i] == 'E') {
		i++
		if i < d.end && (d.buf[i] == '+' || d.buf[i] == '-') {
			i++
		}
		if i >= d.end || !isDigit(d.buf[i]) {
			d.pos = i
			return nil, d.syntaxExpected("a digit in the exponent")
		}
		for i < d.end && isDigit(d.buf[i]) {
			i++
		}
	}
	d.pos = i
	return d.buf[start:i], nil
}

func isDigit(c byte) bool { return c >= '0' && c <= '9' }

// literal consumes the literal word (true, false or null) at d.pos.
func (d *decoder) literal(word string) error {
	if d.end-d.pos >= len(word) && string(d.buf[d.pos:d.pos+len(word)]) == word {
		d.pos += len(word)
		return nil
	}
	return d.syntaxExpected(fmt.Sprintf("%q", word))
}

// maxDepth bounds the nesting of attribute values.
const maxDepth = 64

// compact checks the JSON value at d.pos and appends it to dst without
// insignificant whitespace. Strings are copied as written (escapes kept) and
// must be valid UTF-8.
func (d *decoder) compact(dst []byte, depth int) ([]byte, error) {
	if depth > maxDepth {
		return dst, d.fail(d.field, fmt.Sprintf("nested deeper than %d levels", maxDepth))
	}
	switch c := d.peek(); c {
	case '{':
		dst = append(dst, '{')
		empty, err := d.open()
		if err != nil || empty {
			return append(dst, '}'), err
		}
		for {
			if dst, err = d.compactString(dst); err != nil {
				return dst, err
			}
			if err := d.colon(); err != nil {
				return dst, err
			}
			dst = append(dst, ':')
			if dst, err = d.compact(dst, depth+1); err != nil {
				return dst, err
			}
			end, err := d.next()
			if err != nil {
				return dst, err
			}
			if end {
				return append(dst, '}'), nil
			}
			dst = append(dst, ',')
		}
	case '[':
		dst = append(dst, '[')
		d.pos++
		d.ws()
		if d.peek() == ']' {
			d.pos++
			return append(dst, ']'), nil
		}
		for {
			var err error
			if dst, err = d.compact(dst, depth+1); err != nil {
				return dst, err
			}
			d.ws()
			switch d.peek() {
			case ',':
				d.pos++
				d.ws()
				dst = append(dst, ',')
				continue
			case ']':
				d.pos++
				return append(dst, ']'), nil
			}
			return dst, d.syntaxExpected("',' or ']' after an array element")
		}
	case '"':
		return d.compactString(dst)
	case 't':
		return append(dst, "true"...), d.literal("true")
	case 'f':
		return append(dst, "false"...), d.literal("false")
	case 'n':
		return append(dst, "null"...), d.literal("null")
	default:
		if c == '-' || isDigit(c) {
			lit, err := d.number()
			return append(dst, lit...), err
		}
		return dst, d.syntaxExpected("a value")
	}
}

// compactString checks the string at d.pos and appends it as written.
func (d *decoder) compactString(dst []byte) ([]byte, error) {
	if d.peek() != '"' {
		return dst, d.syntaxExpected("a string")
	}
	start := d.pos
	ascii := true
	for i := start + 1; i < d.end; i++ {
		c := d.buf[i]
		switch {
		case c == '"':
			if !ascii && !utf8.Valid(d.buf[start+1:i]) {
				return dst, d.fail(d.field, fmt.Sprintf("string at offset %d is not valid UTF-8", start))
			}
			d.pos = i + 1
			return append(dst, d.buf[start:i+1]...), nil
		case c == '\\':
			if i+1 >= d.end {
				break
			}
			switch d.buf[i+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				i++
			case 'u':
				if _, ok := d.hex4(i + 2); !ok {
					return dst, d.syntax(i, `invalid \u escape in string`)
				}
				i += 5
			default:
				return dst, d.syntax(i, fmt.Sprintf("invalid escape %s in string", quoteByte(d.buf[i+1])))
			}
		case c < 0x20:
			return dst, d.syntax(i, fmt.Sprintf("control character %s in string", quoteByte(c)))
		case c >= 0x80:
			ascii = false
		}
	}
	d.pos = d.end
	return dst, d.syntaxExpected("closing '\"' of the string")
}
