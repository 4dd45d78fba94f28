package decode

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/sluicehq/sluice/internal/model"
)

var testNow = time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC)

// nowMs is testNow in epoch milliseconds.
const nowMs = 1795341600000

// wantErr describes an expected error: a *FieldError with these fields
// (Reason as a substring), or a *TooManyRowsError when tooMany is set.
type wantErr struct {
	row, line int
	field     string
	reason    string
	tooMany   int
}

func checkErr(t *testing.T, err error, want *wantErr) {
	t.Helper()
	if want == nil {
		if err != nil {
			t.Fatalf("unexpected error: %v", err)
		}
		return
	}
	if err == nil {
		t.Fatalf("no error, want %+v", *want)
	}
	if want.tooMany > 0 {
		var tm *TooManyRowsError
		if !errors.As(err, &tm) || tm.Max != want.tooMany {
			t.Fatalf("error %v, want TooManyRowsError{%d}", err, want.tooMany)
		}
		return
	}
	var fe *FieldError
	if !errors.As(err, &fe) {
		t.Fatalf("error %T %v, want *FieldError", err, err)
	}
	if fe.Row != want.row || fe.Line != want.line || fe.Field != want.field || !strings.Contains(fe.Reason, want.reason) {
		t.Fatalf("error %#v (%v)\nwant row %d line %d field %q reason containing %q", *fe, fe, want.row, want.line, want.field, want.reason)
	}
}

// rd builds a reading; metrics are given as name, value pairs, in the order
// the decoder must return them.
func rd(dev string, ts int64, metrics ...any) model.Reading {
	r := model.Reading{DeviceID: dev, TS: ts}
	for i := 0; i < len(metrics); i += 2 {
		r.Metrics = append(r.Metrics, model.Metric{Name: metrics[i].(string), Value: metrics[i+1].(float64)})
	}
	return r
}

func withSeq(r model.Reading, seq int64) model.Reading {
	r.Seq, r.HasSeq = seq, true
	return r
}

// row is a valid reading object with the given ts (a JSON value).
func row(dev, ts string) string {
	return fmt.Sprintf(`{"device_id":%q,"ts":%s,"metrics":{"v":1}}`, dev, ts)
}

