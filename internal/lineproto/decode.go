package lineproto

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/influxdata/line-protocol/v2/lineprotocol"

	"github.com/sluicehq/sluice/internal/decode"
	"github.com/sluicehq/sluice/internal/model"
	"github.com/sluicehq/sluice/internal/wire"
)

// Readings decodes a body of line protocol. On success every reading has a
// valid device id, a timestamp within [max(0, lim.Oldest), now+lim.MaxFuture]
// in milliseconds, and 1..lim.MaxMetrics metrics sorted by name and unique;
// there are at most lim.MaxRows readings. The Metrics slices of one call
// share a backing array; each is capped to its length.
//
// lines is the number of entries read (blank lines and comments aside).
//
// On failure the error is a *LineError or a *decode.TooManyRowsError,
// unless lim is invalid (a plain error).
func Readings(body []byte, now time.Time, cfg Config, lim decode.Limits, opt Options) (rs []model.Reading, lines int, err error) {
	if err := lim.Validate(); err != nil {
		return nil, 0, fmt.Errorf("decode line protocol: %w", err)
	}
	if opt.Device != "" {
		if reason := decode.CheckID([]byte(opt.Device), lim.MaxIDLength); reason != "" {
			return nil, 0, &LineError{Field: "device", Reason: fmt.Sprintf("device %s from the topic %s", show([]byte(opt.Device)), reason)}
		}
	}
	p := parsers.Get().(*parser)
	defer p.put()
	p.start(now, cfg, lim, opt)
	dec := lineprotocol.NewDecoderWithBytes(body)
	entry := 0
	for ; dec.Next(); entry++ {
		if err := p.line(dec, entry); err != nil {
			return nil, entry, locate(body, entry, err)
		}
	}
	if entry == 0 {
		return nil, 0, &LineError{Reason: "holds no lines", Syntax: true}
	}
	return p.finish(), entry, nil
}

// locate fills in the line of err: a syntax error carries its own, a
// problem found with entry (0-based) is on the line where it starts.
func locate(body []byte, entry int, err error) error {
	var de *lineprotocol.DecodeError
	if errors.As(err, &de) {
		// The parser's messages quote keys and the rest of a line whole:
		// cut them, as every message quoting the client's bytes is.
		return &LineError{Line: int(de.Line), Syntax: true,
			Reason: clip(fmt.Sprintf("malformed line protocol at column %d: %v", de.Column, de.Err), maxReason)}
	}
	var le *lineError
	if errors.As(err, &le) {
		e := le.LineError
		e.Line = entryLine(body, entry)
		return &e
	}
	return err
}

// lineError is a LineError before its line is known.
type lineError struct{ LineError }

func (e *lineError) Error() string { return e.LineError.Error() }

func fail(field, reason string) error {
	return &lineError{LineError{Field: field, Reason: reason}}
}

// parsers holds parsers between requests, for their buffers and intern
// table. It is the package's only global.
var parsers = sync.Pool{New: func() any {
	return &parser{names: make(map[string]string), index: make(map[readingKey]int32)}
}}

// maxNames bounds a pooled parser's intern table; maxPooledCells its cell
// buffers.
const (
	maxNames       = 1 << 14
	maxPooledCells = 1 << 16
)

// parser holds the state of one Readings call.
type parser struct {
	cfg    Config
	lim    decode.Limits
	opt    Options
	bounds decode.TimeBounds
	// maxDevTag is the length of the longest of cfg.DeviceTags.
	maxDevTag int

	// The line being read: its tags (offsets into tagBytes), its encoded
	// measurement and its encoded tags other than the device.
	tagBytes []byte
	tags     []tagRef
	prefix   []byte
	suffix   []byte
	name     []byte

	// names interns device ids and metric names across calls.
	names map[string]string
	// The previous line's encoded measurement and tags, and the field keys
	// and metric names of its fields in order: lines of one shape (most
	// of a body) reuse the names without building or hashing them.
	lastPrefix, lastSuffix []byte
	lastKeys               []byte
	lastKeyEnds            []int
	lastNames              []string
	sameShape              bool
	// cells are the metrics of the body in line order; grouped the same,
	// ordered by reading (finish).
	cells, grouped []cell
	readings       []model.Reading
	// counts are the cells of each reading so far, repeats included, so
	// that limits.max_metrics is enforced as cells are read: the cells a
	// call holds stay within max_rows × max_metrics.
	counts  []int32
	index   map[readingKey]int32
	last    readingKey
	lastIdx int32
}

