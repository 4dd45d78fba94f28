package decode

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/sluicehq/sluice/internal/model"
)

// ev is a minimal valid audit event object with extra members appended.
func ev(extra string) string {
	return `{"event_id":"e1","stream":"s","ts":1,"action":"login"` + extra + `}`
}

func TestAudit(t *testing.T) {
	const full = `{"event_id":"01JD7Z","stream":"billing-api","ts":"2026-11-22T10:00:00Z","actor":"user:42","action":"invoice.refund","resource":"invoice:981","outcome":"success","attributes":{ "amount" : 12.5, "tags":[ "a" , "b\u0021" ],"n":null,"t":true,"f":false,"o":{},"e":[]}}`
	fullEvent := model.AuditEvent{
		EventID: "01JD7Z", Stream: "billing-api", TS: nowMs, Actor: "user:42", Action: "invoice.refund",
		Resource: "invoice:981", Outcome: "success",
		Attributes: []byte(`{"amount":12.5,"tags":["a","b\u0021"],"n":null,"t":true,"f":false,"o":{},"e":[]}`),
	}
	minimal := func(mod func(*model.AuditEvent)) model.AuditEvent {
		e := model.AuditEvent{EventID: "e1", Stream: "s", TS: 1, Action: "login"}
		if mod != nil {
			mod(&e)
		}
		return e
	}
	tests := []struct {
		name   string
		body   string
		ndjson bool
		lim    func(*Limits)
		want   []model.AuditEvent
		err    *wantErr
	}{
		{name: "full", body: full, want: []model.AuditEvent{fullEvent}},
		{name: "minimal", body: ev(""), want: []model.AuditEvent{minimal(nil)}},
		{name: "array", body: "[" + full + "," + ev("") + "]", want: []model.AuditEvent{fullEvent, minimal(nil)}},
		{name: "ndjson", body: "\n" + full + "\r\n\n" + ev(""), ndjson: true, want: []model.AuditEvent{fullEvent, minimal(nil)}},
		{name: "empty body", body: " ", err: &wantErr{reason: "body is empty"}},
		{name: "ndjson line", body: ev("") + "\n\n" + ev(`,"action":"x"`) + "\n", ndjson: true, err: &wantErr{row: 1, line: 3, field: "action", reason: "duplicate field"}},
		{name: "unknown field", body: ev(`,"user":"x"`), err: &wantErr{field: "user", reason: "unknown field"}},
		{name: "too many rows", lim: func(l *Limits) { l.MaxRows = 1 }, body: "[" + ev("") + "," + ev("") + "]", err: &wantErr{tooMany: 1}},

		// ids.
		{name: "event_id missing", body: `{"stream":"s","ts":1,"action":"a"}`, err: &wantErr{field: "event_id", reason: "is required"}},
		{name: "event_id bad", body: `{"event_id":"a b"}`, err: &wantErr{field: "event_id", reason: "invalid character ' '"}},
		{name: "event_id too long", lim: func(l *Limits) { l.MaxIDLength = 4 }, body: `{"event_id":"abcde"}`, err: &wantErr{field: "event_id", reason: "is 5 bytes long; at most 4 allowed"}},
		{name: "event_id number", body: `{"event_id":1}`, err: &wantErr{field: "event_id", reason: "must be a string, got number"}},
		{name: "stream missing", body: `{"event_id":"e","ts":1,"action":"a"}`, err: &wantErr{field: "stream", reason: "is required"}},
		{name: "stream empty", body: `{"event_id":"e","stream":""}`, err: &wantErr{field: "stream", reason: "must not be empty"}},
		{name: "stream slash", body: `{"event_id":"e","stream":"a/b"}`, err: &wantErr{field: "stream", reason: "invalid character '/'"}},

		// ts.
		{name: "ts missing", body: `{"event_id":"e","stream":"s","action":"a"}`, err: &wantErr{field: "ts", reason: "is required"}},
		{name: "ts offset", body: `{"event_id":"e","stream":"s","action":"a","ts":"2026-11-22T12:00:00.999+02:00"}`, want: []model.AuditEvent{{EventID: "e", Stream: "s", Action: "a", TS: nowMs + 999}}},
		{name: "ts future", body: `{"event_id":"e","stream":"s","action":"a","ts":"2026-11-22T10:05:01Z"}`, err: &wantErr{field: "ts", reason: "is 5m1s in the future; at most 5m0s allowed"}},
		{name: "ts before horizon", lim: func(l *Limits) { l.Oldest = testNow }, body: ev(""), err: &wantErr{field: "ts", reason: "older than the retention horizon"}},
		{name: "ts string bad", body: `{"event_id":"e","stream":"s","ts":"now"}`, err: &wantErr{field: "ts", reason: "must be RFC 3339 or integer epoch milliseconds"}},

		// texts.
		{name: "action missing", body: `{"event_id":"e","stream":"s","ts":1}`, err: &wantErr{field: "action", reason: "is required"}},
		{name: "action empty", body: `{"event_id":"e","stream":"s","ts":1,"action":""}`, err: &wantErr{field: "action", reason: "is required"}},
		{name: "action null", body: `{"event_id":"e","stream":"s","ts":1,"action":null}`, err: &wantErr{field: "action", reason: "is required"}},
		{name: "action number", body: `{"action":7}`, err: &wantErr{field: "action", reason: "must be a string, got number"}},
		{name: "texts unicode", body: ev(`,"actor":"Zoë \ud83d\ude00","resource":"a/b#c d","outcome":"\u00e9"`),
			want: []model.AuditEvent{minimal(func(e *model.AuditEvent) { e.Actor, e.Resource, e.Outcome = "Zoë 😀", "a/b#c d", "é" })}},
		{name: "lone surrogate", body: ev(`,"actor":"\ud800x"`), want: []model.AuditEvent{minimal(func(e *model.AuditEvent) { e.Actor = "\uFFFDx" })}},
		{name: "high surrogate then non-low", body: ev(`,"actor":"\ud83d\u0041"`), want: []model.AuditEvent{minimal(func(e *model.AuditEvent) { e.Actor = "\uFFFDA" })}},
		{name: "optional texts null", body: ev(`,"actor":null,"resource":null,"outcome":null`), want: []model.AuditEvent{minimal(nil)}},
		{name: "optional texts empty", body: ev(`,"actor":"","resource":"","outcome":""`), want: []model.AuditEvent{minimal(nil)}},
		{name: "text at max", lim: func(l *Limits) { l.MaxTextLength = 5 }, body: ev(`,"actor":"abcde"`), want: []model.AuditEvent{minimal(func(e *model.AuditEvent) { e.Actor = "abcde" })}},
		{name: "text too long", lim: func(l *Limits) { l.MaxTextLength = 5 }, body: ev(`,"resource":"abcdef"`), err: &wantErr{field: "resource", reason: "is 6 bytes long; at most 5 allowed"}},
		{name: "text control escaped", body: ev(`,"actor":"a\nb"`), err: &wantErr{field: "actor", reason: "control character 0x0a at index 1"}},
		{name: "text nul", body: ev(`,"actor":"\u0000"`), err: &wantErr{field: "actor", reason: "control character 0x00 at index 0"}},
		{name: "text del", body: ev(`,"outcome":"\u007f"`), err: &wantErr{field: "outcome", reason: "control character 0x7f"}},
		{name: "text c1 control", body: ev(`,"outcome":"\u0085"`), err: &wantErr{field: "outcome", reason: "control character U+0085"}},
		{name: "text invalid utf-8", body: ev(`,"actor":"a` + "\xff" + `"`), err: &wantErr{field: "actor", reason: "invalid UTF-8 at index 1"}},
		{name: "text raw control", body: ev(`,"actor":"a` + "\x1f" + `"`), err: &wantErr{field: "actor", reason: "control character 0x1f in string"}},
		{name: "text bool", body: ev(`,"outcome":true`), err: &wantErr{field: "outcome", reason: "must be a string, got boolean"}},

		// attributes.
		{name: "attributes null", body: ev(`,"attributes":null`), want: []model.AuditEvent{minimal(nil)}},
		{name: "attributes empty", body: ev(`,"attributes":{ }`), want: []model.AuditEvent{minimal(func(e *model.AuditEvent) { e.Attributes = []byte("{}") })}},
		{name: "attributes nested", body: ev(`,"attributes":{"a":{"b":[{"c":-1.5e-3}, "x\"y", "caf` + "\u00e9" + `"]}}`),
			want: []model.AuditEvent{minimal(func(e *model.AuditEvent) { e.Attributes = []byte(`{"a":{"b":[{"c":-1.5e-3},"x\"y","café"]}}`) })}},
		{name: "attributes at max", lim: func(l *Limits) { l.MaxAttributesBytes = 9 }, body: ev(`,"attributes":{"a": 1 }`),
			want: []model.AuditEvent{minimal(func(e *model.AuditEvent) { e.Attributes = []byte(`{"a":1}`) })}},
		{name: "attributes too long", lim: func(l *Limits) { l.MaxAttributesBytes = 8 }, body: ev(`,"attributes":{"a": 1 }`), err: &wantErr{field: "attributes", reason: "is longer than 8 bytes"}},
		{name: "attributes too long string", lim: func(l *Limits) { l.MaxAttributesBytes = 8 }, body: ev(`,"attributes":{"a":"0123456789"}`), err: &wantErr{field: "attributes", reason: "is longer than 8 bytes"}},
		{name: "attributes array", body: ev(`,"attributes":[1]`), err: &wantErr{field: "attributes", reason: "must be a JSON object, got array"}},
		{name: "attributes string", body: ev(`,"attributes":"{}"`), err: &wantErr{field: "attributes", reason: "must be a JSON object, got string"}},
		{name: "attributes malformed", body: ev(`,"attributes":{"a":[1,]}`), err: &wantErr{field: "attributes", reason: "invalid character ']', expected a value"}},
		{name: "attributes bad literal", body: ev(`,"attributes":{"a":tru}`), err: &wantErr{field: "attributes", reason: `expected "true"`}},
		{name: "attributes bad number", body: ev(`,"attributes":{"a":01}`), err: &wantErr{field: "attributes", reason: "expected ',' or '}'"}},
		{name: "attributes bad key", body: ev(`,"attributes":{1:2}`), err: &wantErr{field: "attributes", reason: "expected a string key or '}'"}},
		{name: "attributes bad escape", body: ev(`,"attributes":{"a":"\x"}`), err: &wantErr{field: "attributes", reason: "invalid escape 'x' in string"}},
		{name: "attributes bad unicode escape", body: ev(`,"attributes":{"a":"\u00zz"}`), err: &wantErr{field: "attributes", reason: `invalid \u escape`}},
		{name: "attributes invalid utf-8", body: ev(`,"attributes":{"a":"` + "\xc3\x28" + `"}`), err: &wantErr{field: "attributes", reason: "is not valid UTF-8"}},
		{name: "attributes control", body: ev(`,"attributes":{"a":"` + "\t" + `"}`), err: &wantErr{field: "attributes", reason: "control character 0x09 in string"}},
		{name: "attributes too deep", lim: func(l *Limits) { l.MaxAttributesBytes = 1 << 20 }, body: ev(`,"attributes":{"a":` + strings.Repeat("[", 100) + strings.Repeat("]", 100) + `}`),
			err: &wantErr{field: "attributes", reason: "nested deeper than 64 levels"}},
		{name: "attributes unterminated", body: `{"event_id":"e1","attributes":{"a":[1` + "\n", ndjson: true, err: &wantErr{line: 1, field: "attributes", reason: "unexpected end of line"}},
		{name: "attributes duplicate", body: ev(`,"attributes":{},"attributes":{}`), err: &wantErr{field: "attributes", reason: "duplicate field"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			lim := DefaultLimits()
			if tt.lim != nil {
				tt.lim(&lim)
			}
			f := FormatJSON
			if tt.ndjson {
				f = FormatNDJSON
			}
			got, err := Audit([]byte(tt.body), f, testNow, lim)
			checkErr(t, err, tt.err)
			if tt.err != nil {
				if got != nil {
					t.Errorf("got %v with an error", got)
				}
				return
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("events (-want +got):\n%s", diff)
			}
			checkAudit(t, got, testNow, lim)
		})
	}
}

