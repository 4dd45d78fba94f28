package decode

import (
	"bytes"
	"encoding/json"
	"errors"
	"math"
	"math/big"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/google/go-cmp/cmp"

	"github.com/sluicehq/sluice/internal/model"
)

// fuzzLimits are small enough for the fuzzer to reach every limit.
func fuzzLimits(horizon bool) Limits {
	lim := Limits{
		MaxRows:            8,
		MaxMetrics:         6,
		MaxIDLength:        16,
		MaxTextLength:      24,
		MaxStringValue:     12,
		MaxAttributesBytes: 96,
		MaxFuture:          5 * time.Minute,
	}
	if horizon {
		lim.Oldest = testNow.Add(-24 * time.Hour)
	}
	return lim
}

func fuzzFormat(ndjson bool) Format {
	if ndjson {
		return FormatNDJSON
	}
	return FormatJSON
}

// checkDecodeError asserts the documented error types and their fields.
func checkDecodeError(t *testing.T, err error, f Format, lim Limits) {
	t.Helper()
	var tm *TooManyRowsError
	if errors.As(err, &tm) {
		if tm.Max != lim.MaxRows {
			t.Fatalf("TooManyRowsError.Max %d, want %d", tm.Max, lim.MaxRows)
		}
		return
	}
	var fe *FieldError
	if !errors.As(err, &fe) {
		t.Fatalf("error %T %v is neither *FieldError nor *TooManyRowsError", err, err)
	}
	if fe.Row < 0 || fe.Row >= lim.MaxRows || fe.Reason == "" || fe.Line < 0 || (f == FormatJSON && fe.Line != 0) {
		t.Fatalf("bad FieldError %#v", *fe)
	}
	if !utf8.ValidString(fe.Field) {
		t.Fatalf("FieldError.Field %q is not valid UTF-8", fe.Field)
	}
}

// checkJSON asserts that a body the decoder accepted is valid JSON (each
// non-blank line of NDJSON) and valid UTF-8, as encoding/json sees it.
func checkJSON(t *testing.T, body []byte, f Format) {
	t.Helper()
	if !utf8.Valid(body) {
		t.Fatalf("accepted a body that is not valid UTF-8: %q", body)
	}
	if f == FormatJSON {
		if !json.Valid(body) {
			t.Fatalf("accepted invalid JSON: %q", body)
		}
		return
	}
	for line := range bytes.SplitSeq(body, []byte("\n")) {
		if len(bytes.TrimSpace(line)) > 0 && !json.Valid(line) {
			t.Fatalf("accepted an invalid JSON line: %q", line)
		}
	}
}

// checkTS asserts the documented timestamp bounds.
func checkTS(t *testing.T, ts int64, now time.Time, lim Limits) {
	t.Helper()
	if ts < 0 || ts > now.UnixMilli()+lim.MaxFuture.Milliseconds() || ts > maxEpochMillis {
		t.Fatalf("ts %d out of bounds", ts)
	}
	if !lim.Oldest.IsZero() && time.UnixMilli(ts).Before(lim.Oldest) {
		t.Fatalf("ts %d before the horizon %s", ts, lim.Oldest)
	}
}

// checkReadings asserts the invariants Readings documents for its result.
func checkReadings(t *testing.T, rs []model.Reading, now time.Time, lim Limits) {
	t.Helper()
	if len(rs) > lim.MaxRows {
		t.Fatalf("%d readings, more than %d", len(rs), lim.MaxRows)
	}
	for i, r := range rs {
		if reason := checkID([]byte(r.DeviceID), lim.MaxIDLength); reason != "" {
			t.Fatalf("reading %d: device id %q %s", i, r.DeviceID, reason)
		}
		checkTS(t, r.TS, now, lim)
		if len(r.Metrics) == 0 || len(r.Metrics) > lim.MaxMetrics || cap(r.Metrics) != len(r.Metrics) {
			t.Fatalf("reading %d: %d metrics (cap %d)", i, len(r.Metrics), cap(r.Metrics))
		}
		for j, m := range r.Metrics {
			if reason := checkID([]byte(m.Name), lim.MaxIDLength); reason != "" {
				t.Fatalf("reading %d: metric name %q %s", i, m.Name, reason)
			}
			if j > 0 && r.Metrics[j-1].Name >= m.Name {
				t.Fatalf("reading %d: metrics not sorted and unique: %v", i, r.Metrics)
			}
			switch m.Type {
			case model.TypeFloat:
				if math.IsNaN(m.Value) || math.IsInf(m.Value, 0) || m.Int != 0 || m.Str != "" {
					t.Fatalf("reading %d: metric %s is %#v", i, m.Name, m)
				}
			case model.TypeBool:
				if m.Value != 0 || (m.Int != 0 && m.Int != 1) || m.Str != "" {
					t.Fatalf("reading %d: metric %s is %#v", i, m.Name, m)
				}
			case model.TypeString:
				if m.Value != 0 || m.Int != 0 || len(m.Str) > lim.MaxStringValue || !utf8.ValidString(m.Str) {
					t.Fatalf("reading %d: metric %s is %#v", i, m.Name, m)
				}
			default:
				t.Fatalf("reading %d: metric %s has type %s, which JSON cannot give", i, m.Name, m.Type)
			}
		}
	}
}