type tagRef struct{ k0, k1, v1 int }

func (t tagRef) key(b []byte) []byte   { return b[t.k0:t.k1] }
func (t tagRef) value(b []byte) []byte { return b[t.k1:t.v1] }

type cell struct {
	m       model.Metric
	entry   int32
	reading int32
}

type readingKey struct {
	device string
	ts     int64
}

func (p *parser) start(now time.Time, cfg Config, lim decode.Limits, opt Options) {
	if opt.Precision <= 0 {
		opt.Precision = time.Nanosecond
	}
	p.cfg, p.lim, p.opt = cfg, lim, opt
	p.maxDevTag = 0
	for _, t := range cfg.DeviceTags {
		p.maxDevTag = max(p.maxDevTag, len(t))
	}
	p.bounds = lim.Bounds(now)
	p.cells, p.grouped, p.readings, p.counts = p.cells[:0], p.grouped[:0], nil, p.counts[:0]
	clear(p.index)
	p.lastIdx = -1
	p.lastPrefix, p.lastSuffix = p.lastPrefix[:0], p.lastSuffix[:0]
	p.lastKeys, p.lastKeyEnds, p.lastNames = p.lastKeys[:0], p.lastKeyEnds[:0], p.lastNames[:0]
	if len(p.names) >= maxNames {
		clear(p.names)
		clear(p.lastNames[:cap(p.lastNames)])
	}
}

func (p *parser) put() {
	if cap(p.cells) > maxPooledCells {
		p.cells, p.grouped = nil, nil
	}
	clear(p.cells[:cap(p.cells)])
	clear(p.grouped[:cap(p.grouped)])
	p.readings = nil
	if len(p.index) > maxPooledCells {
		p.index = make(map[readingKey]int32)
	}
	parsers.Put(p)
}

func (p *parser) intern(b []byte) string {
	if s, ok := p.names[string(b)]; ok {
		return s
	}
	s := string(b)
	if len(p.names) < maxNames {
		// Bounded, so that a body of many distinct names costs no more
		// than its strings.
		p.names[s] = s
	}
	return s
}

// line reads one entry of the body.
func (p *parser) line(dec *lineprotocol.Decoder, entry int) error {
	meas, err := dec.Measurement()
	if err != nil {
		return err
	}
	// A measurement or tags that make every metric name of the line too
	// long are refused before they are escaped (up to 3 bytes a byte) or
	// held as tags: a line's cost stays within limits.max_id_length.
	if n := segmentLen(meas, true) + 2; n > p.lim.MaxIDLength {
		return fail("", fmt.Sprintf("the measurement makes every metric name of the line at least %d bytes long; at most %d allowed (limits.max_id_length)",
			n, p.lim.MaxIDLength))
	}
	p.prefix = appendSegment(p.prefix[:0], meas, true)
	p.tagBytes, p.tags = p.tagBytes[:0], p.tags[:0]
	for {
		k, v, err := dec.NextTag()
		if err != nil {
			return err
		}
		if k == nil {
			break
		}
		// Every tag but the device's adds at least ':' key '.' value to
		// every name; the device's at most a device tag and an id.
		if len(p.tagBytes)+len(k)+len(v)+2*(len(p.tags)+1) > 2*p.lim.MaxIDLength+p.maxDevTag+4 {
			return fail("", fmt.Sprintf("its tags make every metric name of the line longer than %d bytes (limits.max_id_length): "+
				"tags other than the device tag are part of the name: send fewer or shorter tags", p.lim.MaxIDLength))
		}
		k0 := len(p.tagBytes)
		p.tagBytes = append(p.tagBytes, k...)
		k1 := len(p.tagBytes)
		p.tagBytes = append(p.tagBytes, v...)
		p.tags = append(p.tags, tagRef{k0, k1, len(p.tagBytes)})
	}
	if len(p.tags) > 1 {
		sortTags(p.tags, p.tagBytes)
		for i := 1; i < len(p.tags); i++ {
			if k := p.tags[i].key(p.tagBytes); bytes.Equal(k, p.tags[i-1].key(p.tagBytes)) {
				return fail("tag "+show(k), "appears twice on the line")
			}
		}
	}
	device, devTag, err := p.device()
	if err != nil {
		return err
	}
	p.suffix = p.suffix[:0]
	for i, t := range p.tags {
		if i == devTag {
			continue
		}
		p.suffix = append(p.suffix, ':')
		p.suffix = appendSegment(p.suffix, t.key(p.tagBytes), true)
		p.suffix = append(p.suffix, '.')
		p.suffix = appendSegment(p.suffix, t.value(p.tagBytes), false)
	}
	p.sameShape = bytes.Equal(p.prefix, p.lastPrefix) && bytes.Equal(p.suffix, p.lastSuffix)
	if !p.sameShape {
		p.lastPrefix = append(p.lastPrefix[:0], p.prefix...)
		p.lastSuffix = append(p.lastSuffix[:0], p.suffix...)
		p.lastKeys, p.lastKeyEnds, p.lastNames = p.lastKeys[:0], p.lastKeyEnds[:0], p.lastNames[:0]
	}
	first := len(p.cells)
	for j := 0; ; j++ {
		k, v, err := dec.NextField()
		if err != nil {
			return err
		}
		if k == nil {
			break
		}
		if j == p.lim.MaxMetrics {
			// Every field of a line goes to one reading: refuse the line
			// before it holds more cells than a reading may.
			return fail("", fmt.Sprintf("has more than %d fields, and a reading holds at most %d metrics (limits.max_metrics)",
				p.lim.MaxMetrics, p.lim.MaxMetrics))
		}
		m, err := p.metric(j, k, v)
		if err != nil {
			return err
		}
		p.cells = append(p.cells, cell{m: m, entry: int32(entry)})
	}
	tb, err := dec.TimeBytes()
	if err != nil {
		return err
	}
	ts, err := p.ts(tb)
	if err != nil {
		return err
	}
	r, err := p.reading(device, ts)
	if err != nil {
		return err
	}
	if p.counts[r] += int32(len(p.cells) - first); int(p.counts[r]) > p.lim.MaxMetrics {
		return fail("", p.tooManyMetrics(r))
	}
	for i := first; i < len(p.cells); i++ {
		p.cells[i].reading = r
	}
	return nil
}