func TestReadings(t *testing.T) {
	const ok = `{"device_id":"pump-17","ts":"2026-11-22T10:00:00.250Z","metrics":{"temp_c":21.5,"rpm":1180},"seq":42}`
	okReading := withSeq(rd("pump-17", nowMs+250, "rpm", 1180.0, "temp_c", 21.5), 42)
	v1 := func(dev string, ts int64) model.Reading { return rd(dev, ts, "v", 1.0) }
	tests := []struct {
		name   string
		body   string
		ndjson bool
		lim    func(*Limits)
		opt    Options
		want   []model.Reading
		err    *wantErr
	}{
		// Framing.
		{name: "single object", body: ok, want: []model.Reading{okReading}},
		{name: "single object with space", body: " \r\n\t" + ok + "\n ", want: []model.Reading{okReading}},
		{name: "array", body: "[" + ok + " , " + row("b", "1") + "]", want: []model.Reading{okReading, v1("b", 1)}},
		{name: "array with newlines", body: "[\n" + ok + ",\n" + row("b", "1") + "\n]\n", want: []model.Reading{okReading, v1("b", 1)}},
		{name: "empty array", body: " [ ] ", want: []model.Reading{}},
		{name: "ndjson", body: ok + "\n" + row("b", "1") + "\n", ndjson: true, want: []model.Reading{okReading, v1("b", 1)}},
		{name: "ndjson no trailing newline", body: ok + "\n" + row("b", "1"), ndjson: true, want: []model.Reading{okReading, v1("b", 1)}},
		{name: "ndjson blank lines and crlf", body: "\n  \r\n" + ok + "\r\n\t\n" + row("b", "1") + "  \r\n\n", ndjson: true, want: []model.Reading{okReading, v1("b", 1)}},
		{name: "repeated device and names", ndjson: true,
			body: `{"device_id":"p","ts":1,"metrics":{"temp":1,"rpm":2}}` + "\n" + `{"device_id":"p","ts":2,"metrics":{"rpm":3,"t\u0065mp":4}}` + "\n" +
				`{"device_id":"p\u0031","ts":3,"metrics":{"rpmx":5,"rp":6}}` + "\n" + `{"device_id":"p1","ts":4,"metrics":{"temp":7}}`,
			want: []model.Reading{rd("p", 1, "rpm", 2.0, "temp", 1.0), rd("p", 2, "rpm", 3.0, "temp", 4.0), rd("p1", 3, "rp", 6.0, "rpmx", 5.0), rd("p1", 4, "temp", 7.0)}},
		{name: "ndjson single line", body: ok, ndjson: true, want: []model.Reading{okReading}},
		{name: "empty body", body: "", err: &wantErr{reason: "body is empty"}},
		{name: "whitespace body", body: " \n\t\r ", err: &wantErr{reason: "body is empty"}},
		{name: "ndjson empty body", body: "", ndjson: true, err: &wantErr{reason: "body is empty"}},
		{name: "ndjson blank lines only", body: "\n \r\n\n", ndjson: true, err: &wantErr{reason: "body is empty"}},
		{name: "body string", body: `"x"`, err: &wantErr{reason: "body must be a JSON object or an array of objects, got string"}},
		{name: "body number", body: `12`, err: &wantErr{reason: "got number"}},
		{name: "body null", body: `null`, err: &wantErr{reason: "got null"}},
		{name: "body garbage", body: `xyz`, err: &wantErr{reason: "malformed JSON at offset 0: invalid character 'x'"}},
		{name: "array of non-object", body: "[" + ok + ", 3]", err: &wantErr{row: 1, reason: "must be a JSON object, got number"}},
		{name: "array of arrays", body: "[[]]", err: &wantErr{reason: "must be a JSON object, got array"}},
		{name: "array trailing comma", body: "[" + ok + ",]", err: &wantErr{row: 1, reason: "invalid character ']', expected a JSON object"}},
		{name: "array missing comma", body: "[" + ok + " " + ok + "]", err: &wantErr{row: 0, reason: "expected ',' or ']'"}},
		{name: "array unterminated", body: "[" + ok, err: &wantErr{row: 0, reason: "unexpected end of input"}},
		{name: "data after array", body: "[" + ok + "] x", err: &wantErr{row: 0, reason: fmt.Sprintf("offset %d: unexpected data after the JSON array", len(ok)+3)}},
		{name: "data after object", body: ok + " {}", err: &wantErr{reason: fmt.Sprintf("offset %d: unexpected data after the JSON object", len(ok)+1)}},
		{name: "two objects in json", body: ok + "\n" + ok, err: &wantErr{reason: "unexpected data after the JSON object"}},
		{name: "ndjson line numbers", body: "\n" + ok + "\n\n" + row("b", `"x"`) + "\n", ndjson: true, err: &wantErr{row: 1, line: 4, field: "ts", reason: "must be RFC 3339 or integer epoch milliseconds"}},
		{name: "ndjson array line", body: ok + "\n[" + ok + "]\n", ndjson: true, err: &wantErr{row: 1, line: 2, reason: "must be a JSON object, got array"}},
		{name: "ndjson data after object", body: ok + " 1\n", ndjson: true, err: &wantErr{line: 1, reason: "unexpected data after the JSON object on this line"}},
		{name: "ndjson object across lines", body: "{\"device_id\":\"a\",\n\"ts\":1,\"metrics\":{\"v\":1}}\n", ndjson: true, err: &wantErr{line: 1, reason: "offset 17: unexpected end of line, expected a string key"}},
		{name: "ndjson garbage line", body: ok + "\nnope\n", ndjson: true, err: &wantErr{row: 1, line: 2, reason: "invalid character 'n', expected a JSON object"}},
		{name: "ndjson bad char line", body: ok + "\n#x\n", ndjson: true, err: &wantErr{row: 1, line: 2, reason: "invalid character '#', expected a JSON object"}},

		// Malformed objects.
		{name: "unterminated object", body: `{"device_id":"a"`, err: &wantErr{reason: "unexpected end of input, expected ',' or '}'"}},
		{name: "missing colon", body: `{"device_id" "a"}`, err: &wantErr{field: "device_id", reason: "offset 13: invalid character '\"', expected ':'"}},
		{name: "missing comma", body: `{"device_id":"a" "ts":1}`, err: &wantErr{reason: "expected ',' or '}'"}},
		{name: "trailing comma", body: `{"device_id":"a",}`, err: &wantErr{reason: "invalid character '}', expected a string key"}},
		{name: "key not string", body: `{device_id:"a"}`, err: &wantErr{reason: "expected a string key or '}'"}},
		{name: "unterminated string", body: `{"device_id":"abc`, err: &wantErr{field: "device_id", reason: "unexpected end of input, expected closing '\"'"}},
		{name: "bad escape", body: `{"device_id":"a\qb"}`, err: &wantErr{field: "device_id", reason: `offset 15: invalid escape 'q' in string`}},
		{name: "bad unicode escape", body: `{"device_id":"a\u12"}`, err: &wantErr{field: "device_id", reason: `invalid \u escape`}},
		{name: "control char in string", body: "{\"device_id\":\"a\tb\"}", err: &wantErr{field: "device_id", reason: "control character 0x09 in string"}},
		{name: "control char in key", body: "{\"dev\x01\":1}", err: &wantErr{reason: "control character 0x01 in string"}},
		{name: "bad literal", body: `{"seq":nul}`, err: &wantErr{field: "seq", reason: `expected "null"`}},
		{name: "bad literal type", body: `{"ts":nul}`, err: &wantErr{field: "ts", reason: `invalid character 'n', expected a value`}},
		{name: "number leading zero", body: `{"ts":01}`, err: &wantErr{reason: "invalid character '1', expected ',' or '}'"}},
		{name: "number no digits after point", body: `{"ts":1.}`, err: &wantErr{field: "ts", reason: "expected a digit after the decimal point"}},
		{name: "number no exponent digits", body: `{"ts":1e+}`, err: &wantErr{field: "ts", reason: "expected a digit in the exponent"}},
		{name: "number lone minus", body: `{"ts":-}`, err: &wantErr{field: "ts", reason: "expected a digit"}},
		{name: "number plus", body: `{"ts":+1}`, err: &wantErr{field: "ts", reason: "expected a value"}},
		{name: "unknown field", body: `{"device_id":"a","temp":1}`, err: &wantErr{field: "temp", reason: "unknown field"}},
		{name: "unknown field with escapes", body: `{"\b\f\n\r\t\"\\\/\u00C9\uD83D\uDE00":1}`, err: &wantErr{field: "\b\f\n\r\t\"\\/É😀", reason: "unknown field"}},
		{name: "unknown field long", body: `{"` + strings.Repeat("k", 100) + `":1}`, err: &wantErr{field: strings.Repeat("k", 64), reason: "unknown field"}},
		{name: "unknown field escaped", body: `{"Device_id":"a"}`, err: &wantErr{field: "Device_id", reason: "unknown field"}},
		{name: "empty object", body: `{}`, err: &wantErr{field: "device_id", reason: "is required"}},
		{name: "duplicate field", body: `{"ts":1,"ts":2}`, err: &wantErr{field: "ts", reason: "duplicate field"}},
		{name: "duplicate field escaped", body: `{"device_id":"a","device\u005fid":"a"}`, err: &wantErr{field: "device_id", reason: "duplicate field"}},

		// device_id.
		{name: "device charset", body: row("Az09_.:-", "1"), want: []model.Reading{v1("Az09_.:-", 1)}},
		{name: "device escaped", body: `{"device_id":"d\u0065v","ts":1,"metrics":{"v":1}}`, want: []model.Reading{v1("dev", 1)}},
		{name: "device max length", body: row(strings.Repeat("a", 128), "1"), want: []model.Reading{v1(strings.Repeat("a", 128), 1)}},
		{name: "device missing", body: `{"ts":1,"metrics":{"v":1}}`, err: &wantErr{field: "device_id", reason: "is required"}},
		{name: "device empty", body: row("", "1"), err: &wantErr{field: "device_id", reason: "must not be empty"}},
		{name: "device too long", body: row(strings.Repeat("a", 129), "1"), err: &wantErr{field: "device_id", reason: "is 129 bytes long; at most 128 allowed"}},
		{name: "device too long escaped", body: `{"device_id":"` + strings.Repeat(`\u0061`, 129) + `"}`, err: &wantErr{field: "device_id", reason: "is 129 bytes long"}},
		{name: "device slash", body: row("a/b", "1"), err: &wantErr{field: "device_id", reason: "invalid character '/' at index 1 (allowed: [A-Za-z0-9_.:-])"}},
		{name: "device plus", body: row("a+", "1"), err: &wantErr{field: "device_id", reason: "invalid character '+'"}},
		{name: "device hash", body: row("#", "1"), err: &wantErr{field: "device_id", reason: "invalid character '#'"}},
		{name: "device space", body: row("a b", "1"), err: &wantErr{field: "device_id", reason: "invalid character ' '"}},
		{name: "device nul", body: `{"device_id":"a\u0000"}`, err: &wantErr{field: "device_id", reason: "invalid character 0x00 at index 1"}},
		{name: "device non-ascii", body: `{"device_id":"caf` + "\u00e9" + `"}`, err: &wantErr{field: "device_id", reason: "invalid character 0xc3"}},
		{name: "device number", body: `{"device_id":17}`, err: &wantErr{field: "device_id", reason: "must be a string, got number"}},
		{name: "device null", body: `{"device_id":null}`, err: &wantErr{field: "device_id", reason: "must be a string, got null"}},
		{name: "topic device fills in", body: `{"ts":1,"metrics":{"v":1}}`, opt: Options{Device: "pump-1"}, want: []model.Reading{v1("pump-1", 1)}},
		{name: "topic device matches", body: row("pump-1", "1"), opt: Options{Device: "pump-1"}, want: []model.Reading{v1("pump-1", 1)}},
		{name: "topic device mismatch", body: row("pump-1", "1") + "\n" + row("pump-2", "1"), ndjson: true, opt: Options{Device: "pump-1"},
			err: &wantErr{row: 1, line: 2, field: "device_id", reason: `"pump-2" does not match "pump-1" from the topic`}},
		{name: "topic device invalid", body: `{"ts":1,"metrics":{"v":1}}`, opt: Options{Device: "a/b"}, err: &wantErr{field: "device_id", reason: `device "a/b" from the topic: invalid character '/'`}},

		// ts.
		{name: "ts utc", body: row("a", `"2026-11-22T09:59:59Z"`), want: []model.Reading{v1("a", nowMs-1000)}},
		{name: "ts lower case", body: row("a", `"2026-11-22t09:59:59z"`), want: []model.Reading{v1("a", nowMs-1000)}},
		{name: "ts offset east", body: row("a", `"2026-11-22T11:00:00+01:00"`), want: []model.Reading{v1("a", nowMs)}},
		{name: "ts offset west", body: row("a", `"2026-11-22T04:30:00.5-05:30"`), want: []model.Reading{v1("a", nowMs+500)}},
		{name: "ts offset across day", body: row("a", `"2026-11-21T23:00:00-11:00"`), want: []model.Reading{v1("a", nowMs)}},
		{name: "ts fraction 1 digit", body: row("a", `"2026-11-22T10:00:00.1Z"`), want: []model.Reading{v1("a", nowMs+100)}},
		{name: "ts fraction truncated", body: row("a", `"2026-11-22T10:00:00.123999999Z"`), want: []model.Reading{v1("a", nowMs+123)}},
		{name: "ts fraction many digits", body: row("a", `"2026-11-22T10:00:00.99999999999999999999Z"`), want: []model.Reading{v1("a", nowMs+999)}},
		{name: "ts leap day", body: row("a", `"2024-02-29T00:00:00Z"`), want: []model.Reading{v1("a", 1709164800000)}},
		{name: "ts epoch", body: row("a", `"1970-01-01T00:00:00Z"`), want: []model.Reading{v1("a", 0)}},
		{name: "ts escaped", body: row("a", `"1970-01-01T00:00:00\u005a"`), want: []model.Reading{v1("a", 0)}},
		{name: "ts epoch ms", body: row("a", "1795341600250"), want: []model.Reading{v1("a", nowMs+250)}},
		{name: "ts epoch ms zero", body: row("a", "0"), want: []model.Reading{v1("a", 0)}},
		{name: "ts epoch ms minus zero", body: row("a", "-0"), want: []model.Reading{v1("a", 0)}},
		{name: "ts epoch ms exponent", body: row("a", "1.7e12"), want: []model.Reading{v1("a", 1700000000000)}},
		{name: "ts epoch ms integral fraction", body: row("a", "1700000000000.000"), want: []model.Reading{v1("a", 1700000000000)}},
		{name: "ts at max future", body: row("a", "1795341900000"), want: []model.Reading{v1("a", nowMs+300000)}},
		{name: "ts past max future", body: row("a", "1795341900001"), err: &wantErr{field: "ts", reason: "is 5m0.001s in the future; at most 5m0s allowed"}},
		{name: "ts far future", body: row("a", `"9999-12-31T23:59:59.999Z"`), err: &wantErr{field: "ts", reason: "h in the future; at most 5m0s allowed"}},
		{name: "ts other max future", lim: func(l *Limits) { l.MaxFuture = time.Hour }, body: row("a", `"2026-11-22T10:59:00Z"`), want: []model.Reading{v1("a", nowMs+59*60000)}},
		{name: "ts at oldest", lim: func(l *Limits) { l.Oldest = testNow.Add(-time.Hour) }, body: row("a", `"2026-11-22T09:00:00Z"`), want: []model.Reading{v1("a", nowMs-3600000)}},
		{name: "ts before oldest", lim: func(l *Limits) { l.Oldest = testNow.Add(-time.Hour) }, body: row("a", `"2026-11-22T08:59:59.999Z"`),
			err: &wantErr{field: "ts", reason: "2026-11-22T08:59:59.999Z is older than the retention horizon 2026-11-22T09:00:00Z"}},
		{name: "ts before sub-ms oldest", lim: func(l *Limits) { l.Oldest = testNow.Add(-time.Hour + time.Microsecond) }, body: row("a", `"2026-11-22T09:00:00Z"`),
			err: &wantErr{field: "ts", reason: "older than the retention horizon"}},
		{name: "ts oldest before epoch", lim: func(l *Limits) { l.Oldest = time.Unix(-100, 0) }, body: row("a", "0"), want: []model.Reading{v1("a", 0)}},
		{name: "ts missing", body: `{"device_id":"a","metrics":{"v":1}}`, err: &wantErr{field: "ts", reason: "is required"}},
		{name: "ts bool", body: row("a", "true"), err: &wantErr{field: "ts", reason: "must be RFC 3339 or integer epoch milliseconds, got boolean"}},
		{name: "ts null", body: row("a", "null"), err: &wantErr{field: "ts", reason: "got null"}},
		{name: "ts object", body: row("a", "{}"), err: &wantErr{field: "ts", reason: "got object"}},
		{name: "ts words", body: row("a", `"yesterday"`), err: &wantErr{field: "ts", reason: `must be RFC 3339 or integer epoch milliseconds: "yesterday" is too short`}},
		{name: "ts date only", body: row("a", `"2026-11-22"`), err: &wantErr{field: "ts", reason: "is too short"}},
		{name: "ts space separator", body: row("a", `"2026-11-22 10:00:00Z"`), err: &wantErr{field: "ts", reason: "is not in the form"}},
		{name: "ts non-digit", body: row("a", `"2026-1x-22T10:00:00Z"`), err: &wantErr{field: "ts", reason: "is not in the form"}},
		{name: "ts month 13", body: row("a", `"2026-13-01T00:00:00Z"`), err: &wantErr{field: "ts", reason: "has month out of range"}},
		{name: "ts month 0", body: row("a", `"2026-00-01T00:00:00Z"`), err: &wantErr{field: "ts", reason: "has month out of range"}},
		{name: "ts april 31", body: row("a", `"2026-04-31T00:00:00Z"`), err: &wantErr{field: "ts", reason: "has day out of range"}},
		{name: "ts feb 29 non-leap", body: row("a", `"2025-02-29T00:00:00Z"`), err: &wantErr{field: "ts", reason: "has day out of range"}},
		{name: "ts feb 29 1900", body: row("a", `"1900-02-29T00:00:00Z"`), err: &wantErr{field: "ts", reason: "has day out of range"}},
		{name: "ts day 0", body: row("a", `"2026-01-00T00:00:00Z"`), err: &wantErr{field: "ts", reason: "has day out of range"}},
		{name: "ts hour 24", body: row("a", `"2026-01-01T24:00:00Z"`), err: &wantErr{field: "ts", reason: "has hour out of range"}},
		{name: "ts minute 60", body: row("a", `"2026-01-01T00:60:00Z"`), err: &wantErr{field: "ts", reason: "has minute out of range"}},
		{name: "ts leap second", body: row("a", `"2026-01-01T23:59:60Z"`), err: &wantErr{field: "ts", reason: "has second out of range"}},
		{name: "ts no zone", body: row("a", `"2026-01-01T00:00:00"`), err: &wantErr{field: "ts", reason: "is too short"}},
		{name: "ts no zone with fraction", body: row("a", `"2026-01-01T00:00:00.123"`), err: &wantErr{field: "ts", reason: "has no time zone offset"}},
		{name: "ts bad zone", body: row("a", `"2026-01-01T00:00:00UTC"`), err: &wantErr{field: "ts", reason: "has no time zone offset"}},
		{name: "ts offset no colon", body: row("a", `"2026-01-01T00:00:00+0100"`), err: &wantErr{field: "ts", reason: "not in the form ±hh:mm"}},
		{name: "ts offset hour 24", body: row("a", `"2026-01-01T00:00:00+24:00"`), err: &wantErr{field: "ts", reason: "has time zone offset out of range"}},
		{name: "ts offset minute 60", body: row("a", `"2026-01-01T00:00:00+01:60"`), err: &wantErr{field: "ts", reason: "has time zone offset out of range"}},
		{name: "ts offset non-digit", body: row("a", `"2026-01-01T00:00:00+0a:00"`), err: &wantErr{field: "ts", reason: "not in the form ±hh:mm"}},
		{name: "ts empty fraction", body: row("a", `"2026-01-01T00:00:00.Z"`), err: &wantErr{field: "ts", reason: "has an empty fraction of a second"}},
		{name: "ts trailing", body: row("a", `"2026-01-01T00:00:00Zx"`), err: &wantErr{field: "ts", reason: "has trailing characters"}},
		{name: "ts before 1970", body: row("a", `"1969-12-31T23:59:59.999Z"`), err: &wantErr{field: "ts", reason: "1969-12-31T23:59:59.999Z is before 1970-01-01T00:00:00Z"}},
		{name: "ts before 1970 by offset", body: row("a", `"1970-01-01T00:30:00+01:00"`), err: &wantErr{field: "ts", reason: "is before 1970"}},
		{name: "ts year 0", body: row("a", `"0000-01-01T00:00:00Z"`), err: &wantErr{field: "ts", reason: "is before 1970"}},
		{name: "ts epoch fraction", body: row("a", "1.5"), err: &wantErr{field: "ts", reason: `must be RFC 3339 or integer epoch milliseconds, got "1.5"`}},
		{name: "ts epoch negative exponent", body: row("a", "1e-3"), err: &wantErr{field: "ts", reason: `got "1e-3"`}},
		{name: "ts epoch fractional exponent", body: row("a", "1.2345e3"), err: &wantErr{field: "ts", reason: `got "1.2345e3"`}},
		{name: "ts epoch negative", body: row("a", "-1"), err: &wantErr{field: "ts", reason: "epoch milliseconds must not be negative, got -1"}},
		{name: "ts epoch beyond 9999", body: row("a", "253402300800000"), err: &wantErr{field: "ts", reason: "epoch milliseconds 253402300800000 is after year 9999"}},
		{name: "ts epoch beyond int64", body: row("a", "1e30"), err: &wantErr{field: "ts", reason: "is after year 9999"}},
		{name: "ts epoch huge exponent", body: row("a", "1e999999999999999999999"), err: &wantErr{field: "ts", reason: "is after year 9999"}},
		{name: "ts epoch tiny exponent", body: row("a", "1e-999999999999999999999"), err: &wantErr{field: "ts", reason: "got"}},
		{name: "ts epoch zero exponent", body: row("a", "0e-999999999999999999999"), want: []model.Reading{v1("a", 0)}},

		// metrics.
		{name: "metrics sorted", body: `{"device_id":"a","ts":1,"metrics":{"z":1,"b":-2.5,"a":3e2,"a_":0,"A":1e-2}}`,
			want: []model.Reading{rd("a", 1, "A", 0.01, "a", 300.0, "a_", 0.0, "b", -2.5, "z", 1.0)}},
		{name: "metrics extremes", body: `{"device_id":"a","ts":1,"metrics":{"max":1.7976931348623157e308,"min":-1.7976931348623157e308,"tiny":5e-324,"under":1e-400,"digits":0.30000000000000004,"big":12345678901234567890}}`,
			want: []model.Reading{rd("a", 1, "big", 12345678901234567890.0, "digits", 0.30000000000000004, "max", 1.7976931348623157e308, "min", -1.7976931348623157e308, "tiny", 5e-324, "under", 0.0)}},
		{name: "metric name escaped", body: `{"device_id":"a","ts":1,"metrics":{"t\u0065mp":1}}`, want: []model.Reading{rd("a", 1, "temp", 1.0)}},
		{name: "metrics at max", lim: func(l *Limits) { l.MaxMetrics = 2 }, body: `{"device_id":"a","ts":1,"metrics":{"x":1,"y":2}}`, want: []model.Reading{rd("a", 1, "x", 1.0, "y", 2.0)}},
		{name: "metrics many", body: manyMetrics(40), want: []model.Reading{manyMetricsWant(40)}},
		{name: "metrics missing", body: `{"device_id":"a","ts":1}`, err: &wantErr{field: "metrics", reason: "is required"}},
		{name: "metrics array", body: `{"device_id":"a","ts":1,"metrics":[1]}`, err: &wantErr{field: "metrics", reason: "must be a JSON object, got array"}},
		{name: "metrics null", body: `{"device_id":"a","ts":1,"metrics":null}`, err: &wantErr{field: "metrics", reason: "got null"}},
		{name: "metrics empty", body: `{"device_id":"a","ts":1,"metrics":{ }}`, err: &wantErr{field: "metrics", reason: "must hold at least one metric"}},
		{name: "metrics too many", lim: func(l *Limits) { l.MaxMetrics = 2 }, body: `{"device_id":"a","ts":1,"metrics":{"x":1,"y":2,"z":3}}`, err: &wantErr{field: "metrics", reason: "has more than 2 metrics"}},
		{name: "metric name empty", body: `{"device_id":"a","ts":1,"metrics":{"":1}}`, err: &wantErr{field: "metrics", reason: `metric name "" must not be empty`}},
		{name: "metric name slash", body: `{"device_id":"a","ts":1,"metrics":{"a/b":1}}`, err: &wantErr{field: "metrics", reason: `metric name "a/b" invalid character '/'`}},
		{name: "metric name too long", lim: func(l *Limits) { l.MaxIDLength = 3 }, body: `{"device_id":"a","ts":1,"metrics":{"abcd":1}}`, err: &wantErr{field: "metrics", reason: "is 4 bytes long; at most 3 allowed"}},
		{name: "metrics typed", body: `{"device_id":"door-3","ts":1,"metrics":{"temp_c":21.5,"open":true,"shut":false,"fw":"1.4.2","state":"idle","note":"caf\u00e9 \"q\" {x:1}","empty":""}}`,
			want: []model.Reading{{DeviceID: "door-3", TS: 1, Metrics: []model.Metric{
				model.StringMetric("empty", ""), model.StringMetric("fw", "1.4.2"), model.StringMetric("note", `café "q" {x:1}`),
				model.BoolMetric("open", true), model.BoolMetric("shut", false), model.StringMetric("state", "idle"), {Name: "temp_c", Value: 21.5}}}}},
		{name: "metric string a number is a string", body: `{"device_id":"a","ts":1,"metrics":{"temp_c":"21.5"}}`,
			want: []model.Reading{{DeviceID: "a", TS: 1, Metrics: []model.Metric{model.StringMetric("temp_c", "21.5")}}}},
		{name: "metric string at max", lim: func(l *Limits) { l.MaxStringValue = 3 }, body: `{"device_id":"a","ts":1,"metrics":{"s":"abc"}}`,
			want: []model.Reading{{DeviceID: "a", TS: 1, Metrics: []model.Metric{model.StringMetric("s", "abc")}}}},
		{name: "metric string too long", lim: func(l *Limits) { l.MaxStringValue = 3 }, body: `{"device_id":"a","ts":1,"metrics":{"s":"abcd"}}`,
			err: &wantErr{field: "metrics.s", reason: "string is 4 bytes long; at most 3 allowed"}},
		{name: "metric string invalid UTF-8", body: "{\"device_id\":\"a\",\"ts\":1,\"metrics\":{\"s\":\"\xff\"}}",
			err: &wantErr{field: "metrics.s", reason: "string is not valid UTF-8"}},
		{name: "metric bool misspelt", body: `{"device_id":"a","ts":1,"metrics":{"on":tru}}`, err: &wantErr{field: "metrics.on", reason: `expected "true"`}},
		{name: "metric null", body: `{"device_id":"a","ts":1,"metrics":{"x":null}}`, err: &wantErr{field: "metrics.x", reason: "must be a number, boolean or string, got null"}},
		{name: "metric object", body: `{"device_id":"a","ts":1,"metrics":{"x":{}}}`, err: &wantErr{field: "metrics.x", reason: "got object"}},
		{name: "metric overflow", body: `{"device_id":"a","ts":1,"metrics":{"x":1e309}}`, err: &wantErr{field: "metrics.x", reason: `"1e309" is out of float64 range`}},
		{name: "metric negative overflow", body: `{"device_id":"a","ts":1,"metrics":{"x":-2e308}}`, err: &wantErr{field: "metrics.x", reason: "is out of float64 range"}},
		{name: "metric NaN", body: `{"device_id":"a","ts":1,"metrics":{"x":NaN}}`, err: &wantErr{field: "metrics.x", reason: "malformed JSON"}},
		{name: "metric malformed number", body: `{"device_id":"a","ts":1,"metrics":{"x":1.}}`, err: &wantErr{field: "metrics.x", reason: "expected a digit after the decimal point"}},
		{name: "metric duplicate", body: `{"device_id":"a","ts":1,"metrics":{"x":1,"y":2,"x":3}}`, err: &wantErr{field: "metrics.x", reason: "duplicate metric"}},
		{name: "metric duplicate escaped", body: `{"device_id":"a","ts":1,"metrics":{"x":1,"\u0078":3}}`, err: &wantErr{field: "metrics.x", reason: "duplicate metric"}},
		{name: "metrics unterminated", body: `{"device_id":"a","ts":1,"metrics":{"x":1`, err: &wantErr{field: "metrics", reason: "unexpected end of input"}},

		// seq.
		{name: "seq", body: `{"device_id":"a","ts":1,"metrics":{"v":1},"seq":9223372036854775807}`, want: []model.Reading{withSeq(v1("a", 1), 9223372036854775807)}},
		{name: "seq min", body: `{"device_id":"a","ts":1,"metrics":{"v":1},"seq":-9223372036854775808}`, want: []model.Reading{withSeq(v1("a", 1), -9223372036854775808)}},
		{name: "seq zero", body: `{"seq":0,"device_id":"a","ts":1,"metrics":{"v":1}}`, want: []model.Reading{withSeq(v1("a", 1), 0)}},
		{name: "seq exponent", body: `{"device_id":"a","ts":1,"metrics":{"v":1},"seq":12e3}`, want: []model.Reading{withSeq(v1("a", 1), 12000)}},
		{name: "seq null", body: `{"device_id":"a","ts":1,"metrics":{"v":1},"seq":null}`, want: []model.Reading{v1("a", 1)}},
		{name: "seq fraction", body: `{"device_id":"a","ts":1,"metrics":{"v":1},"seq":1.5}`, err: &wantErr{field: "seq", reason: `"1.5" must be an integer`}},
		{name: "seq overflow", body: `{"device_id":"a","ts":1,"metrics":{"v":1},"seq":9223372036854775808}`, err: &wantErr{field: "seq", reason: "is out of int64 range"}},
		{name: "seq underflow", body: `{"device_id":"a","ts":1,"metrics":{"v":1},"seq":-9223372036854775809}`, err: &wantErr{field: "seq", reason: "is out of int64 range"}},
		{name: "seq many digits", body: `{"device_id":"a","ts":1,"metrics":{"v":1},"seq":1.0000000000000000000000001}`, err: &wantErr{field: "seq", reason: "must be an integer"}},
		{name: "seq string", body: `{"device_id":"a","ts":1,"metrics":{"v":1},"seq":"1"}`, err: &wantErr{field: "seq", reason: "must be an integer, got string"}},

		// Row limits.
		{name: "rows at max", lim: func(l *Limits) { l.MaxRows = 2 }, body: "[" + row("a", "1") + "," + row("b", "2") + "]", want: []model.Reading{v1("a", 1), v1("b", 2)}},
		{name: "rows over max array", lim: func(l *Limits) { l.MaxRows = 2 }, body: "[" + row("a", "1") + "," + row("b", "2") + "," + row("c", "3") + "]", err: &wantErr{tooMany: 2}},
		{name: "rows over max stops early", lim: func(l *Limits) { l.MaxRows = 1 }, body: "[" + row("a", "1") + ", not json at all", err: &wantErr{tooMany: 1}},
		{name: "rows over max ndjson", lim: func(l *Limits) { l.MaxRows = 2 }, body: row("a", "1") + "\n\n" + row("b", "2") + "\n" + row("c", "3") + "\n", ndjson: true, err: &wantErr{tooMany: 2}},
		{name: "rows at max ndjson blank tail", lim: func(l *Limits) { l.MaxRows = 1 }, body: row("a", "1") + "\n\n  \n", ndjson: true, want: []model.Reading{v1("a", 1)}},
		{name: "rows over max ndjson stops early", lim: func(l *Limits) { l.MaxRows = 1 }, body: row("a", "1") + "\ngarbage\n", ndjson: true, err: &wantErr{tooMany: 1}},
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
			got, err := Readings([]byte(tt.body), f, testNow, lim, tt.opt)
			checkErr(t, err, tt.err)
			if tt.err != nil {
				if got != nil {
					t.Errorf("got %v with an error", got)
				}
				return
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("readings (-want +got):\n%s", diff)
			}
			checkReadings(t, got, testNow, lim)
		})
	}
}