// checkAudit asserts the invariants Audit documents for its result.
func checkAudit(t *testing.T, es []model.AuditEvent, now time.Time, lim Limits) {
	t.Helper()
	if len(es) > lim.MaxRows {
		t.Fatalf("%d events, more than %d", len(es), lim.MaxRows)
	}
	for i, e := range es {
		for _, id := range []string{e.EventID, e.Stream} {
			if reason := checkID([]byte(id), lim.MaxIDLength); reason != "" {
				t.Fatalf("event %d: id %q %s", i, id, reason)
			}
		}
		if e.Action == "" {
			t.Fatalf("event %d: empty action", i)
		}
		for _, s := range []string{e.Actor, e.Action, e.Resource, e.Outcome} {
			if reason := checkText([]byte(s), lim.MaxTextLength); reason != "" {
				t.Fatalf("event %d: text %q %s", i, s, reason)
			}
		}
		checkTS(t, e.TS, now, lim)
		if e.Attributes != nil {
			var c bytes.Buffer
			if err := json.Compact(&c, e.Attributes); err != nil || e.Attributes[0] != '{' || !bytes.Equal(c.Bytes(), e.Attributes) || !utf8.Valid(e.Attributes) {
				t.Fatalf("event %d: attributes %q are not a compact JSON object (%v)", i, e.Attributes, err)
			}
			if len(e.Attributes) > lim.MaxAttributesBytes {
				t.Fatalf("event %d: attributes of %d bytes", i, len(e.Attributes))
			}
		}
	}
}

func jsonString(b []byte, s string) []byte {
	q, _ := json.Marshal(s)
	return append(b, q...)
}

// encodeRows frames encoded rows as f.
func encodeRows(rows [][]byte, f Format) []byte {
	if f == FormatNDJSON {
		return append(bytes.Join(rows, []byte("\n")), '\n')
	}
	return append(append([]byte("["), bytes.Join(rows, []byte(","))...), ']')
}

func encodeReadings(rs []model.Reading, f Format) []byte {
	var rows [][]byte
	for _, r := range rs {
		b := jsonString([]byte(`{"device_id":`), r.DeviceID)
		b = append(b, `,"ts":`...)
		b = strconv.AppendInt(b, r.TS, 10)
		b = append(b, `,"metrics":{`...)
		for i, m := range r.Metrics {
			if i > 0 {
				b = append(b, ',')
			}
			b = jsonString(b, m.Name)
			b = append(b, ':')
			switch m.Type {
			case model.TypeBool:
				b = strconv.AppendBool(b, m.Bool())
			case model.TypeString:
				b = jsonString(b, m.Str)
			default:
				b = strconv.AppendFloat(b, m.Value, 'g', -1, 64)
			}
		}
		b = append(b, '}')
		if r.HasSeq {
			b = append(b, `,"seq":`...)
			b = strconv.AppendInt(b, r.Seq, 10)
		}
		rows = append(rows, append(b, '}'))
	}
	return encodeRows(rows, f)
}

func encodeAudit(es []model.AuditEvent, f Format) []byte {
	var rows [][]byte
	for _, e := range es {
		b := jsonString([]byte(`{"event_id":`), e.EventID)
		b = jsonString(append(b, `,"stream":`...), e.Stream)
		b = strconv.AppendInt(append(b, `,"ts":`...), e.TS, 10)
		b = jsonString(append(b, `,"action":`...), e.Action)
		for _, kv := range [][2]string{{"actor", e.Actor}, {"resource", e.Resource}, {"outcome", e.Outcome}} {
			if kv[1] != "" {
				b = jsonString(append(b, `,"`+kv[0]+`":`...), kv[1])
			}
		}
		if e.Attributes != nil {
			b = append(append(b, `,"attributes":`...), e.Attributes...)
		}
		rows = append(rows, append(b, '}'))
	}
	return encodeRows(rows, f)
}

