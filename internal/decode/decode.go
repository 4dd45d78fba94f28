// Package decode turns HTTP and MQTT request bodies into validated
// model.Reading and model.AuditEvent values.
//
// A body is either JSON (one object, or an array of objects) or NDJSON (one
// object per line). Every row is checked completely against Limits: ids,
// timestamps, metric values, text fields and unknown fields. The first problem
// found is returned as a *FieldError naming the row, the NDJSON line, the field
// and the reason, or as a *TooManyRowsError when the body holds more rows than
// allowed. Nothing of a body with an error is returned: a request is accepted
// whole or refused whole.
//
// The package is pure: it does no I/O, never reads the clock (the caller passes
// now), and never keeps or aliases the body: every string and byte slice it
// returns is a copy. Strings that repeat across rows and requests (device ids,
// metric names, streams, actions, outcomes) are interned in a bounded table
// that belongs to a pooled decoder, so steady-state decoding allocates little.
//
// The decoder is a hand-written single-pass scanner chosen by benchmark over
// encoding/json and github.com/valyala/fastjson (see decode_bench_test.go). It
// accepts exactly RFC 8259 JSON; the fuzz targets check that whatever it
// accepts encoding/json accepts too.
package decode

import (
	"bytes"
	"errors"
	"fmt"
	"mime"
	"strings"
	"sync"
	"time"

	"github.com/sluicehq/sluice/internal/model"
)

// Format is the framing of a request body.
type Format int

// The body formats.
const (
	// FormatJSON is a single JSON object or a JSON array of objects, told
	// apart by the first non-space byte.
	FormatJSON Format = iota + 1
	// FormatNDJSON is one JSON object per line. Blank lines are skipped and a
	// trailing newline is optional. A line may end in "\r\n".
	FormatNDJSON
)

// String returns "json" or "ndjson".
func (f Format) String() string {
	switch f {
	case FormatJSON:
		return "json"
	case FormatNDJSON:
		return "ndjson"
	default:
		return fmt.Sprintf("format(%d)", int(f))
	}
}

// allowedContentTypes is listed in errors; it is what FormatFromContentType
// accepts.
const allowedContentTypes = "application/json, text/plain, application/x-ndjson, application/ndjson, application/jsonl"

// FormatFromContentType maps a Content-Type header value to a Format. An empty
// value, application/json and text/plain mean FormatJSON; application/x-ndjson,
// application/ndjson and application/jsonl mean FormatNDJSON. A charset
// parameter, if any, must be utf-8 (or its subset us-ascii).
func FormatFromContentType(ct string) (Format, error) {
	if strings.TrimSpace(ct) == "" {
		return FormatJSON, nil
	}
	mt, params, err := mime.ParseMediaType(ct)
	if err != nil {
		return 0, fmt.Errorf("parse content type %q: %w", ct, err)
	}
	if cs, ok := params["charset"]; ok && !strings.EqualFold(cs, "utf-8") && !strings.EqualFold(cs, "utf8") && !strings.EqualFold(cs, "us-ascii") {
		return 0, fmt.Errorf("unsupported charset %q in content type %q (allowed: utf-8)", cs, ct)
	}
	switch mt {
	case "application/json", "text/plain":
		return FormatJSON, nil
	case "application/x-ndjson", "application/ndjson", "application/jsonl":
		return FormatNDJSON, nil
	}
	return 0, fmt.Errorf("unsupported content type %q (allowed: %s)", mt, allowedContentTypes)
}

// Limits bound what one request may hold. The zero value is not valid: start
// from DefaultLimits.
type Limits struct {
	MaxRows            int           // readings or events per request
	MaxMetrics         int           // metrics per reading
	MaxIDLength        int           // bytes of device_id, stream, event_id and metric names
	MaxTextLength      int           // bytes of actor, action, resource and outcome
	MaxStringValue     int           // bytes of a string metric value
	MaxAttributesBytes int           // raw bytes of an audit event's attributes object
	MaxFuture          time.Duration // how far after now a timestamp may be
	// Oldest, when set, refuses timestamps before it (older than the
	// retention horizon). The zero time means no lower bound but the epoch.
	Oldest time.Time
}

// DefaultLimits returns the limits Sluice uses unless configured otherwise.
func DefaultLimits() Limits {
	return Limits{
		MaxRows:            10000,
		MaxMetrics:         256,
		MaxIDLength:        128,
		MaxTextLength:      256,
		MaxStringValue:     256,
		MaxAttributesBytes: 8192,
		MaxFuture:          5 * time.Minute,
	}
}