func manyMetrics(n int) string {
	var b strings.Builder
	b.WriteString(`{"device_id":"a","ts":1,"metrics":{`)
	for i := range n {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `"m%03d":%d`, n-i, i)
	}
	b.WriteString("}}")
	return b.String()
}

func manyMetricsWant(n int) model.Reading {
	r := model.Reading{DeviceID: "a", TS: 1}
	for i := n - 1; i >= 0; i-- {
		r.Metrics = append(r.Metrics, model.Metric{Name: fmt.Sprintf("m%03d", n-i), Value: float64(i)})
	}
	return r
}

func TestReadingsDoNotAliasBody(t *testing.T) {
	body := []byte(`{"device_id":"zz-unique-dev","ts":1,"metrics":{"zz_unique_metric":1}}`)
	got, err := Readings(body, FormatJSON, testNow, DefaultLimits(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	for i := range body {
		body[i] = 'X'
	}
	if got[0].DeviceID != "zz-unique-dev" || got[0].Metrics[0].Name != "zz_unique_metric" {
		t.Fatalf("result changed with the body: %+v", got[0])
	}
}

func TestReadingsMetricsCapped(t *testing.T) {
	body := []byte(row("a", "1") + "\n" + row("b", "2"))
	got, err := Readings(body, FormatNDJSON, testNow, DefaultLimits(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	_ = append(got[0].Metrics, model.Metric{Name: "x", Value: 9})
	if got[1].Metrics[0] != (model.Metric{Name: "v", Value: 1}) {
		t.Fatalf("appending to one reading's metrics changed the next: %+v", got[1].Metrics)
	}
}

func TestReadingsArenaChunks(t *testing.T) {
	// Rows with growing metric counts force new arena chunks.
	var b strings.Builder
	var want []model.Reading
	for i := range 300 {
		n := 1 + i%40
		fmt.Fprintf(&b, `{"device_id":"d%d","ts":%d,"metrics":{`, i, i)
		r := model.Reading{DeviceID: fmt.Sprintf("d%d", i), TS: int64(i)}
		for j := range n {
			if j > 0 {
				b.WriteByte(',')
			}
			fmt.Fprintf(&b, `"m%02d":%d`, j, i*100+j)
			r.Metrics = append(r.Metrics, model.Metric{Name: fmt.Sprintf("m%02d", j), Value: float64(i*100 + j)})
		}
		b.WriteString("}}\n")
		want = append(want, r)
	}
	for _, f := range []Format{FormatNDJSON, FormatJSON} {
		body := b.String()
		if f == FormatJSON {
			body = "[" + strings.ReplaceAll(strings.TrimSpace(body), "\n", ",") + "]"
		}
		got, err := Readings([]byte(body), f, testNow, DefaultLimits(), Options{})
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("%s readings (-want +got):\n%s", f, diff)
		}
	}
}

func TestConcurrentDecoders(t *testing.T) {
	body := []byte(strings.Repeat(row("a", "1")+"\n", 50))
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 50 {
				got, err := Readings(body, FormatNDJSON, testNow, DefaultLimits(), Options{})
				if err != nil || len(got) != 50 || got[49].DeviceID != "a" {
					t.Errorf("got %d readings, %v", len(got), err)
					return
				}
			}
		})
	}
	wg.Wait()
}