// device returns the device of the line being read, and the index in
// p.tags of the tag that named it (-1 if none did).
func (p *parser) device() (string, int, error) {
	for _, dt := range p.cfg.DeviceTags {
		for i, t := range p.tags {
			if string(t.key(p.tagBytes)) != dt {
				continue
			}
			v := t.value(p.tagBytes)
			if reason := decode.CheckID(v, p.lim.MaxIDLength); reason != "" {
				return "", 0, fail(fmt.Sprintf("tag %q", dt), fmt.Sprintf("device id %s %s", show(v), reason))
			}
			if p.opt.Device != "" && string(v) != p.opt.Device {
				err := fail(fmt.Sprintf("tag %q", dt), fmt.Sprintf("device %s does not match %q from the topic", show(v), p.opt.Device))
				err.(*lineError).DeviceMismatch = true
				return "", 0, err
			}
			return p.intern(v), i, nil
		}
	}
	switch {
	case p.opt.Device != "":
		return p.opt.Device, -1, nil
	case p.cfg.DefaultDevice != "":
		return p.cfg.DefaultDevice, -1, nil
	}
	return "", -1, fail("", fmt.Sprintf("has no device tag (influx.device_tags: %s) and influx.default_device is not set",
		strings.Join(p.cfg.DeviceTags, ", ")))
}