// Validate reports every field that is out of range, each by its config name.
func (l Limits) Validate() error {
	var errs []error
	positive := func(name string, v int) {
		if v <= 0 {
			errs = append(errs, fmt.Errorf("limits.%s: must be > 0, got %d", name, v))
		}
	}
	positive("max_rows", l.MaxRows)
	positive("max_metrics", l.MaxMetrics)
	positive("max_id_length", l.MaxIDLength)
	positive("max_text_length", l.MaxTextLength)
	positive("max_string_value", l.MaxStringValue)
	positive("max_attributes_bytes", l.MaxAttributesBytes)
	if l.MaxFuture < 0 {
		errs = append(errs, fmt.Errorf("limits.max_future: must be >= 0, got %s", l.MaxFuture))
	}
	return errors.Join(errs...)
}

// Options carry what the transport knows about a request besides its body.
type Options struct {
	// Device, when set, is the device id taken from the MQTT topic. A reading
	// without device_id takes it; a reading whose device_id differs is
	// refused.
	Device string
}

// FieldError is a problem with one row of a request (the HTTP layer maps it
// to 400).
type FieldError struct {
	Row    int    // 0-based index of the row in the request
	Line   int    // 1-based NDJSON line; 0 when the body is not NDJSON
	Field  string // JSON field, e.g. "ts" or "metrics.temp_c"; "" for the whole row or body
	Reason string
}

func (e *FieldError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "row %d", e.Row)
	if e.Line > 0 {
		fmt.Fprintf(&b, " (line %d)", e.Line)
	}
	if e.Field != "" {
		fmt.Fprintf(&b, ": field %q", e.Field)
	}
	b.WriteString(": ")
	b.WriteString(e.Reason)
	return b.String()
}

// TooManyRowsError says a request holds more rows than Limits.MaxRows (the
// HTTP layer maps it to 413). Decoding stops at the first row past the limit.
type TooManyRowsError struct {
	Max int
}

func (e *TooManyRowsError) Error() string {
	return fmt.Sprintf("request has more than %d rows", e.Max)
}