func TestInternTable(t *testing.T) {
	it := newInternTable(internSlots)
	a := it.get([]byte("pump-1"))
	b := it.get([]byte("pump-1"))
	if a != "pump-1" || b != "pump-1" {
		t.Fatalf("got %q, %q", a, b)
	}
	if it.get(nil) != "" {
		t.Fatal("empty key")
	}
	// Filling past half clears the table and keeps answering correctly.
	for i := range 3 * internSlots {
		k := fmt.Sprintf("k%d", i)
		if got := it.get([]byte(k)); got != k {
			t.Fatalf("got %q, want %q", got, k)
		}
	}
	if it.n > internSlots/2 {
		t.Fatalf("table holds %d strings, more than %d", it.n, internSlots/2)
	}
}

func TestFieldErrorString(t *testing.T) {
	tests := []struct {
		err  FieldError
		want string
	}{
		{FieldError{Row: 3, Line: 4, Field: "ts", Reason: "must be RFC 3339 or integer epoch milliseconds"}, `row 3 (line 4): field "ts": must be RFC 3339 or integer epoch milliseconds`},
		{FieldError{Row: 2, Field: "metrics.temp_c", Reason: "must be a number, got string"}, `row 2: field "metrics.temp_c": must be a number, got string`},
		{FieldError{Reason: "body is empty"}, `row 0: body is empty`},
		{FieldError{Row: 1, Line: 7, Reason: "must be a JSON object, got array"}, `row 1 (line 7): must be a JSON object, got array`},
	}
	for _, tt := range tests {
		if got := tt.err.Error(); got != tt.want {
			t.Errorf("got %s, want %s", got, tt.want)
		}
	}
	if got := (&TooManyRowsError{Max: 10}).Error(); got != "request has more than 10 rows" {
		t.Errorf("got %s", got)
	}
}