// metric returns the metric of field k = v, the j-th field of the line
// being read.
func (p *parser) metric(j int, k []byte, v lineprotocol.Value) (model.Metric, error) {
	field := func() string { return "field " + show(k) }
	m := model.Metric{Name: p.lastName(j, k)}
	if m.Name == "" {
		n := len(p.prefix) + 1 + segmentLen(k, false) + len(p.suffix)
		if n > p.lim.MaxIDLength {
			return model.Metric{}, fail(field(), p.tooLong(k, n))
		}
		p.name = append(p.name[:0], p.prefix...)
		p.name = append(p.name, '.')
		p.name = appendSegment(p.name, k, false)
		p.name = append(p.name, p.suffix...)
		m.Name = p.intern(p.name)
		p.remember(j, k, m.Name)
	}
	switch v.Kind() {
	case lineprotocol.Float:
		m.Value = v.FloatV()
	case lineprotocol.Int:
		m.Type, m.Int = model.TypeInt, v.IntV()
	case lineprotocol.Uint:
		u := v.UintV()
		if u > math.MaxInt64 {
			return model.Metric{}, fail(field(), fmt.Sprintf("unsigned integer %du is above %d, the largest integer Sluice stores (int64)", u, int64(math.MaxInt64)))
		}
		m.Type, m.Int = model.TypeInt, int64(u)
	case lineprotocol.Bool:
		m.Type = model.TypeBool
		if v.BoolV() {
			m.Int = 1
		}
	case lineprotocol.String:
		b := v.BytesV()
		if reason := model.CheckStringValue(b, p.lim.MaxStringValue); reason != "" {
			return model.Metric{}, fail(field(), "string "+reason)
		}
		m.Type, m.Str = model.TypeString, string(b)
	default:
		return model.Metric{}, fail(field(), "has a value of unknown type")
	}
	return m, nil
}

// lastName returns the name of the j-th field of the previous line if
// this line has its shape and its j-th field key is k, else "".
func (p *parser) lastName(j int, k []byte) string {
	if !p.sameShape || j >= len(p.lastNames) {
		return ""
	}
	start := 0
	if j > 0 {
		start = p.lastKeyEnds[j-1]
	}
	if !bytes.Equal(p.lastKeys[start:p.lastKeyEnds[j]], k) {
		return ""
	}
	return p.lastNames[j]
}

// remember records name as that of the j-th field (key k) of the line's
// shape, forgetting the fields after it.
func (p *parser) remember(j int, k []byte, name string) {
	if j > len(p.lastNames) {
		return // an earlier field was not remembered: keep the prefix
	}
	start := 0
	if j > 0 {
		start = p.lastKeyEnds[j-1]
	}
	p.lastKeys = append(p.lastKeys[:start], k...)
	p.lastKeyEnds = append(p.lastKeyEnds[:j], len(p.lastKeys))
	p.lastNames = append(p.lastNames[:j], name)
}

// tooLong explains a metric name over the id limit.
func (p *parser) tooLong(k []byte, n int) string {
	var keys []string
	for i, t := range p.tags {
		if i == maxListedTags {
			keys = append(keys, fmt.Sprintf("and %d more", len(p.tags)-i))
			break
		}
		keys = append(keys, clip(string(t.key(p.tagBytes)), maxShown))
	}
	msg := "the metric name made of the measurement, the field key"
	if len(p.suffix) > 0 {
		msg += " and the tags"
	}
	msg = fmt.Sprintf("%s is %d bytes long; at most %d allowed (limits.max_id_length)", msg, n, p.lim.MaxIDLength)
	if len(p.suffix) > 0 {
		msg += fmt.Sprintf("; tags other than the device tag (%s) are part of the name: send fewer or shorter tags", strings.Join(keys, ", "))
	}
	return msg
}

// ts returns the timestamp of the line in milliseconds, checked against
// the limits: tb as written (nil: the receive time) in p.opt.Precision.
func (p *parser) ts(tb []byte) (int64, error) {
	if tb == nil {
		return p.checkTS(p.bounds.NowMillis())
	}
	v, ok := parseInt(tb)
	if !ok {
		return 0, fail("timestamp", fmt.Sprintf("%s is not an integer within int64", show(tb)))
	}
	var ms int64
	if unit := p.opt.Precision; unit < time.Millisecond {
		per := int64(time.Millisecond / unit)
		ms = v / per
		if v%per < 0 {
			ms-- // round down, not toward zero
		}
	} else {
		mult := int64(unit / time.Millisecond)
		if v > decode.MaxEpochMillis/mult {
			return 0, fail("timestamp", fmt.Sprintf("%s (precision %s) is after year 9999", tb, unit))
		}
		if v < 0 {
			return 0, fail("timestamp", fmt.Sprintf("%s (precision %s) is before 1970-01-01T00:00:00Z", tb, unit))
		}
		ms = v * mult
	}
	return p.checkTS(ms)
}

func (p *parser) checkTS(ms int64) (int64, error) {
	if reason := p.bounds.Check(ms); reason != "" {
		return 0, fail("timestamp", reason)
	}
	return ms, nil
}