func FuzzReadings(f *testing.F) {
	seeds := []string{
		`{"device_id":"pump-17","ts":"2026-11-22T10:00:00.250Z","metrics":{"temp_c":21.5,"rpm":1180},"seq":42}`,
		`[{"device_id":"a","ts":1795341600000,"metrics":{"b":1,"a":-2.5e3}},{"device_id":"b","ts":"2026-11-22T11:00:00+01:00","metrics":{"x":0}}]`,
		"{\"device_id\":\"a\",\"ts\":1,\"metrics\":{\"v\":1}}\n\n{\"device_id\":\"b\",\"ts\":\"2026-11-22T09:59:59.999999Z\",\"metrics\":{\"v\":-0}}\r\n",
		`{"ts":"2026-11-22T10:00:00Z","metrics":{"t\u0065mp":1e-7},"seq":null}`,
		`{"device_id":"a/b","ts":1,"metrics":{"v":1}}`,
		`{"device_id":"a","ts":1.5,"metrics":{"v":"x"}}`,
		`{"device_id":"a","ts":"2026-02-30T00:00:00Z","metrics":{"v":1,"v":2}}`,
		`{"device_id":"a","ts":1,"metrics":{"v":1e400},"extra":true}`,
		`[1, "x", null, [], {}]`,
		"[{\"device_id\":\"a\\u0000\"}, ",
		"\n\n  \n",
		`{"device_id":"a","ts":1,"metrics":{"v":1}} trailing`,
	}
	for _, s := range seeds {
		f.Add([]byte(s), false, "", false)
		f.Add([]byte(s), true, "", true)
		f.Add([]byte(s), true, "a", false)
	}
	f.Fuzz(func(t *testing.T, body []byte, ndjson bool, device string, horizon bool) {
		lim := fuzzLimits(horizon)
		format := fuzzFormat(ndjson)
		opt := Options{Device: device}
		rs, err := Readings(body, format, testNow, lim, opt)
		if err != nil {
			if rs != nil {
				t.Fatalf("readings %v with error %v", rs, err)
			}
			checkDecodeError(t, err, format, lim)
			return
		}
		checkReadings(t, rs, testNow, lim)
		checkJSON(t, body, format)
		cells := 0
		for _, r := range rs {
			cells += len(r.Metrics)
		}
		if bound := ReadingCellsBound(body, lim); cells > bound {
			t.Fatalf("%d cells decoded, over ReadingCellsBound %d", cells, bound)
		}
		for _, r := range rs {
			if device != "" && r.DeviceID != device {
				t.Fatalf("device %q, want %q from the topic", r.DeviceID, device)
			}
		}
		if len(rs) == 0 {
			return
		}
		again, err := Readings(encodeReadings(rs, format), format, testNow, lim, opt)
		if err != nil {
			t.Fatalf("decoding re-encoded readings: %v\n%s", err, encodeReadings(rs, format))
		}
		if diff := cmp.Diff(rs, again); diff != "" {
			t.Fatalf("round trip (-first +second):\n%s", diff)
		}
	})
}

func FuzzAudit(f *testing.F) {
	seeds := []string{
		`{"event_id":"01JD0000000000000000000001","stream":"billing-api","ts":"2026-11-22T10:00:00Z","actor":"user:42","action":"invoice.refund","resource":"invoice:981","outcome":"success","attributes":{"amount":12.5,"tags":["a","b"],"n":null}}`,
		`[{"event_id":"e1","stream":"s","ts":1795341600000,"action":"login"},{"event_id":"e2","stream":"s","ts":1,"action":"caf\u00e9 \ud83d\ude00","attributes":null}]`,
		"{\"event_id\":\"e1\",\"stream\":\"s\",\"ts\":1,\"action\":\"a\",\"attributes\":{ \"k\" : [ 1 , {\"x\":\"\\u0041\"} ] }}\n\n{\"event_id\":\"e2\",\"stream\":\"s\",\"ts\":2,\"action\":\"b\"}\n",
		`{"event_id":"e","stream":"s","ts":1,"action":"a\u0007"}`,
		`{"event_id":"e","stream":"s","ts":1,"action":""}`,
		`{"event_id":"e","stream":"s","ts":1,"action":"a","attributes":[1]}`,
		`{"event_id":"e","stream":"s","ts":1,"action":"a","attributes":{"a":"` + strings.Repeat("x", 100) + `"}}`,
		`{"event_id":"e","stream":"s/t","ts":1,"action":"a","who":1}`,
		"{\"event_id\":\"e\",\"stream\":\"s\",\"ts\":1,\"action\":\"\xff\"}",
		`{"event_id":"e","stream":"s","ts":1,"action":"a","attributes":{"a":[[[[[[[[]]]]]]]]}}`,
	}
	for _, s := range seeds {
		f.Add([]byte(s), false, false)
		f.Add([]byte(s), true, true)
	}
	f.Fuzz(func(t *testing.T, body []byte, ndjson bool, horizon bool) {
		lim := fuzzLimits(horizon)
		format := fuzzFormat(ndjson)
		es, err := Audit(body, format, testNow, lim)
		if err != nil {
			if es != nil {
				t.Fatalf("events %v with error %v", es, err)
			}
			checkDecodeError(t, err, format, lim)
			return
		}
		checkAudit(t, es, testNow, lim)
		checkJSON(t, body, format)
		if bound := AuditRowsBound(body, lim); len(es) > bound {
			t.Fatalf("%d events decoded, over AuditRowsBound %d", len(es), bound)
		}
		if len(es) == 0 {
			return
		}
		again, err := Audit(encodeAudit(es, format), format, testNow, lim)
		if err != nil {
			t.Fatalf("decoding re-encoded events: %v\n%s", err, encodeAudit(es, format))
		}
		if diff := cmp.Diff(es, again); diff != "" {
			t.Fatalf("round trip (-first +second):\n%s", diff)
		}
	})
}

