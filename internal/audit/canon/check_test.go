package canon

import (
	"bytes"
	"testing"

	"github.com/sluicehq/sluice/internal/model"
)

func TestCanonical(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want bool
	}{
		{`{"amount":1234,"ip":"10.0.1.2"}`, true},
		{`{}`, true},
		{`[]`, true},
		{`{"a":[1,"x",true,false,null,{"b":{}}]}`, true},
		{`{"a":1.5,"b":-2,"c":1e+21,"d":1e-7,"e":0.000001,"f":0}`, true},
		{`{"a":"tab\there","b":"quote\" back\\ nul\u0000 us\u001f"}`, true},
		{`{"é":1,"😀":2,"":3}`, false}, // "" must come first
		{`{"":3,"é":1,"😀":2,"ｅ":4}`, true},
		{`{"":3,"é":1,"ｅ":4,"😀":2}`, false}, // a surrogate pair sorts before U+FF45
		{`{"b":1,"a":2}`, false},            // unsorted
		{`{"a":1,"a":2}`, false},            // duplicate
		{`{"a": 1}`, false},                 // space
		{` {"a":1}`, false},
		{`{"a":1}` + "\n", false},
		{`{"a":1.0}`, false},
		{`{"a":1E+21}`, false},
		{`{"a":-0}`, false},
		{`{"a":100000000000000000000}`, true},   // 1e20 is written out in full
		{`{"a":1000000000000000000000}`, false}, // 1e21 is written 1e+21
		{`{"a":123456789012345}`, true},
		{`{"a":1234567890123456789}`, false}, // not exact in a double
		{`{"a":01}`, false},
		{`{"a":"\/"}`, false},
		{`{"a":"\u0041"}`, false},
		{`{"a":"\u000a"}`, false}, // \n has a short escape
		{`{"a":"\u001F"}`, false}, // upper-case hex
		{`{"\u0041":1}`, false},
		{"{\"a\":\"\xff\"}", false},
		{`{"a":1e400}`, false},
		{`"\u00/0"`, false}, // not hex
		{`["\u00 0"]`, false},
		{`{"a":"\u00!f"}`, false},
		{`"\u002f"`, false}, // '/' is not a control character
		{`"\u0008"`, false}, // \b has a short escape
		{`"\u001f\u0000"`, true},
		{"\"\x1f\"", false},                // a raw control character is not JSON
		{`{"\t":1,"\u0001":2}`, false},     // by the names' characters, \u0001 sorts first
		{`{"a":1234567890123456}`, true},   // 16 digits, exact in a double
		{`{"a":12345678901234567}`, false}, // written 12345678901234568
		{`{"a":tru}`, false},
		{`{"a":1`, false},
		{`[1,]`, false},
		{`"x`, false},
		{``, false},
	} {
		if got := Canonical([]byte(tc.in)); got != tc.want {
			t.Errorf("Canonical(%s) = %v, want %v", tc.in, got, tc.want)
		}
		if tc.want {
			if out, err := Transform([]byte(tc.in)); err != nil || string(out) != tc.in {
				t.Errorf("Transform(%s) = %s, %v: the case is not canonical", tc.in, out, err)
			}
		}
	}
}

// TestCanonicalDepth checks that Canonical takes exactly the nesting
// Transform takes.
func TestCanonicalDepth(t *testing.T) {
	deep := func(n int) []byte {
		return append(bytes.Repeat([]byte("["), n), bytes.Repeat([]byte("]"), n)...)
	}
	for n := maxDepth - 1; n <= maxDepth+3; n++ {
		_, err := Transform(deep(n))
		if got := Canonical(deep(n)); got != (err == nil) {
			t.Errorf("%d levels: Canonical %v, Transform's error %v", n, got, err)
		}
	}
	if Canonical(deep(maxDepth+2)) || !Canonical(deep(maxDepth)) {
		t.Error("the depth limit moved")
	}
}

// TestEventEscapes checks the canonical bytes of fields that need
// escaping but are otherwise plain ASCII.
func TestEventEscapes(t *testing.T) {
	e := model.AuditEvent{EventID: `a\b`, Stream: "s", Actor: `say "hi"`, Action: "tab\there", Outcome: "nul\x00"}
	want := `{"action":"tab\there","actor":"say \"hi\"","event_id":"a\\b","outcome":"nul\u0000","resource":"","stream":"s","ts":0}`
	if got := string(Event(&e)); got != want {
		t.Errorf("got  %s\nwant %s", got, want)
	}
}

func TestHasher(t *testing.T) {
	var h Hasher
	for _, e := range []model.AuditEvent{
		{EventID: "e1", Stream: "s", TS: 1, Actor: "a", Action: "b", Resource: "r", Outcome: "ok", Attributes: []byte(`{"b":1,"a":2}`)},
		{EventID: "e2", Stream: "s", TS: 2, Actor: "\xff", Attributes: []byte(`{"a":1}`)},
		{EventID: "é \"q\"", Stream: "s", TS: -3, Attributes: []byte(`{"a":1,"a":2}`)},
	} {
		if got, want := h.EventHash(&e), LeafHash(Event(&e)); got != want {
			t.Errorf("Hasher.EventHash(%+v) = %x, want %x", e, got, want)
		}
	}
}

// FuzzCanonical checks Canonical against Transform: what it calls
// canonical Transform leaves unchanged, and what Transform writes without
// a backslash it calls canonical.
func FuzzCanonical(f *testing.F) {
	for _, s := range []string{`{"a":1}`, `[1.5e300,"\u00e9",null]`, `{"\ud83d\ude00":{"":[]}}`, `"x"`, `-0.0`, `{"a":1e+21,"b":[0.5]}`, `{"é":1,"😀":2}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		out, err := Transform(in)
		if Canonical(in) && (err != nil || !bytes.Equal(out, in)) {
			t.Fatalf("Canonical(%q) but Transform gives %q, %v", in, out, err)
		}
		if err == nil && bytes.IndexByte(out, '\\') < 0 && !Canonical(out) {
			t.Fatalf("Transform(%q) = %q, which Canonical refuses", in, out)
		}
	})
}
