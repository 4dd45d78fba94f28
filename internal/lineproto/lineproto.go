// Package lineproto turns InfluxDB line protocol into validated
// model.Reading values, under the same limits as the JSON decoder (package
// decode): ids, metrics per reading, rows per request, string values and
// timestamps.
//
// The mapping (docs/data-model.md has the long form):
//
//   - The device is the value of the first tag of Config.DeviceTags that
//     the line has (default: device, then host); a line with none takes
//     Options.Device (MQTT: the device of the topic), else
//     Config.DefaultDevice, else it is refused.
//   - Each field becomes one metric, named from the measurement, the field
//     key and every other tag (see name.go): no tag is dropped, and two tag
//     sets never share a name.
//   - Timestamps are read in the request's precision and stored as
//     milliseconds, rounded down; a line without one takes the receive time.
//   - Lines of one device and one millisecond make one reading. Of a metric
//     given twice in one reading, the later line's value is kept.
//
// Lines are parsed by github.com/influxdata/line-protocol/v2, the parser of
// InfluxDB's own Go code. The first problem found is returned as a
// *LineError naming the 1-based line, the tag or field and the reason, or as
// a *decode.TooManyRowsError when the body holds more readings than
// allowed; nothing of a body with an error is returned.
//
// The package is pure: it does no I/O and never reads the clock (the caller
// passes now). Every string it returns is a copy.
package lineproto

import (
	"bytes"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/sluicehq/sluice/internal/decode"
)

// Config is influx.* in the gateway configuration: how lines map to
// devices.
type Config struct {
	// DeviceTags are the tags that name the device, in order of preference:
	// the first one a line has is its device, and is not part of the metric
	// names; the others stay in them.
	DeviceTags []string `mapstructure:"device_tags"`
	// DefaultDevice is the device of a line that has none of DeviceTags
	// (over HTTP; over MQTT the topic's device comes first). Empty: such a
	// line is refused with 400.
	DefaultDevice string `mapstructure:"default_device"`
}

// DefaultConfig returns the defaults: device, then host; no default device.
func DefaultConfig() Config {
	return Config{DeviceTags: []string{"device", "host"}}
}

// Validate reports every bad setting, each by its config name. maxID is
// limits.max_id_length.
func (c Config) Validate(maxID int) error {
	var errs []error
	seen := map[string]bool{}
	for i, t := range c.DeviceTags {
		switch {
		case t == "":
			errs = append(errs, fmt.Errorf("influx.device_tags[%d]: must not be empty", i))
		case seen[t]:
			errs = append(errs, fmt.Errorf("influx.device_tags[%d]: %q is listed twice", i, t))
		}
		seen[t] = true
	}
	if c.DefaultDevice != "" {
		if reason := decode.CheckID([]byte(c.DefaultDevice), maxID); reason != "" {
			errs = append(errs, fmt.Errorf("influx.default_device: %q %s", c.DefaultDevice, reason))
		}
	}
	if len(c.DeviceTags) == 0 && c.DefaultDevice == "" {
		errs = append(errs, errors.New("influx.device_tags: empty, and influx.default_device is not set: no line could name its device"))
	}
	return errors.Join(errs...)
}

// Options carry what the transport knows about a request besides its body.
type Options struct {
	// Precision is the unit of the timestamps (ParsePrecision); zero means
	// nanoseconds.
	Precision time.Duration
	// Device, when set, is the device from the MQTT topic: a line without a
	// device tag takes it, and a line whose device tag differs is refused.
	Device string
}

// LineError is a problem with one line of a body (the HTTP layer maps it
// to 400).
type LineError struct {
	Line int // 1-based line of the body where the entry starts
	// Field names the part of the line: `tag "host"`, `field "temp"`,
	// "timestamp"; "" for the whole line.
	Field  string
	Reason string
	// DeviceMismatch is set when the line's device tag differs from the
	// device of the MQTT topic.
	DeviceMismatch bool
	// Syntax is set when the line is not valid line protocol.
	Syntax bool
}

func (e *LineError) Error() string {
	var b strings.Builder
	if e.Line > 0 {
		fmt.Fprintf(&b, "line %d", e.Line)
	} else {
		b.WriteString("body")
	}
	if e.Field != "" {
		b.WriteString(": ")
		b.WriteString(e.Field)
	}
	b.WriteString(": ")
	b.WriteString(e.Reason)
	return b.String()
}

// ParsePrecision maps the precision parameter of a write to the unit of
// its timestamps. v2 (POST /api/v2/write) accepts ns, us, ms and s; v1
// (POST /write) also n, u, m and h, as InfluxDB 1.x does. Empty means ns.
func ParsePrecision(s string, v1 bool) (time.Duration, error) {
	switch s {
	case "", "ns":
		return time.Nanosecond, nil
	case "us":
		return time.Microsecond, nil
	case "ms":
		return time.Millisecond, nil
	case "s":
		return time.Second, nil
	}
	if v1 {
		switch s {
		case "n":
			return time.Nanosecond, nil
		case "u", "µ", "µs":
			return time.Microsecond, nil
		case "m":
			return time.Minute, nil
		case "h":
			return time.Hour, nil
		}
		return 0, fmt.Errorf("precision %q is not supported (allowed: n, ns, u, us, ms, s, m, h)", s)
	}
	return 0, fmt.Errorf("precision %q is not supported (allowed: ns, us, ms, s)", s)
}

// CellsBound returns, without decoding, a number of metric cells that
// Readings cannot exceed on body, for taking room in a row budget before
// decoding: every field of a line holds an '=' (so do tags, and an escaped
// '=' or one inside a string counts too: the bound is loose, never low).
// The result is capped by lim.MaxRows × lim.MaxMetrics and is at least 1.
func CellsBound(body []byte, lim decode.Limits) int {
	n := int64(0)
	for _, c := range body {
		if c == '=' {
			n++
		}
	}
	most := int64(max(lim.MaxRows, 0)) * int64(max(lim.MaxMetrics, 0))
	return int(max(min(n, most), 1))
}

// sortTags sorts by key.
func sortTags(ts []tagRef, scratch []byte) {
	slices.SortFunc(ts, func(a, b tagRef) int {
		return bytes.Compare(a.key(scratch), b.key(scratch))
	})
}
