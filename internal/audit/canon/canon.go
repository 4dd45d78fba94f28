// Package canon defines the canonical encoding of an audit event: the bytes
// whose RFC 6962 leaf hash is the event's leaf in its stream's log. The
// encoding is the RFC 8785 JSON Canonicalization Scheme (JCS) applied to a
// fixed JSON object of the event's fields, so that an auditor can recompute
// it in any language with a JCS library. docs/audit.md specifies it.
package canon

import (
	"bytes"
	"cmp"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/sluicehq/sluice/internal/model"

	"golang.org/x/mod/sumdb/tlog"
)

// LeafHashSize is the size of a leaf hash (SHA-256).
const LeafHashSize = sha256.Size

// maxDepth bounds the nesting of attributes the canonicalizer follows.
const maxDepth = 64

// Event returns the canonical bytes of e. Its members, in JCS order:
//
//	action, actor, attributes (or attributes_raw), event_id, outcome,
//	resource, stream, ts
//
// attributes is the JCS form of the stored attributes object and is left
// out when the event has none. Attributes that are not I-JSON (duplicate
// names, a number outside the float64 range, invalid UTF-8) cannot be
// canonicalised; they are committed byte for byte instead, as
// attributes_raw: the standard base64 of the stored bytes. ts is the
// timestamp in milliseconds since the Unix epoch. A text field that is not
// valid UTF-8 (ingest never stores one) is committed as <name>_b64, the
// standard base64 of its bytes, instead of <name>; the members stay in JCS
// order.
func Event(e *model.AuditEvent) []byte {
	return AppendEvent(make([]byte, 0, 96+len(e.EventID)+len(e.Stream)+len(e.Actor)+len(e.Action)+len(e.Resource)+len(e.Outcome)+len(e.Attributes)), e)
}

// AppendEvent appends the canonical bytes of e (see Event) to b.
func AppendEvent(b []byte, e *model.AuditEvent) []byte {
	b = append(b, '{')
	b = appendField(b, "action", e.Action)
	b = append(b, ',')
	b = appendField(b, "actor", e.Actor)
	if len(e.Attributes) > 0 {
		if Canonical(e.Attributes) {
			b = append(b, `,"attributes":`...)
			b = append(b, e.Attributes...)
		} else if c, err := Transform(e.Attributes); err == nil {
			b = append(b, `,"attributes":`...)
			b = append(b, c...)
		} else {
			b = append(b, `,"attributes_raw":"`...)
			b = base64.StdEncoding.AppendEncode(b, e.Attributes)
			b = append(b, '"')
		}
	}
	b = append(b, ',')
	b = appendField(b, "event_id", e.EventID)
	b = append(b, ',')
	b = appendField(b, "outcome", e.Outcome)
	b = append(b, ',')
	b = appendField(b, "resource", e.Resource)
	b = append(b, ',')
	b = appendField(b, "stream", e.Stream)
	b = append(b, `,"ts":`...)
	b = strconv.AppendInt(b, e.TS, 10)
	return append(b, '}')
}

// LeafHash returns SHA-256(0x00 || data), the RFC 6962 hash of a leaf.
func LeafHash(data []byte) [LeafHashSize]byte {
	return tlog.RecordHash(data)
}

// EventHash is LeafHash(Event(e)).
func EventHash(e *model.AuditEvent) [LeafHashSize]byte { return LeafHash(Event(e)) }

// Hasher computes leaf hashes of events, reusing one buffer for their
// canonical bytes. It is not safe for concurrent use.
type Hasher struct{ buf []byte }

// EventHash is LeafHash(Event(e)).
func (h *Hasher) EventHash(e *model.AuditEvent) [LeafHashSize]byte {
	h.buf = AppendEvent(append(h.buf[:0], 0x00), e)
	return sha256.Sum256(h.buf) // the RFC 6962 leaf hash, as LeafHash
}

// Equal reports whether two events have the same canonical form: what the
// log commits to, and so what "the same payload" means for a resubmission.
func Equal(a, b *model.AuditEvent) bool { return bytes.Equal(Event(a), Event(b)) }

