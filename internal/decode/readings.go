package decode

import (
	"fmt"
	"slices"
	"strings"

	"github.com/sluicehq/sluice/internal/model"
)

// Bits of the fields seen in a row, to refuse duplicates and find missing
// ones.
const (
	seenDevice = 1 << iota
	seenTS
	seenMetrics
	seenSeq
	seenEventID
	seenStream
	seenActor
	seenAction
	seenResource
	seenOutcome
	seenAttributes
)

// member starts reading the value of field: it refuses a field seen before in
// the row and sets d.field for syntax errors.
func (d *decoder) member(seen *uint16, bit uint16, field string) error {
	if *seen&bit != 0 {
		return d.fail(field, "duplicate field")
	}
	*seen |= bit
	d.field = field
	return nil
}

// unknownField refuses the key k of a row.
func (d *decoder) unknownField(k []byte) error {
	f := strings.ToValidUTF8(string(k[:min(len(k), 64)]), "\uFFFD")
	return d.fail(f, "unknown field")
}

// reading decodes the object at d.pos into r. device is the device id from
// the topic, or "".
func (d *decoder) reading(r *model.Reading, device string) error {
	var seen uint16
	empty, err := d.open()
	if err != nil {
		return err
	}
	for !empty {
		d.field = ""
		k, err := d.str()
		if err != nil {
			return err
		}
		switch string(k) {
		case "device_id":
			if err := d.member(&seen, seenDevice, "device_id"); err != nil {
				return err
			}
			if err := d.colon(); err != nil {
				return err
			}
			if d.peek() != '"' {
				return d.wrongType("device_id", "must be a string")
			}
			b, reason, err := d.id()
			if err != nil {
				return err
			}
			if reason != "" {
				return d.fail("device_id", reason)
			}
			if device != "" && string(b) != device {
				return d.fail("device_id", fmt.Sprintf("%q does not match %q from the topic", b, device))
			}
			r.DeviceID = d.intern.get(b)
		case "ts":
			if err := d.member(&seen, seenTS, "ts"); err != nil {
				return err
			}
			if err := d.colon(); err != nil {
				return err
			}
			if r.TS, err = d.ts(); err != nil {
				return err
			}
		case "metrics":
			if err := d.member(&seen, seenMetrics, "metrics"); err != nil {
				return err
			}
			if err := d.colon(); err != nil {
				return err
			}
			if r.Metrics, err = d.readMetrics(); err != nil {
				return err
			}
		case "seq":
			if err := d.member(&seen, seenSeq, "seq"); err != nil {
				return err
			}
			if err := d.colon(); err != nil {
				return err
			}
			if r.Seq, r.HasSeq, err = d.seq(); err != nil {
				return err
			}
		default:
			return d.unknownField(k)
		}
		d.field = ""
		if empty, err = d.next(); err != nil {
			return err
		}
	}
	d.field = ""
	switch {
	case seen&seenDevice == 0 && device == "":
		return d.fail("device_id", "is required")
	case seen&seenTS == 0:
		return d.fail("ts", "is required")
	case seen&seenMetrics == 0:
		return d.fail("metrics", "is required")
	}
	if seen&seenDevice == 0 {
		r.DeviceID = device
	}
	return nil
}

// seq reads an optional integer; null means absent.
func (d *decoder) seq() (int64, bool, error) {
	switch c := d.peek(); {
	case c == 'n':
		return 0, false, d.literal("null")
	case c == '-' || isDigit(c):
		lit, err := d.number()
		if err != nil {
			return 0, false, err
		}
		v, reason := exactInt(lit)
		if reason != "" {
			return 0, false, d.fail("seq", fmt.Sprintf("%s %s", show(lit), reason))
		}
		return v, true, nil
	}
	return 0, false, d.wrongType("seq", "must be an integer")
}

// readMetrics reads the metrics object at d.pos. The result is sorted by name,
// unique, and lives in the request's arena.
func (d *decoder) readMetrics() ([]model.Metric, error) {
	if d.peek() != '{' {
		return nil, d.wrongType("metrics", "must be a JSON object")
	}
	empty, err := d.open()
	if err != nil {
		return nil, err
	}
	if empty {
		return nil, d.fail("metrics", "must hold at least one metric")
	}
	ms := d.metrics[:0]
	for !empty {
		d.field = "metrics"
		k, reason, err := d.id()
		if err != nil {
			return nil, err
		}
		if reason != "" {
			return nil, d.fail("metrics", fmt.Sprintf("metric name %s %s", show(k), reason))
		}
		if len(ms) == d.lim.MaxMetrics {
			return nil, d.fail("metrics", fmt.Sprintf("has more than %d metrics", d.lim.MaxMetrics))
		}
		name := d.intern.get(k)
		d.sub = name
		if err := d.colon(); err != nil {
			return nil, err
		}
		if c := d.peek(); c != '-' && !isDigit(c) {
			return nil, d.wrongType("metrics."+name, "must be a number")
		}
		lit, err := d.number()
		if err != nil {
			return nil, err
		}
		v, reason := parseFloat(lit)
		if reason != "" {
			return nil, d.fail("metrics."+name, fmt.Sprintf("%s %s", show(lit), reason))
		}
		d.sub = ""
		ms = append(ms, model.Metric{Name: name, Value: v})
		if empty, err = d.next(); err != nil {
			return nil, err
		}
	}
	d.metrics = ms
	sortMetrics(ms)
	for i := 1; i < len(ms); i++ {
		if ms[i].Name == ms[i-1].Name {
			return nil, d.fail("metrics."+ms[i].Name, "duplicate metric")
		}
	}
	return d.keepMetrics(ms), nil
}

// sortMetrics sorts by name: insertion sort for the usual handful.
func sortMetrics(ms []model.Metric) {
	if len(ms) > 12 {
		slices.SortFunc(ms, func(a, b model.Metric) int { return strings.Compare(a.Name, b.Name) })
		return
	}
	for i := 1; i < len(ms); i++ {
		for j := i; j > 0 && nameLess(ms[j].Name, ms[j-1].Name); j-- {
			ms[j], ms[j-1] = ms[j-1], ms[j]
		}
	}
}

// nameLess compares non-empty names, deciding most by the first byte
// without a call.
func nameLess(a, b string) bool {
	if a[0] != b[0] {
		return a[0] < b[0]
	}
	return a < b
}

// keepMetrics copies ms into the request's arena and returns the copy,
// capped so that appending to it cannot overwrite its neighbour.
func (d *decoder) keepMetrics(ms []model.Metric) []model.Metric {
	if cap(d.arena)-len(d.arena) < len(ms) {
		// Start a new chunk sized by the metrics per row seen so far;
		// readings already decoded keep the old one.
		perRow := (d.nMetrics + len(ms) + d.rows) / (d.rows + 1)
		n := perRow * d.estimateLeft()
		// A metric takes at least 6 bytes ("a":0,).
		n = max(len(ms), min(n, (len(d.buf)-d.pos)/6), 64)
		d.arena = make([]model.Metric, 0, n)
	}
	d.nMetrics += len(ms)
	start := len(d.arena)
	d.arena = append(d.arena, ms...)
	return d.arena[start:len(d.arena):len(d.arena)]
}

// estimateLeft guesses how many rows are left, for sizing the arena.
func (d *decoder) estimateLeft() int {
	if d.rows == 0 {
		return d.estimate
	}
	// Rows so far per byte so far, times the bytes left.
	left := (len(d.buf) - d.pos) * d.rows / max(d.pos, 1)
	return min(left+1, d.lim.MaxRows-d.rows)
}