// reading returns the index of the reading of device at ts, adding it if
// it is new.
func (p *parser) reading(device string, ts int64) (int32, error) {
	k := readingKey{device, ts}
	if p.lastIdx >= 0 && k == p.last {
		return p.lastIdx, nil
	}
	i, ok := p.index[k]
	if !ok {
		if len(p.readings) == p.lim.MaxRows {
			return 0, &decode.TooManyRowsError{Max: p.lim.MaxRows}
		}
		i = int32(len(p.readings))
		p.readings = append(p.readings, model.Reading{DeviceID: device, TS: ts})
		p.counts = append(p.counts, 0)
		p.index[k] = i
	}
	p.last, p.lastIdx = k, i
	return i, nil
}

// finish groups the cells by reading, sorts each reading's metrics by name
// and keeps the last line's value of a metric given twice. (line refused a
// reading with too many metrics, counting the repeats, as it was read.)
func (p *parser) finish() []model.Reading {
	// Where each reading's cells start: p.counts holds their numbers.
	starts := make([]int32, len(p.readings)+1)
	for i, n := range p.counts {
		starts[i+1] = starts[i] + n
	}
	// Readings are numbered as first seen, so when no reading's lines are
	// interleaved with another's (the usual body) the cells are grouped
	// already.
	grouped := p.cells
	for i := 1; i < len(p.cells); i++ {
		if p.cells[i].reading < p.cells[i-1].reading {
			p.grouped = slices.Grow(p.grouped[:0], len(p.cells))[:len(p.cells)]
			next := slices.Clone(starts[:len(starts)-1])
			for _, c := range p.cells {
				p.grouped[next[c.reading]] = c
				next[c.reading]++
			}
			grouped = p.grouped
			break
		}
	}
	metrics := make([]model.Metric, len(p.cells))
	for ri := range p.readings {
		cs := grouped[starts[ri]:starts[ri+1]]
		sortCells(cs)
		// A metric twice in a reading (the same field twice on a line, or
		// lines of one series at one millisecond): the later line wins, as
		// in InfluxDB and as a later reading of one timestamp does in JSON.
		ms := metrics[starts[ri]:starts[ri]]
		for i, c := range cs {
			if i+1 < len(cs) && cs[i+1].m.Name == c.m.Name {
				continue
			}
			ms = append(ms, c.m)
		}
		p.readings[ri].Metrics = ms[:len(ms):len(ms)]
	}
	return p.readings
}

// tooManyMetrics explains a reading over limits.max_metrics.
func (p *parser) tooManyMetrics(r int32) string {
	rd := p.readings[r]
	return fmt.Sprintf("the reading of device %q at %s has more than %d metrics (limits.max_metrics)", rd.DeviceID, wire.FormatTS(rd.TS), p.lim.MaxMetrics)
}

// sortCells sorts by metric name, then line: insertion sort for the usual
// handful.
func sortCells(cs []cell) {
	if len(cs) > 12 {
		slices.SortStableFunc(cs, func(a, b cell) int { return strings.Compare(a.m.Name, b.m.Name) })
		return
	}
	for i := 1; i < len(cs); i++ {
		for j := i; j > 0 && cs[j].m.Name < cs[j-1].m.Name; j-- {
			cs[j], cs[j-1] = cs[j-1], cs[j]
		}
	}
}

// parseInt parses an optional '-' and decimal digits within int64.
func parseInt(b []byte) (int64, bool) {
	neg := len(b) > 0 && b[0] == '-'
	if neg {
		b = b[1:]
	}
	if len(b) == 0 || len(b) > 19 {
		return 0, false
	}
	var u uint64
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, false
		}
		u = u*10 + uint64(c-'0')
	}
	switch {
	case neg && u <= 1<<63:
		return int64(-u), true
	case !neg && u <= math.MaxInt64:
		return int64(u), true
	}
	return 0, false
}

// Bounds of what an error message quotes of a body: the 400 answer, an
// MQTT dead letter's error and its log line stay short whatever the line.
const (
	maxShown      = 40  // bytes of a key or value
	maxListedTags = 8   // tag keys listed by tooLong
	maxReason     = 300 // bytes of a parser's message
)

// show quotes a value for an error message, cut to a readable length.
func show(b []byte) string {
	if len(b) > maxShown {
		return fmt.Sprintf("%q…", b[:maxShown])
	}
	return fmt.Sprintf("%q", b)
}

// clip cuts s to at most n bytes, on a rune boundary, marking the cut.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "…"
}