// Transform returns the RFC 8785 canonical form of the JSON text in. It
// refuses input that is not I-JSON: invalid UTF-8, duplicate member names,
// lone UTF-16 surrogate escapes, numbers that are not finite float64
// values, nesting deeper than 64, or anything after the value.
func Transform(in []byte) ([]byte, error) {
	if !utf8.Valid(in) {
		return nil, errors.New("canonicalize: invalid UTF-8")
	}
	p := parser{in: in}
	out, err := p.value(make([]byte, 0, len(in)), 0)
	if err == nil {
		p.space()
		if p.pos != len(p.in) {
			err = p.errorf("data after the value")
		}
	}
	if err != nil {
		return nil, fmt.Errorf("canonicalize: %w", err)
	}
	return out, nil
}

// parser is a JSON reader that writes the canonical form as it goes.
type parser struct {
	in  []byte
	pos int
}

func (p *parser) errorf(format string, args ...any) error {
	return fmt.Errorf("at byte %d: %s", p.pos, fmt.Sprintf(format, args...))
}

func (p *parser) space() {
	for p.pos < len(p.in) {
		switch p.in[p.pos] {
		case ' ', '\t', '\n', '\r':
			p.pos++
		default:
			return
		}
	}
}

func (p *parser) value(b []byte, depth int) ([]byte, error) {
	if depth > maxDepth {
		return nil, p.errorf("nested deeper than %d", maxDepth)
	}
	p.space()
	if p.pos >= len(p.in) {
		return nil, p.errorf("unexpected end of input")
	}
	switch c := p.in[p.pos]; {
	case c == '{':
		return p.object(b, depth)
	case c == '[':
		p.pos++
		b = append(b, '[')
		p.space()
		if p.pos < len(p.in) && p.in[p.pos] == ']' {
			p.pos++
			return append(b, ']'), nil
		}
		for {
			var err error
			if b, err = p.value(b, depth+1); err != nil {
				return nil, err
			}
			p.space()
			if p.pos >= len(p.in) {
				return nil, p.errorf("unterminated array")
			}
			switch p.in[p.pos] {
			case ',':
				p.pos++
				b = append(b, ',')
			case ']':
				p.pos++
				return append(b, ']'), nil
			default:
				return nil, p.errorf("want , or ] in array")
			}
		}
	case c == '"':
		s, err := p.str()
		if err != nil {
			return nil, err
		}
		return appendString(b, s), nil
	case c == '-' || c >= '0' && c <= '9':
		return p.number(b)
	case c == 't':
		return p.literal(b, "true")
	case c == 'f':
		return p.literal(b, "false")
	case c == 'n':
		return p.literal(b, "null")
	}
	return nil, p.errorf("unexpected %q", p.in[p.pos])
}

func (p *parser) literal(b []byte, lit string) ([]byte, error) {
	if !bytes.HasPrefix(p.in[p.pos:], []byte(lit)) {
		return nil, p.errorf("bad literal")
	}
	p.pos += len(lit)
	return append(b, lit...), nil
}

// number checks the JSON number grammar, then writes the double it denotes.
func (p *parser) number(b []byte) ([]byte, error) {
	end := numberEnd(p.in, p.pos)
	if end < 0 {
		return nil, p.errorf("bad number")
	}
	start := p.pos
	p.pos = end
	f, err := strconv.ParseFloat(string(p.in[start:end]), 64)
	if err != nil || math.IsInf(f, 0) || math.IsNaN(f) {
		return nil, p.errorf("number %s is not a finite float64", p.in[start:end])
	}
	return AppendNumber(b, f), nil
}

