package canon

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"testing"
	"unicode/utf16"
	"unicode/utf8"
)

// referenceTransform is a second, slow canonicalizer built on
// encoding/json's tokenizer, for differential fuzzing of Transform.
func referenceTransform(in []byte) ([]byte, error) {
	if !utf8.Valid(in) || hasLoneSurrogate(in) {
		return nil, errors.New("invalid")
	}
	dec := json.NewDecoder(bytes.NewReader(in))
	dec.UseNumber()
	out, err := refValue(dec, 0)
	if err != nil {
		return nil, err
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, errors.New("data after the value")
	}
	return out, nil
}

func hasLoneSurrogate(in []byte) bool {
	for i := 0; i+1 < len(in); i++ {
		if in[i] != '\\' {
			continue
		}
		if in[i+1] != 'u' {
			i++
			continue
		}
		r, ok := hex4(in, i+2)
		if !ok {
			continue
		}
		switch {
		case r >= 0xd800 && r < 0xdc00:
			lo, ok := hex4(in, i+8)
			if !ok || in[i+6] != '\\' || in[i+7] != 'u' || lo < 0xdc00 || lo > 0xdfff {
				return true
			}
			i += 11
		case r >= 0xdc00 && r <= 0xdfff:
			return true
		default:
			i += 5
		}
	}
	return false
}

func refValue(dec *json.Decoder, depth int) ([]byte, error) {
	if depth > maxDepth {
		return nil, errors.New("too deep")
	}
	tok, err := dec.Token()
	if err != nil {
		return nil, err
	}
	switch t := tok.(type) {
	case json.Delim:
		switch t {
		case '{':
			type kv struct {
				k string
				u []uint16
				v []byte
			}
			var ms []kv
			for dec.More() {
				kt, err := dec.Token()
				if err != nil {
					return nil, err
				}
				k, ok := kt.(string)
				if !ok {
					return nil, errors.New("bad key")
				}
				v, err := refValue(dec, depth+1)
				if err != nil {
					return nil, err
				}
				ms = append(ms, kv{k, utf16.Encode([]rune(k)), v})
			}
			if _, err := dec.Token(); err != nil {
				return nil, err
			}
			slices.SortFunc(ms, func(a, b kv) int { return slices.Compare(a.u, b.u) })
			b := []byte{'{'}
			for i, m := range ms {
				if i > 0 {
					if m.k == ms[i-1].k {
						return nil, errors.New("duplicate")
					}
					b = append(b, ',')
				}
				b = appendString(b, m.k)
				b = append(b, ':')
				b = append(b, m.v...)
			}
			return append(b, '}'), nil
		case '[':
			b := []byte{'['}
			for i := 0; dec.More(); i++ {
				if i > 0 {
					b = append(b, ',')
				}
				v, err := refValue(dec, depth+1)
				if err != nil {
					return nil, err
				}
				b = append(b, v...)
			}
			if _, err := dec.Token(); err != nil {
				return nil, err
			}
			return append(b, ']'), nil
		}
	case string:
		return appendString(nil, t), nil
	case json.Number:
		f, err := strconv.ParseFloat(string(t), 64)
		if err != nil || math.IsInf(f, 0) || math.IsNaN(f) {
			return nil, errors.New("bad number")
		}
		return AppendNumber(nil, f), nil
	case bool:
		return strconv.AppendBool(nil, t), nil
	case nil:
		return []byte("null"), nil
	}
	return nil, fmt.Errorf("unexpected %v", tok)
}

// FuzzTransformReference checks Transform against the reference: the same
// output, or both refusing.
func FuzzTransformReference(f *testing.F) {
	for _, s := range []string{`{"a":1,"b":[true,null,"\u00e9\ud83d\ude00"]}`, `[1e400]`, `{"a":1,"a":2}`, `"\ud800"`,
		`{"\ufb33":1,"\ud83d\ude00":2}`, `[01]`, `[1.]`, `[-]`, ` {"x" : "\/\b"} `, "[\"\t\"]"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		got, err := Transform(in)
		want, rerr := referenceTransform(in)
		if (err == nil) != (rerr == nil) {
			t.Fatalf("Transform(%q) = %q, %v; reference %q, %v", in, got, err, want, rerr)
		}
		if err == nil && !bytes.Equal(got, want) {
			t.Fatalf("Transform(%q) = %q, reference %q", in, got, want)
		}
	})
}
