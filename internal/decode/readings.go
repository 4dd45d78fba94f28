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
			// Rows of one device often come together.
			id, ok := d.lastDevice, d.matchString(d.lastDevice)
			if !ok {
				id, ok = d.internID()
			}
			if !ok {
				b, reason, err := d.id()
				if err != nil {
					return err
				}
				if reason != "" {
					return d.fail("device_id", reason)
				}
				id = d.ids.get(b)
			}
			if device != "" && id != device {
				return d.fail("device_id", fmt.Sprintf("%q does not match %q from the topic", id, device))
			}
			r.DeviceID = id
			d.lastDevice = id
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
// unique, and lives in the request's arena, where it is parsed in place.
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
	base := len(d.arena)
	for !empty {
		if len(d.arena)-base == d.lim.MaxMetrics {
			return nil, d.fail("metrics", fmt.Sprintf("has more than %d metrics", d.lim.MaxMetrics))
		}
		keyAt := d.pos
		name, ok := d.recentName()
		if !ok {
			name, ok = d.internID()
			if ok {
				d.recent[d.recentNext%uint8(len(d.recent))] = name
				d.recentNext++
			}
		}
		if !ok {
			k, reason, err := d.id()
			if err != nil {
				return nil, err
			}
			if reason != "" {
				return nil, d.fail("metrics", fmt.Sprintf("metric name %s %s", show(k), reason))
			}
			name = d.ids.get(k)
		}
		d.keyAt = keyAt
		if err := d.colon(); err != nil {
			return nil, err
		}
		m := model.Metric{Name: name}
		switch d.peek() {
		case 't', 'f', '"':
			if err := d.typedValue(&m); err != nil {
				return nil, err
			}
		default:
			v, err := d.float()
			if err != nil {
				return nil, err
			}
			m.Value = v
		}
		d.keyAt = -1
		if len(d.arena) == cap(d.arena) {
			base = d.growArena(base)
		}
		d.arena = append(d.arena, m)
		if empty, err = d.next(); err != nil {
			return nil, err
		}
	}
	ms := d.arena[base:len(d.arena):len(d.arena)]
	sortMetrics(ms)
	for i := 1; i < len(ms); i++ {
		if ms[i].Name == ms[i-1].Name {
			return nil, d.fail("metrics."+ms[i].Name, "duplicate metric")
		}
	}
	d.nMetrics += len(ms)
	return ms, nil
}

// typedValue reads a boolean or string metric value at d.pos into m.
func (d *decoder) typedValue(m *model.Metric) error {
	switch d.peek() {
	case 't':
		if err := d.literal("true"); err != nil {
			return err
		}
		m.Type, m.Int = model.TypeBool, 1
	case 'f':
		if err := d.literal("false"); err != nil {
			return err
		}
		m.Type = model.TypeBool
	default:
		s, err := d.str()
		if err != nil {
			return err
		}
		if reason := model.CheckStringValue(s, d.lim.MaxStringValue); reason != "" {
			return d.fail("metrics."+m.Name, "string "+reason)
		}
		m.Type, m.Str = model.TypeString, string(s)
	}
	return nil
}

// recentName returns the metric name at d.pos if it is one of the names
// recently seen in this request: most devices send the same metrics in
// every reading, so this saves hashing. A candidate is checked by where its
// closing quote would be before its bytes are compared.
func (d *decoder) recentName() (string, bool) {
	for _, s := range d.recent {
		if d.matchString(s) {
			return s, true
		}
	}
	return "", false
}

// matchString consumes the string at d.pos if it is s written without
// escapes. s must not be empty nor hold '"' or '\\'.
func (d *decoder) matchString(s string) bool {
	end := d.pos + 1 + len(s)
	if s != "" && end < d.end && d.buf[end] == '"' && string(d.buf[d.pos+1:end]) == s {
		d.pos = end + 1
		return true
	}
	return false
}

// float reads the metric value at d.pos. Plain decimals of at most 15
// significant digits are converted in the same pass that checks them (an
// exact integer divided by an exact power of ten is correctly rounded);
// anything else goes through number and parseFloat.
func (d *decoder) float() (float64, error) {
	i := d.pos
	neg := i < d.end && d.buf[i] == '-'
	if neg {
		i++
	}
	var mant uint64
	div := uint64(1)
	n0 := i
	if i < d.end && d.buf[i] == '0' {
		i++
	} else {
		for ; i < d.end && isDigit(d.buf[i]); i++ {
			mant = mant*10 + uint64(d.buf[i]-'0')
		}
	}
	nd := i - n0
	if nd > 0 && i < d.end && d.buf[i] == '.' {
		i++
		f0 := i
		for ; i < d.end && isDigit(d.buf[i]); i++ {
			mant = mant*10 + uint64(d.buf[i]-'0')
			div *= 10
		}
		if i == f0 {
			nd = 0 // "1." is malformed: let number report it
		}
		nd += i - f0
	}
	if nd > 0 && nd <= 15 && (i == d.end || d.buf[i]|0x20 != 'e') {
		d.pos = i
		f := float64(mant) / float64(div)
		if neg {
			f = -f
		}
		return f, nil
	}
	field := "metrics." + d.keyString(d.keyAt)
	if c := d.peek(); c != '-' && !isDigit(c) {
		return 0, d.wrongType(field, "must be a number, boolean or string")
	}
	lit, err := d.number()
	if err != nil {
		return 0, err
	}
	v, reason := parseFloat(lit)
	if reason != "" {
		return 0, d.fail(field, fmt.Sprintf("%s %s", show(lit), reason))
	}
	return v, nil
}

// growArena starts a new arena chunk, sized by the metrics per row seen so
// far, and moves the metrics of the row being read (from base) into it.
// Readings already decoded keep the old chunk. It returns the new base.
func (d *decoder) growArena(base int) int {
	partial := d.arena[base:]
	perRow := (d.nMetrics + len(partial) + 1 + d.rows) / (d.rows + 1)
	n := perRow * d.estimateLeft()
	// A metric takes at least 6 bytes ("a":0,).
	n = max(2*(len(partial)+1), min(n, (len(d.buf)-d.pos)/6), 64)
	arena := make([]model.Metric, 0, n)
	d.arena = append(arena, partial...)
	return 0
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

// estimateLeft guesses how many rows are left, for sizing the arena.
func (d *decoder) estimateLeft() int {
	if d.rows == 0 {
		return d.estimate
	}
	// Rows so far per byte so far, times the bytes left.
	left := (len(d.buf) - d.pos) * d.rows / max(d.pos, 1)
	return min(left+1, d.lim.MaxRows-d.rows)
}