// str reads a string at p.pos and returns its value.
func (p *parser) str() (string, error) {
	p.pos++ // the opening quote
	start := p.pos
	// Fast path: no escapes.
	for p.pos < len(p.in) {
		c := p.in[p.pos]
		if c == '"' {
			s := string(p.in[start:p.pos])
			p.pos++
			return s, nil
		}
		if c == '\\' {
			break
		}
		if c < 0x20 {
			return "", p.errorf("control character in string")
		}
		p.pos++
	}
	buf := append([]byte(nil), p.in[start:p.pos]...)
	for p.pos < len(p.in) {
		c := p.in[p.pos]
		switch {
		case c == '"':
			p.pos++
			return string(buf), nil
		case c < 0x20:
			return "", p.errorf("control character in string")
		case c != '\\':
			buf = append(buf, c)
			p.pos++
			continue
		}
		if p.pos+1 >= len(p.in) {
			break
		}
		e := p.in[p.pos+1]
		p.pos += 2
		switch e {
		case '"', '\\', '/':
			buf = append(buf, e)
		case 'b':
			buf = append(buf, '\b')
		case 'f':
			buf = append(buf, '\f')
		case 'n':
			buf = append(buf, '\n')
		case 'r':
			buf = append(buf, '\r')
		case 't':
			buf = append(buf, '\t')
		case 'u':
			r, ok := hex4(p.in, p.pos)
			if !ok {
				return "", p.errorf("bad \\u escape")
			}
			p.pos += 4
			switch {
			case r >= 0xd800 && r < 0xdc00:
				lo, ok := hex4(p.in, p.pos+2)
				if !ok || p.in[p.pos] != '\\' || p.in[p.pos+1] != 'u' || lo < 0xdc00 || lo > 0xdfff {
					return "", p.errorf("lone UTF-16 surrogate escape")
				}
				p.pos += 6
				r = utf16.DecodeRune(r, lo)
			case r >= 0xdc00 && r <= 0xdfff:
				return "", p.errorf("lone UTF-16 surrogate escape")
			}
			buf = utf8.AppendRune(buf, r)
		default:
			return "", p.errorf("bad escape \\%c", e)
		}
	}
	return "", p.errorf("unterminated string")
}

type member struct {
	key string
	val []byte
}

func (p *parser) object(b []byte, depth int) ([]byte, error) {
	p.pos++ // {
	var ms []member
	p.space()
	if p.pos < len(p.in) && p.in[p.pos] == '}' {
		p.pos++
		return append(b, '{', '}'), nil
	}
	for {
		p.space()
		if p.pos >= len(p.in) || p.in[p.pos] != '"' {
			return nil, p.errorf("want a member name")
		}
		k, err := p.str()
		if err != nil {
			return nil, err
		}
		p.space()
		if p.pos >= len(p.in) || p.in[p.pos] != ':' {
			return nil, p.errorf("want : after member name")
		}
		p.pos++
		v, err := p.value(nil, depth+1)
		if err != nil {
			return nil, err
		}
		ms = append(ms, member{key: k, val: v})
		p.space()
		if p.pos >= len(p.in) {
			return nil, p.errorf("unterminated object")
		}
		if p.in[p.pos] == '}' {
			p.pos++
			break
		}
		if p.in[p.pos] != ',' {
			return nil, p.errorf("want , or } in object")
		}
		p.pos++
	}
	// RFC 8785 §3.2.3: names sorted by their UTF-16 code units.
	slices.SortFunc(ms, func(x, y member) int { return compareUTF16(x.key, y.key) })
	b = append(b, '{')
	for i, m := range ms {
		if i > 0 {
			if m.key == ms[i-1].key {
				return nil, fmt.Errorf("duplicate member name %q", m.key)
			}
			b = append(b, ',')
		}
		b = appendString(b, m.key)
		b = append(b, ':')
		b = append(b, m.val...)
	}
	return append(b, '}'), nil
}

// compareUTF16 orders valid UTF-8 strings by their UTF-16 code units: as
// code points, except that supplementary characters (surrogate pairs,
// 0xD800-0xDFFF) sort before U+E000-U+FFFF.
func compareUTF16(a, b string) int {
	for a != "" && b != "" {
		ra, na := utf8.DecodeRuneInString(a)
		rb, nb := utf8.DecodeRuneInString(b)
		if ra != rb {
			return cmp.Compare(utf16Key(ra), utf16Key(rb))
		}
		a, b = a[na:], b[nb:]
	}
	return cmp.Compare(len(a), len(b))
}

