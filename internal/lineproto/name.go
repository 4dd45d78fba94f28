package lineproto

import (
	"errors"
	"fmt"
	"strings"
)

// A line's measurement, one of its field keys and its tags other than the
// device tag become one metric name, within the id charset
// [A-Za-z0-9_.:-]:
//
//	name    = segment(measurement, '.') "." segment(field)
//	          { ":" segment(tag key, '.') "." segment(tag value) }
//
// with the tags sorted by key. A segment is its text with every byte that
// is not A-Z a-z 0-9 _ - written as '-' and two lowercase hex digits ("/"
// is "-2f", "é" is "-c3-a9"). '.' stays as it is in a field key and a tag
// value, and is escaped in a measurement and a tag key, so the first '.'
// after a ':' (or at the start) ends the key. A '-' stays as it is unless
// the two bytes after it are lowercase hex digits, which would read as an
// escape: then it is written "-2d" ("cpu-total" stays, "a-1f" is "a-2d1f").
// Each line maps to one name and each name back to one line's parts
// (ParseName), so two different tag sets never share a name.

// appendSegment appends the escaped form of s to dst; dot says whether '.'
// is escaped too.
func appendSegment(dst []byte, s []byte, dot bool) []byte {
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case isPlain(c), c == '.' && !dot:
			dst = append(dst, c)
		case c == '-' && !(i+2 < len(s) && isLowerHex(s[i+1]) && isLowerHex(s[i+2])):
			dst = append(dst, c)
		default:
			dst = append(dst, '-', hexDigits[c>>4], hexDigits[c&15])
		}
	}
	return dst
}

// segmentLen returns len(appendSegment(nil, s, dot)) without building it.
func segmentLen(s []byte, dot bool) int {
	n := len(s)
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case isPlain(c), c == '.' && !dot:
		case c == '-' && !(i+2 < len(s) && isLowerHex(s[i+1]) && isLowerHex(s[i+2])):
		default:
			n += 2
		}
	}
	return n
}

const hexDigits = "0123456789abcdef"

// isPlain reports whether c is written as it is in every segment.
func isPlain(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_'
}

func isLowerHex(c byte) bool { return c >= '0' && c <= '9' || c >= 'a' && c <= 'f' }

// Tag is one tag of a line.
type Tag struct {
	Key, Value string
}

// Name is what a metric name made from a line holds.
type Name struct {
	Measurement string
	Field       string
	// Tags are sorted by key; the device tag is not among them.
	Tags []Tag
}

// String returns the metric name of n (its tags must be sorted by key).
func (n Name) String() string {
	b := appendSegment(nil, []byte(n.Measurement), true)
	b = append(b, '.')
	b = appendSegment(b, []byte(n.Field), false)
	for _, t := range n.Tags {
		b = append(b, ':')
		b = appendSegment(b, []byte(t.Key), true)
		b = append(b, '.')
		b = appendSegment(b, []byte(t.Value), false)
	}
	return string(b)
}

// ParseName splits a metric name made from a line back into the line's
// measurement, field key and tags. It fails on a name no line maps to
// (e.g. one written through the JSON API without a '.').
func ParseName(s string) (Name, error) {
	parts := strings.Split(s, ":")
	var n Name
	for i, p := range parts {
		k, v, ok := strings.Cut(p, ".")
		if !ok || k == "" || v == "" {
			return Name{}, fmt.Errorf("metric name %q: part %q is not key.value", s, p)
		}
		key, err := unescape(k)
		if err != nil {
			return Name{}, fmt.Errorf("metric name %q: %w", s, err)
		}
		val, err := unescape(v)
		if err != nil {
			return Name{}, fmt.Errorf("metric name %q: %w", s, err)
		}
		if i == 0 {
			n.Measurement, n.Field = key, val
			continue
		}
		n.Tags = append(n.Tags, Tag{Key: key, Value: val})
	}
	return n, nil
}

// unescape undoes appendSegment.
func unescape(s string) (string, error) {
	if !strings.Contains(s, "-") {
		return s, nil
	}
	b := make([]byte, 0, len(s))
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c == '-' && i+2 < len(s) && isLowerHex(s[i+1]) && isLowerHex(s[i+2]) {
			b = append(b, unhex(s[i+1])<<4|unhex(s[i+2]))
			i += 2
			continue
		}
		if !isPlain(c) && c != '.' && c != '-' {
			return "", errors.New("invalid character " + fmt.Sprintf("%q", c))
		}
		b = append(b, c)
	}
	return string(b), nil
}

func unhex(c byte) byte {
	if c <= '9' {
		return c - '0'
	}
	return c - 'a' + 10
}