// FuzzParseRFC3339 checks the hand-written parser against the time package:
// whatever it accepts, time.Parse accepts with the same instant.
func FuzzParseRFC3339(f *testing.F) {
	for _, s := range []string{"2026-11-22T10:00:00.250Z", "1999-12-31t23:59:59.999999-05:30", "2024-02-29T00:00:00+14:00", "2026-13-01T00:00:00Z"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		got, reason := parseRFC3339([]byte(s))
		if reason != "" {
			return
		}
		// The time package wants T and Z upper case.
		u := []byte(s)
		u[10] &^= 0x20
		if u[len(u)-1] == 'z' {
			u[len(u)-1] = 'Z'
		}
		tm, err := time.Parse(time.RFC3339Nano, string(u))
		if err != nil {
			t.Fatalf("accepted %q, time.Parse says %v", s, err)
		}
		if want := tm.Truncate(time.Millisecond).UnixMilli(); got != want {
			t.Fatalf("%q: got %d, want %d", s, got, want)
		}
	})
}

// FuzzNumbers checks the number conversions against the standard library:
// parseFloat against strconv.ParseFloat, exactInt against math/big.
func FuzzNumbers(f *testing.F) {
	for _, s := range []string{"0", "-0", "21.5", "1180", "1.7e12", "1e-3", "123456789012345.6", "9223372036854775807", "-9223372036854775808", "1e400", "0.1e1", "100e-2"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		d := &decoder{buf: []byte(s), end: len(s)}
		lit, err := d.number()
		if err != nil || d.pos != len(s) {
			return
		}
		want, werr := strconv.ParseFloat(s, 64)
		got, reason := parseFloat(lit)
		switch {
		case math.IsInf(want, 0):
			if reason == "" {
				t.Fatalf("parseFloat(%q) = %v, want out of range", s, got)
			}
		case reason != "" || got != want || math.Signbit(got) != math.Signbit(want):
			t.Fatalf("parseFloat(%q) = %v %q, strconv says %v %v", s, got, reason, want, werr)
		}
		if e := strings.IndexAny(s, "eE"); e >= 0 {
			if exp, err := strconv.Atoi(strings.TrimPrefix(s[e+1:], "+")); err != nil || exp > 400 || exp < -400 {
				return // too big for math/big to check quickly
			}
		}
		r, ok := new(big.Rat).SetString(s)
		if !ok {
			t.Fatalf("math/big cannot parse %q", s)
		}
		v, reason := exactInt(lit)
		if r.IsInt() && r.Num().IsInt64() {
			if reason != "" || v != r.Num().Int64() {
				t.Fatalf("exactInt(%q) = %d %q, want %s", s, v, reason, r.Num())
			}
			return
		}
		if reason == "" {
			t.Fatalf("exactInt(%q) = %d, want an error", s, v)
		}
		inRange := r.Cmp(new(big.Rat).SetInt64(math.MinInt64)) >= 0 && r.Cmp(new(big.Rat).SetInt64(math.MaxInt64)) <= 0
		switch reason {
		case errNotInteger:
			if r.IsInt() {
				t.Fatalf("exactInt(%q): %q, but it is an integer", s, reason)
			}
		case errInt64Range:
			if inRange {
				t.Fatalf("exactInt(%q): %q, but it is in range", s, reason)
			}
		default:
			t.Fatalf("exactInt(%q): unexpected reason %q", s, reason)
		}
	})
}