// utf16Key maps a rune to a value ordered like its first UTF-16 unit, then
// its second.
func utf16Key(r rune) int64 {
	if r < 0x10000 {
		return int64(r) << 16
	}
	hi, lo := utf16.EncodeRune(r)
	return int64(hi)<<16 | int64(lo)
}

// appendField appends "name":"value", or "name_b64":"<base64>" when value
// is not valid UTF-8.
func appendField(b []byte, name, value string) []byte {
	if plainASCII(value) { // the usual case, and name is always plain
		b = append(b, '"')
		b = append(b, name...)
		b = append(b, '"', ':', '"')
		b = append(b, value...)
		return append(b, '"')
	}
	if utf8.ValidString(value) {
		b = appendString(b, name)
		b = append(b, ':')
		return appendString(b, value)
	}
	b = appendString(b, name+"_b64")
	b = append(b, ':', '"')
	b = base64.StdEncoding.AppendEncode(b, []byte(value))
	return append(b, '"')
}

// appendString appends s as a JSON string in the RFC 8785 form: only '"',
// '\\' and control characters are escaped; \b \f \n \r \t use their short
// escapes, other controls \u00xx in lower-case hex; everything else is
// copied as UTF-8. Invalid UTF-8 in s (never in validated fields) is
// written as U+FFFD.
func appendString(b []byte, s string) []byte {
	const hex = "0123456789abcdef"
	b = append(b, '"')
	if plainASCII(s) {
		b = append(b, s...)
		return append(b, '"')
	}
	for _, r := range s {
		switch {
		case r == '"':
			b = append(b, '\\', '"')
		case r == '\\':
			b = append(b, '\\', '\\')
		case r == '\b':
			b = append(b, '\\', 'b')
		case r == '\f':
			b = append(b, '\\', 'f')
		case r == '\n':
			b = append(b, '\\', 'n')
		case r == '\r':
			b = append(b, '\\', 'r')
		case r == '\t':
			b = append(b, '\\', 't')
		case r < 0x20:
			b = append(b, '\\', 'u', '0', '0', hex[r>>4], hex[r&0xf])
		default:
			b = utf8.AppendRune(b, r)
		}
	}
	return append(b, '"')
}

// AppendNumber appends f in the ECMAScript Number.prototype.toString form
// RFC 8785 §3.2.2.3 requires: the shortest digits that round-trip, plain
// notation for 1e-6 <= |f| < 1e21, else d.ddde±x; -0 is 0. f must be
// finite.
func AppendNumber(b []byte, f float64) []byte {
	if f == 0 {
		return append(b, '0')
	}
	if f < 0 {
		b = append(b, '-')
		f = -f
	}
	// Shortest round-trip digits and exponent: d.ddde±x.
	e := strconv.FormatFloat(f, 'e', -1, 64)
	mant, exp, _ := strings.Cut(e, "e")
	digits := strings.Replace(mant, ".", "", 1)
	x, _ := strconv.Atoi(exp)
	k := len(digits)
	n := x + 1 // position of the decimal point relative to the digits
	switch {
	case k <= n && n <= 21:
		b = append(b, digits...)
		for range n - k {
			b = append(b, '0')
		}
	case 0 < n && n <= 21:
		b = append(b, digits[:n]...)
		b = append(b, '.')
		b = append(b, digits[n:]...)
	case -6 < n && n <= 0:
		b = append(b, '0', '.')
		for range -n {
			b = append(b, '0')
		}
		b = append(b, digits...)
	default:
		b = append(b, digits[0])
		if k > 1 {
			b = append(b, '.')
			b = append(b, digits[1:]...)
		}
		b = append(b, 'e')
		if n-1 >= 0 {
			b = append(b, '+')
		}
		b = strconv.AppendInt(b, int64(n-1), 10)
	}
	return b
}

// hex4 decodes the four hex digits at in[i:i+4].
func hex4(in []byte, i int) (rune, bool) {
	if i < 0 || i+4 > len(in) {
		return 0, false
	}
	v, err := strconv.ParseUint(string(in[i:i+4]), 16, 16)
	return rune(v), err == nil
}