// Readings decodes a body of readings. On success every reading has a valid
// device id, a timestamp within [max(0, lim.Oldest), now+lim.MaxFuture] in
// milliseconds, and 1..lim.MaxMetrics finite metrics sorted by name and
// unique. The Metrics slices of one call share a backing array; each is capped
// to its length, so appending to one copies it. An empty JSON array is valid
// and yields no readings.
//
// On failure the error is a *FieldError or a *TooManyRowsError, unless lim or
// f is invalid (a plain error).
func Readings(body []byte, f Format, now time.Time, lim Limits, opt Options) ([]model.Reading, error) {
	if err := checkArgs(f, lim); err != nil {
		return nil, fmt.Errorf("decode readings: %w", err)
	}
	d := getDecoder(body, now, lim)
	defer putDecoder(d)
	if opt.Device != "" {
		if reason := checkID([]byte(opt.Device), lim.MaxIDLength); reason != "" {
			return nil, &FieldError{Field: "device_id", Reason: fmt.Sprintf("device %q from the topic: %s", opt.Device, reason)}
		}
	}
	d.estimate = d.estimateRows(f, 2)
	out := make([]model.Reading, 0, d.estimate)
	err := d.frame(f, func() error {
		out = append(out, model.Reading{})
		return d.reading(&out[len(out)-1], opt.Device)
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// Audit decodes a body of audit events. On success every event has a valid
// event id and stream, a non-empty action, texts that are valid UTF-8 without
// control characters, a timestamp within the same bounds as Readings, and
// Attributes that are nil or a compact JSON object of its own memory.
//
// On failure the error is a *FieldError or a *TooManyRowsError, unless lim or
// f is invalid (a plain error).
func Audit(body []byte, f Format, now time.Time, lim Limits) ([]model.AuditEvent, error) {
	if err := checkArgs(f, lim); err != nil {
		return nil, fmt.Errorf("decode audit events: %w", err)
	}
	d := getDecoder(body, now, lim)
	defer putDecoder(d)
	out := make([]model.AuditEvent, 0, d.estimateRows(f, 1))
	err := d.frame(f, func() error {
		out = append(out, model.AuditEvent{})
		return d.audit(&out[len(out)-1])
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

func checkArgs(f Format, lim Limits) error {
	if f != FormatJSON && f != FormatNDJSON {
		return fmt.Errorf("unknown format %d", int(f))
	}
	return lim.Validate()
}

// maxEpochMillis is 9999-12-31T23:59:59.999Z, the last instant RFC 3339 can
// write.
const maxEpochMillis = 253402300799999

// decoders holds decoders between requests so that their scratch buffers and
// intern tables are reused. It is the package's only global.
var decoders = sync.Pool{New: func() any { return &decoder{ids: newInternTable(internSlots), text: newInternTable(textSlots)} }}

func getDecoder(body []byte, now time.Time, lim Limits) *decoder {
	d := decoders.Get().(*decoder)
	d.buf = body
	d.pos, d.end = 0, len(body)
	d.lim = lim
	d.bounds = lim.Bounds(now)
	d.row, d.line, d.rows = 0, 0, 0
	d.field, d.keyAt = "", -1
	d.arena, d.nMetrics = nil, 0
	d.recent, d.recentNext, d.lastDevice = [8]string{}, 0, ""
	return d
}

// maxPooledTmp bounds the scratch buffer a pooled decoder keeps.
const maxPooledTmp = 64 << 10

func putDecoder(d *decoder) {
	d.buf = nil
	d.arena = nil
	if cap(d.tmp) > maxPooledTmp {
		d.tmp = nil
	}
	decoders.Put(d)
}

// estimateRows guesses the number of rows with one SIMD pass: the lines of
// NDJSON, or the objects of JSON divided by objPerRow (readings hold a
// metrics object). Appending corrects a low guess; a high one is capped by
// the smallest possible row, so a hostile body cannot make the guess cost
// much more memory than the body.
func (d *decoder) estimateRows(f Format, objPerRow int) int {
	var n int
	if f == FormatNDJSON {
		n = bytes.Count(d.buf, []byte{'\n'}) + 1
	} else {
		n = bytes.Count(d.buf, []byte{'{'})/objPerRow + 1
	}
	return min(n, len(d.buf)/minRowBytes+1, d.lim.MaxRows)
}

// minRowBytes is about the size of the smallest valid row,
// {"ts":0,"metrics":{"a":0}} (a reading whose device is in the topic).
const minRowBytes = 24

// frame splits the body into rows and calls each with d.pos at the opening
// brace of a row object and d.end at the end of the JSON value's window (the
// body, or the NDJSON line). each must leave d.pos after the object.
func (d *decoder) frame(f Format, each func() error) error {
	if f == FormatNDJSON {
		return d.frameNDJSON(each)
	}
	return d.frameJSON(each)
}

func (d *decoder) frameJSON(each func() error) error {
	d.ws()
	if d.pos == d.end {
		return &FieldError{Reason: "body is empty"}
	}
	switch d.buf[d.pos] {
	case '{':
		if err := each(); err != nil {
			return err
		}
		d.rows = 1
		d.ws()
		if d.pos != d.end {
			return d.syntax(d.pos, "unexpected data after the JSON object")
		}
		return nil
	case '[':
		d.pos++
		d.ws()
		if d.peek() == ']' {
			d.pos++
		} else {
			for {
				if d.rows == d.lim.MaxRows {
					return &TooManyRowsError{Max: d.lim.MaxRows}
				}
				d.row = d.rows
				if err := d.rowStart(); err != nil {
					return err
				}
				if err := each(); err != nil {
					return err
				}
				d.rows++
				d.field = ""
				d.ws()
				c := d.peek()
				if c == ']' {
					d.pos++
					break
				}
				if c != ',' {
					return d.syntaxExpected("',' or ']' after an array element")
				}
				d.pos++
				d.ws()
			}
		}
		d.ws()
		if d.pos != d.end {
			return d.syntax(d.pos, "unexpected data after the JSON array")
		}
		return nil
	}
	if k := d.valueKind(); k != "" {
		return &FieldError{Reason: "body must be a JSON object or an array of objects, got " + k}
	}
	return d.syntaxExpected("a JSON object or array")
}

func (d *decoder) frameNDJSON(each func() error) error {
	start := 0
	for line := 1; start < len(d.buf); line++ {
		end := len(d.buf)
		if i := bytes.IndexByte(d.buf[start:], '\n'); i >= 0 {
			end = start + i
		}
		d.pos, d.end = start, end
		start = end + 1
		d.ws()
		if d.pos == d.end {
			continue
		}
		if d.rows == d.lim.MaxRows {
			return &TooManyRowsError{Max: d.lim.MaxRows}
		}
		d.row, d.line = d.rows, line
		if err := d.rowStart(); err != nil {
			return err
		}
		if err := each(); err != nil {
			return err
		}
		d.rows++
		d.field = ""
		d.ws()
		if d.pos != d.end {
			return d.syntax(d.pos, "unexpected data after the JSON object on this line")
		}
	}
	if d.rows == 0 {
		return &FieldError{Reason: "body is empty"}
	}
	return nil
}

// rowStart checks that the value at d.pos is an object.
func (d *decoder) rowStart() error {
	if d.pos < d.end && d.buf[d.pos] == '{' {
		return nil
	}
	if k := d.valueKind(); k != "" {
		return d.fail("", "must be a JSON object, got "+k)
	}
	return d.syntaxExpected("a JSON object")
}