func TestFormatFromContentType(t *testing.T) {
	tests := []struct {
		ct   string
		want Format
		err  string
	}{
		{"", FormatJSON, ""},
		{"  ", FormatJSON, ""},
		{"application/json", FormatJSON, ""},
		{"Application/JSON; charset=UTF-8", FormatJSON, ""},
		{"text/plain", FormatJSON, ""},
		{"text/plain; charset=utf8", FormatJSON, ""},
		{"text/plain; charset=US-ASCII", FormatJSON, ""},
		{"application/x-ndjson", FormatNDJSON, ""},
		{"application/ndjson", FormatNDJSON, ""},
		{"application/jsonl; charset=utf-8", FormatNDJSON, ""},
		{"application/xml", 0, `unsupported content type "application/xml" (allowed: application/json, text/plain, application/x-ndjson, application/ndjson, application/jsonl)`},
		{"application/json; charset=latin1", 0, `unsupported charset "latin1"`},
		{"application/json;;", 0, `parse content type "application/json;;"`},
	}
	for _, tt := range tests {
		got, err := FormatFromContentType(tt.ct)
		if tt.err != "" {
			if err == nil || !strings.Contains(err.Error(), tt.err) {
				t.Errorf("%q: error %v, want %q", tt.ct, err, tt.err)
			}
			continue
		}
		if err != nil || got != tt.want {
			t.Errorf("%q: got %v, %v; want %v", tt.ct, got, err, tt.want)
		}
	}
	if FormatJSON.String() != "json" || FormatNDJSON.String() != "ndjson" || Format(9).String() != "format(9)" {
		t.Error("Format.String")
	}
}

