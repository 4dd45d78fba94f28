// Package canon defines the canonical encoding of an audit event: the bytes
// whose RFC 6962 leaf hash is the event's leaf in its stream's log. The
// encoding is the RFC 8785 JSON Canonicalization Scheme (JCS) applied to a
// fixed JSON object of the event's fields, so that an auditor can recompute
// it in any language with a JCS library. docs/audit.md specifies it.
package canon

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/sluicehq/sluice/internal/model"
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
	b := make([]byte, 0, 96+len(e.EventID)+len(e.Stream)+len(e.Actor)+len(e.Action)+len(e.Resource)+len(e.Outcome)+len(e.Attributes))
	b = append(b, '{')
	b = appendField(b, "action", e.Action)
	b = append(b, ',')
	b = appendField(b, "actor", e.Actor)
	if len(e.Attributes) > 0 {
		if c, err := Transform(e.Attributes); err == nil {
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
	h := sha256.New()
	h.Write([]byte{0})
	h.Write(data)
	var out [LeafHashSize]byte
	h.Sum(out[:0])
	return out
}

// EventHash is LeafHash(Event(e)).
func EventHash(e *model.AuditEvent) [LeafHashSize]byte { return LeafHash(Event(e)) }

// Equal reports whether two events have the same canonical form: what the
// log commits to, and so what "the same payload" means for a resubmission.
func Equal(a, b *model.AuditEvent) bool { return bytes.Equal(Event(a), Event(b)) }

// Transform returns the RFC 8785 canonical form of the JSON text in. It
// refuses input that is not I-JSON: invalid UTF-8, duplicate member names,
// numbers that are not finite float64 values, nesting deeper than 64, or
// anything after the value.
func Transform(in []byte) ([]byte, error) {
	if !utf8.Valid(in) {
		return nil, errors.New("canonicalize: invalid UTF-8")
	}
	if err := checkSurrogates(in); err != nil {
		return nil, fmt.Errorf("canonicalize: %w", err)
	}
	dec := json.NewDecoder(bytes.NewReader(in))
	dec.UseNumber()
	out, err := value(dec, nil, 0)
	if err != nil {
		return nil, fmt.Errorf("canonicalize: %w", err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, errors.New("canonicalize: data after the value")
	}
	return out, nil
}

func value(dec *json.Decoder, b []byte, depth int) ([]byte, error) {
	if depth > maxDepth {
		return nil, fmt.Errorf("nested deeper than %d", maxDepth)
	}
	tok, err := dec.Token()
	if err != nil {
		return nil, err
	}
	switch t := tok.(type) {
	case json.Delim:
		switch t {
		case '{':
			return object(dec, b, depth)
		case '[':
			b = append(b, '[')
			for i := 0; dec.More(); i++ {
				if i > 0 {
					b = append(b, ',')
				}
				if b, err = value(dec, b, depth+1); err != nil {
					return nil, err
				}
			}
			if _, err := dec.Token(); err != nil {
				return nil, err
			}
			return append(b, ']'), nil
		}
		return nil, fmt.Errorf("unexpected %q", t)
	case string:
		return appendString(b, t), nil
	case json.Number:
		f, err := strconv.ParseFloat(string(t), 64)
		if err != nil || math.IsInf(f, 0) || math.IsNaN(f) {
			return nil, fmt.Errorf("number %s is not a finite float64", t)
		}
		return AppendNumber(b, f), nil
	case bool:
		return strconv.AppendBool(b, t), nil
	case nil:
		return append(b, "null"...), nil
	}
	return nil, fmt.Errorf("unexpected token %v", tok)
}

type member struct {
	key   string
	utf16 []uint16
	val   []byte
}

func object(dec *json.Decoder, b []byte, depth int) ([]byte, error) {
	var ms []member
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, err
		}
		k, ok := tok.(string)
		if !ok {
			return nil, fmt.Errorf("member name %v is not a string", tok)
		}
		v, err := value(dec, nil, depth+1)
		if err != nil {
			return nil, err
		}
		ms = append(ms, member{key: k, utf16: utf16.Encode([]rune(k)), val: v})
	}
	if _, err := dec.Token(); err != nil {
		return nil, err
	}
	// RFC 8785 §3.2.3: names sorted by their UTF-16 code units.
	slices.SortFunc(ms, func(x, y member) int { return slices.Compare(x.utf16, y.utf16) })
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

// appendField appends "name":"value", or "name_b64":"<base64>" when value
// is not valid UTF-8.
func appendField(b []byte, name, value string) []byte {
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

// checkSurrogates refuses \u escapes of lone UTF-16 surrogates, which
// encoding/json would silently turn into U+FFFD (two different inputs
// would then share one canonical form).
func checkSurrogates(in []byte) error {
	for i := 0; i < len(in); i++ {
		if in[i] != '\\' {
			continue
		}
		if i+1 < len(in) && in[i+1] != 'u' {
			i++ // a two-character escape, e.g. \\ or \"
			continue
		}
		r, ok := hex4(in, i+2)
		if !ok {
			continue // the decoder reports the bad escape
		}
		switch {
		case r >= 0xd800 && r < 0xdc00:
			lo, ok := hex4(in, i+8)
			if !ok || in[i+6] != '\\' || in[i+7] != 'u' || lo < 0xdc00 || lo > 0xdfff {
				return errors.New("lone UTF-16 surrogate escape")
			}
			i += 11
		case r >= 0xdc00 && r <= 0xdfff:
			return errors.New("lone UTF-16 surrogate escape")
		default:
			i += 5
		}
	}
	return nil
}

// hex4 decodes the four hex digits at in[i:i+4].
func hex4(in []byte, i int) (rune, bool) {
	if i < 0 || i+4 > len(in) {
		return 0, false
	}
	v, err := strconv.ParseUint(string(in[i:i+4]), 16, 16)
	return rune(v), err == nil
}
