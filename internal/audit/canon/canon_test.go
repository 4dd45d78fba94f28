package canon

import (
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"math"
	"reflect"
	"testing"

	"github.com/sluicehq/sluice/internal/model"
)

func TestTransform(t *testing.T) {
	tests := []struct {
		name, in, want string
	}{
		{"rfc8785 sample", `{"numbers":[333333333.33333329,1E30,4.50,2e-3,0.000000000000000000000000001],"string":"\u20ac$\u000F\u000aA'\u0042\u0022\u005c\\\"\/","literals":[null,true,false]}`,
			`{"literals":[null,true,false],"numbers":[333333333.3333333,1e+30,4.5,0.002,1e-27],"string":"€$\u000f\nA'B\"\\\\\"/"}`},
		{"utf-16 key order", `{"\u20ac":"Euro Sign","\r":"Carriage Return","\ufb33":"Hebrew Letter Dalet With Dagesh","1":"One","\ud83d\ude00":"Emoji: Grinning Face","\u0080":"Control","\u00f6":"Latin Small Letter O With Diaeresis"}`,
			`{"\r":"Carriage Return","1":"One","` + "\u0080" + `":"Control","ö":"Latin Small Letter O With Diaeresis","€":"Euro Sign","😀":"Emoji: Grinning Face","דּ":"Hebrew Letter Dalet With Dagesh"}`},
		{"nested and whitespace", " { \"b\" : [ 1 , { \"z\":1,\"a\":2} ], \"a\" : {} } ", `{"a":{},"b":[1,{"a":2,"z":1}]}`},
		{"negative zero", `[-0, -0.0, 0e10]`, `[0,0,0]`},
		{"empty", `{}`, `{}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Transform([]byte(tt.in))
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != tt.want {
				t.Errorf("got  %s\nwant %s", got, tt.want)
			}
		})
	}
}

func TestTransformRefuses(t *testing.T) {
	for _, in := range []string{
		`{"a":1,"a":2}`, `{"a":1e400}`, `{"a":"\ud800"}`, `{"a":"\udc00x"}`, `{"a":"\ud800\u0041"}`,
		"{\"a\":\"\xff\"}", `{"a":1} 2`, `{"a":`, `[1,]`, `{1:2}`,
		string(bytes.Repeat([]byte("["), 70)) + string(bytes.Repeat([]byte("]"), 70)),
	} {
		if out, err := Transform([]byte(in)); err == nil {
			t.Errorf("Transform(%q) = %s, want an error", in, out)
		}
	}
}

func TestAppendNumber(t *testing.T) {
	tests := []struct {
		f    float64
		want string
	}{
		{0, "0"}, {math.Copysign(0, -1), "0"}, {1, "1"}, {-1.5, "-1.5"}, {4.5, "4.5"}, {0.002, "0.002"},
		{1e-6, "0.000001"}, {1e-7, "1e-7"}, {1.5e-7, "1.5e-7"}, {1e20, "100000000000000000000"}, {1e21, "1e+21"},
		{123e20, "1.23e+22"}, {1e30, "1e+30"}, {5e-324, "5e-324"}, {math.MaxFloat64, "1.7976931348623157e+308"},
		{333333333.3333333, "333333333.3333333"}, {9007199254740992, "9007199254740992"}, {0.1, "0.1"},
		{123456789012345680000, "123456789012345680000"},
	}
	for _, tt := range tests {
		if got := string(AppendNumber(nil, tt.f)); got != tt.want {
			t.Errorf("AppendNumber(%v) = %s, want %s", tt.f, got, tt.want)
		}
	}
}

func TestEvent(t *testing.T) {
	e := model.AuditEvent{EventID: "e-1", Stream: "billing", TS: 1764028800123, Actor: "alice", Action: "login",
		Resource: "console", Outcome: "success", Attributes: []byte(`{"ip":"10.0.0.1","n":1.0,"a":["x"]}`)}
	want := `{"action":"login","actor":"alice","attributes":{"a":["x"],"ip":"10.0.0.1","n":1},"event_id":"e-1","outcome":"success","resource":"console","stream":"billing","ts":1764028800123}`
	if got := string(Event(&e)); got != want {
		t.Errorf("got  %s\nwant %s", got, want)
	}
	e.Attributes = nil
	want = `{"action":"login","actor":"alice","event_id":"e-1","outcome":"success","resource":"console","stream":"billing","ts":1764028800123}`
	if got := string(Event(&e)); got != want {
		t.Errorf("got  %s\nwant %s", got, want)
	}
	e.Attributes = []byte(`{"a":1,"a":1}`)
	want = `{"action":"login","actor":"alice","attributes_raw":"eyJhIjoxLCJhIjoxfQ==","event_id":"e-1","outcome":"success","resource":"console","stream":"billing","ts":1764028800123}`
	if got := string(Event(&e)); got != want {
		t.Errorf("got  %s\nwant %s", got, want)
	}
	// A leaf is SHA-256 over 0x00 and the canonical bytes.
	if got, want := LeafHash([]byte("abc")), sha256.Sum256([]byte("\x00abc")); got != want {
		t.Errorf("LeafHash = %x, want %x", got, want)
	}
}

// FuzzTransform checks that the canonical form is valid JSON, equal in
// value to the input, and a fixed point.
func FuzzTransform(f *testing.F) {
	for _, s := range []string{`{"a":1}`, `[1.5e300,"\u00e9",null]`, `{"\ud83d\ude00":{"":[]}}`, `"x"`, `-0.0`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		out, err := Transform(in)
		if err != nil {
			return
		}
		if !json.Valid(out) {
			t.Fatalf("Transform(%q) = %q: not JSON", in, out)
		}
		again, err := Transform(out)
		if err != nil || !bytes.Equal(again, out) {
			t.Fatalf("not a fixed point: %q -> %q -> %q (%v)", in, out, again, err)
		}
		var a, b any
		if json.Unmarshal(in, &a) == nil && json.Unmarshal(out, &b) == nil {
			if !reflect.DeepEqual(a, b) { // -0 and 0 are equal here, as JCS wants
				t.Fatalf("value changed: %q -> %q", in, out)
			}
		}
	})
}

func TestEventInvalidUTF8(t *testing.T) {
	a := model.AuditEvent{EventID: "e", Stream: "s", Actor: "\xff"}
	b := model.AuditEvent{EventID: "e", Stream: "s", Actor: "\xfe"}
	if Equal(&a, &b) {
		t.Fatal("two invalid actors share a canonical form")
	}
	want := `{"action":"","actor_b64":"/w==","event_id":"e","outcome":"","resource":"","stream":"s","ts":0}`
	if got := string(Event(&a)); got != want {
		t.Errorf("got %s, want %s", got, want)
	}
}