func TestLimitsValidate(t *testing.T) {
	if err := DefaultLimits().Validate(); err != nil {
		t.Fatalf("defaults: %v", err)
	}
	tests := []struct {
		name string
		mod  func(*Limits)
		want []string
	}{
		{"max_rows", func(l *Limits) { l.MaxRows = 0 }, []string{"limits.max_rows: must be > 0, got 0"}},
		{"max_metrics", func(l *Limits) { l.MaxMetrics = -1 }, []string{"limits.max_metrics: must be > 0, got -1"}},
		{"max_id_length", func(l *Limits) { l.MaxIDLength = 0 }, []string{"limits.max_id_length: must be > 0"}},
		{"max_text_length", func(l *Limits) { l.MaxTextLength = 0 }, []string{"limits.max_text_length: must be > 0"}},
		{"max_attributes_bytes", func(l *Limits) { l.MaxAttributesBytes = 0 }, []string{"limits.max_attributes_bytes: must be > 0"}},
		{"max_future", func(l *Limits) { l.MaxFuture = -time.Second }, []string{"limits.max_future: must be >= 0, got -1s"}},
		{"zero value", func(l *Limits) { *l = Limits{} }, []string{"max_rows", "max_metrics", "max_id_length", "max_text_length", "max_attributes_bytes"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			lim := DefaultLimits()
			tt.mod(&lim)
			err := lim.Validate()
			if err == nil {
				t.Fatal("no error")
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
		})
	}
}

func TestBadArguments(t *testing.T) {
	if _, err := Readings([]byte(row("a", "1")), FormatJSON, testNow, Limits{}, Options{}); err == nil || !strings.Contains(err.Error(), "decode readings: limits.max_rows") {
		t.Errorf("readings with zero limits: %v", err)
	}
	if _, err := Readings([]byte(row("a", "1")), Format(0), testNow, DefaultLimits(), Options{}); err == nil || !strings.Contains(err.Error(), "unknown format 0") {
		t.Errorf("readings with format 0: %v", err)
	}
	if _, err := Audit([]byte(`{}`), FormatNDJSON, testNow, Limits{}); err == nil || !strings.Contains(err.Error(), "decode audit events: limits.") {
		t.Errorf("audit with zero limits: %v", err)
	}
}

func TestParseRFC3339AgreesWithTime(t *testing.T) {
	for _, s := range []string{
		"1970-01-01T00:00:00Z", "2000-02-29T23:59:59.999Z", "2026-11-22T10:00:00.250+05:45",
		"2026-03-01T00:00:00-00:01", "1999-12-31T23:59:59.123456789-12:00", "9999-12-31T23:59:59.9999Z",
		"2100-02-28T12:00:00+14:00", "1972-06-30T23:59:59Z", "2026-01-01T00:00:00.1+23:59",
	} {
		got, reason := parseRFC3339([]byte(s))
		if reason != "" {
			t.Errorf("%s: %s", s, reason)
			continue
		}
		tm, err := time.Parse(time.RFC3339Nano, s)
		if err != nil {
			t.Fatal(err)
		}
		if want := tm.Truncate(time.Millisecond).UnixMilli(); got != want {
			t.Errorf("%s: got %d, want %d", s, got, want)
		}
	}
}