func TestAuditDoesNotAliasBody(t *testing.T) {
	body := []byte(ev(`,"actor":"someone-unique","attributes":{"k":"v"}`))
	got, err := Audit(body, FormatJSON, testNow, DefaultLimits())
	if err != nil {
		t.Fatal(err)
	}
	for i := range body {
		body[i] = 'X'
	}
	want := minimal2("someone-unique", `{"k":"v"}`)
	if diff := cmp.Diff([]model.AuditEvent{want}, got); diff != "" {
		t.Fatalf("result changed with the body (-want +got):\n%s", diff)
	}
}

func minimal2(actor, attrs string) model.AuditEvent {
	return model.AuditEvent{EventID: "e1", Stream: "s", TS: 1, Action: "login", Actor: actor, Attributes: []byte(attrs)}
}

func TestAuditMaxIDLength(t *testing.T) {
	id := strings.Repeat("x", 128)
	body := fmt.Sprintf(`{"event_id":%q,"stream":%q,"ts":1,"action":"a"}`, id, id)
	got, err := Audit([]byte(body), FormatJSON, testNow, DefaultLimits())
	if err != nil {
		t.Fatal(err)
	}
	if got[0].EventID != id || got[0].Stream != id {
		t.Fatalf("got %+v", got[0])
	}
	_ = time.Second
}
