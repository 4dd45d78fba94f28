package rollup

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
)

// codecVersion is the first byte of an encoded row list; valueVersion the
// first byte of an encoded aggregate (EncodeValue), which leaves out the
// row's key, and pointVersion that of an aggregate of one float point.
// typedListVersion and typedValueVersion are those of a list and of an
// aggregate that hold typed (int, bool, string) aggregates after the float
// ones: they are written only when a row has typed values, so rows of
// floats keep the bytes they had before typed values existed (and a
// gateway of that time still reads them).
const (
	codecVersion      = 1
	valueVersion      = 2
	pointVersion      = 3
	typedListVersion  = 4
	typedValueVersion = 5
)

// ErrCorrupt is returned for bytes that do not decode.
var ErrCorrupt = errors.New("corrupt rollup rows")

// EncodeRows appends the binary form of rows to b: the durable outbox's
// record format (EncodeRow writes a list of one, the embedded rollup
// store's value).
func EncodeRows(b []byte, rows []Row) []byte {
	typed := AnyTyped(rows)
	b = append(b, listVersion(typed))
	b = binary.AppendUvarint(b, uint64(len(rows)))
	for i := range rows {
		b = appendRow(b, &rows[i], typed)
	}
	return b
}

// EncodeRow appends the binary form of a list of the one row r.
func EncodeRow(b []byte, r *Row) []byte {
	typed := r.HasTyped()
	return appendRow(append(b, listVersion(typed), 1), r, typed)
}

func listVersion(typed bool) byte {
	if typed {
		return typedListVersion
	}
	return codecVersion
}

func appendRow(b []byte, r *Row, typed bool) []byte {
	b = appendStr(b, r.Tenant)
	b = appendStr(b, r.Device)
	b = appendStr(b, r.Metric)
	b = binary.AppendVarint(b, r.Minute)
	b = binary.BigEndian.AppendUint16(b, r.Writer)
	b = binary.AppendUvarint(b, r.Part)
	b = appendAggregate(b, r)
	if typed {
		b = appendTyped(b, &r.Typed)
	}
	return b
}

// appendTyped appends the typed aggregates: per type its count, then, if
// it is not 0, that type's fields.
func appendTyped(b []byte, t *Typed) []byte {
	b = binary.AppendUvarint(b, t.IntCount)
	if t.IntCount > 0 {
		b = binary.AppendVarint(b, t.IntSum.Hi)
		b = binary.AppendUvarint(b, t.IntSum.Lo)
		for _, v := range [6]int64{t.IntMin, t.IntMax, t.IntFirstTS, t.IntFirst, t.IntLastTS, t.IntLast} {
			b = binary.AppendVarint(b, v)
		}
	}
	b = binary.AppendUvarint(b, t.BoolCount)
	if t.BoolCount > 0 {
		var flags byte
		if t.BoolFirst {
			flags |= 1
		}
		if t.BoolLast {
			flags |= 2
		}
		b = binary.AppendUvarint(b, t.TrueCount)
		b = binary.AppendVarint(b, t.BoolFirstTS)
		b = binary.AppendVarint(b, t.BoolLastTS)
		b = append(b, flags)
	}
	b = binary.AppendUvarint(b, t.StrCount)
	if t.StrCount > 0 {
		b = binary.AppendVarint(b, t.StrFirstTS)
		b = appendStr(b, t.StrFirst)
		b = binary.AppendVarint(b, t.StrLastTS)
		b = appendStr(b, t.StrLast)
	}
	return b
}

// appendAggregate appends what a row holds besides its key: the tail of a
// row in a list, and a stored value (EncodeValue).
func appendAggregate(b []byte, r *Row) []byte {
	b = binary.AppendUvarint(b, r.Count)
	for _, f := range [5]float64{r.Sum, r.Min, r.Max, r.FirstValue, r.LastValue} {
		b = binary.BigEndian.AppendUint64(b, math.Float64bits(f))
	}
	b = binary.AppendVarint(b, r.FirstTS)
	b = binary.AppendVarint(b, r.LastTS)
	return binary.AppendUvarint(b, r.Version)
}

func appendStr(b []byte, s string) []byte {
	return append(binary.AppendUvarint(b, uint64(len(s))), s...)
}

type decoder struct {
	b   []byte
	err error
}

func (d *decoder) fail(what string) {
	if d.err == nil {
		d.err = fmt.Errorf("%s: %w", what, ErrCorrupt)
	}
}

func (d *decoder) uvarint(what string) uint64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Uvarint(d.b)
	if n <= 0 {
		d.fail(what)
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *decoder) varint(what string) int64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Varint(d.b)
	if n <= 0 {
		d.fail(what)
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *decoder) str(what string) string {
	n := d.uvarint(what)
	if d.err != nil {
		return ""
	}
	if uint64(len(d.b)) < n {
		d.fail(what)
		return ""
	}
	s := string(d.b[:n])
	d.b = d.b[n:]
	return s
}

func (d *decoder) fixed(n int, what string) []byte {
	if d.err != nil {
		return make([]byte, n)
	}
	if len(d.b) < n {
		d.fail(what)
		return make([]byte, n)
	}
	v := d.b[:n]
	d.b = d.b[n:]
	return v
}

// skipStr steps over a string without copying it.
func (d *decoder) skipStr(what string) {
	n := d.uvarint(what)
	if d.err != nil {
		return
	}
	if uint64(len(d.b)) < n {
		d.fail(what)
		return
	}
	d.b = d.b[n:]
}

// typed decodes what appendTyped wrote.
func (d *decoder) typed(r *Row) {
	t := &r.Typed
	if t.IntCount = d.uvarint("int count"); t.IntCount > 0 {
		t.IntSum.Hi = d.varint("int sum")
		t.IntSum.Lo = d.uvarint("int sum")
		for _, v := range [6]*int64{&t.IntMin, &t.IntMax, &t.IntFirstTS, &t.IntFirst, &t.IntLastTS, &t.IntLast} {
			*v = d.varint("int")
		}
	}
	if t.BoolCount = d.uvarint("bool count"); t.BoolCount > 0 {
		t.TrueCount = d.uvarint("true count")
		t.BoolFirstTS, t.BoolLastTS = d.varint("bool first_ts"), d.varint("bool last_ts")
		flags := d.fixed(1, "bool flags")[0]
		t.BoolFirst, t.BoolLast = flags&1 != 0, flags&2 != 0
	}
	if t.StrCount = d.uvarint("string count"); t.StrCount > 0 {
		t.StrFirstTS, t.StrFirst = d.varint("string first_ts"), d.str("string first")
		t.StrLastTS, t.StrLast = d.varint("string last_ts"), d.str("string last")
	}
	if d.err == nil && t.typedCount() > r.Count {
		d.fail("typed counts")
	}
}

// row decodes one row into r; with keys false it steps over the three
// strings of the key instead of copying them.
func (d *decoder) row(r *Row, keys bool, typed bool) {
	if keys {
		r.Tenant, r.Device, r.Metric = d.str("tenant"), d.str("device"), d.str("metric")
	} else {
		d.skipStr("tenant")
		d.skipStr("device")
		d.skipStr("metric")
	}
	r.Minute = d.varint("minute")
	r.Writer = binary.BigEndian.Uint16(d.fixed(2, "writer"))
	r.Part = d.uvarint("part")
	d.aggregate(r)
	if typed {
		d.typed(r)
	}
}

// aggregate decodes what appendAggregate wrote.
func (d *decoder) aggregate(r *Row) {
	r.Count = d.uvarint("count")
	for _, f := range [5]*float64{&r.Sum, &r.Min, &r.Max, &r.FirstValue, &r.LastValue} {
		*f = math.Float64frombits(binary.BigEndian.Uint64(d.fixed(8, "value")))
	}
	r.FirstTS, r.LastTS = d.varint("first_ts"), d.varint("last_ts")
	r.Version = d.uvarint("version")
}

// DecodeRows is the inverse of EncodeRows.
func DecodeRows(b []byte) ([]Row, error) {
	if len(b) == 0 || b[0] != codecVersion && b[0] != typedListVersion {
		return nil, fmt.Errorf("version: %w", ErrCorrupt)
	}
	typed := b[0] == typedListVersion
	d := &decoder{b: b[1:]}
	n := d.uvarint("row count")
	if n > uint64(len(d.b)) { // every row takes more than one byte
		return nil, fmt.Errorf("row count %d: %w", n, ErrCorrupt)
	}
	rows := make([]Row, 0, n)
	for range n {
		var r Row
		d.row(&r, true, typed)
		if d.err != nil {
			return nil, d.err
		}
		rows = append(rows, r)
	}
	if len(d.b) != 0 {
		return nil, fmt.Errorf("%d trailing bytes: %w", len(d.b), ErrCorrupt)
	}
	return rows, nil
}

// DecodeRow decodes what EncodeRow wrote: a list of exactly one row.
func DecodeRow(b []byte) (Row, error) {
	var r Row
	err := decodeOne(b, &r, true)
	return r, err
}

// RowVersion returns the version of the one row that b (as EncodeRow or
// EncodeValue wrote it) holds, checking the whole encoding as DecodeRow or
// DecodeValue does but copying nothing: what a merge of stored rows needs.
func RowVersion(b []byte) (uint64, error) {
	var r Row
	var err error
	if IsValue(b) {
		err = DecodeValue(b, &r)
	} else {
		err = decodeOne(b, &r, false)
	}
	return r.Version, err
}

// EncodeValue appends the aggregate of r without its key (tenant, device,
// metric, minute, writer, part): the embedded rollup store's value, whose
// key holds those. It is about half the size of EncodeRow's form; the
// aggregate of one point (a device reporting less than once a minute: most
// windows of a large fleet) is stored as that point, a third of that.
func EncodeValue(b []byte, r *Row) []byte {
	if r.HasTyped() {
		return appendTyped(appendAggregate(append(b, typedValueVersion), r), &r.Typed)
	}
	if onePoint(r) {
		b = append(b, pointVersion)
		b = binary.BigEndian.AppendUint64(b, math.Float64bits(r.Sum))
		b = binary.AppendVarint(b, r.FirstTS)
		return binary.AppendUvarint(b, r.Version)
	}
	return appendAggregate(append(b, valueVersion), r)
}

// onePoint reports whether r is the aggregate of one point, bit for bit.
func onePoint(r *Row) bool {
	v := math.Float64bits(r.Sum)
	return r.Count == 1 && r.FirstTS == r.LastTS &&
		math.Float64bits(r.Min) == v && math.Float64bits(r.Max) == v &&
		math.Float64bits(r.FirstValue) == v && math.Float64bits(r.LastValue) == v
}

// IsValue reports whether b is in EncodeValue's form (else EncodeRow's).
func IsValue(b []byte) bool {
	return len(b) > 0 && (b[0] == valueVersion || b[0] == pointVersion || b[0] == typedValueVersion)
}

// DecodeValue decodes what EncodeValue wrote into r's aggregate fields,
// leaving its key alone.
func DecodeValue(b []byte, r *Row) error {
	if !IsValue(b) {
		return fmt.Errorf("value version: %w", ErrCorrupt)
	}
	d := decoder{b: b[1:]}
	r.Typed = Typed{}
	if b[0] == pointVersion {
		v := math.Float64frombits(binary.BigEndian.Uint64(d.fixed(8, "value")))
		r.Count, r.Sum, r.Min, r.Max, r.FirstValue, r.LastValue = 1, v, v, v, v, v
		r.FirstTS = d.varint("ts")
		r.LastTS = r.FirstTS
		r.Version = d.uvarint("version")
	} else {
		d.aggregate(r)
		if b[0] == typedValueVersion {
			d.typed(r)
		}
	}
	if d.err != nil {
		return d.err
	}
	if len(d.b) != 0 {
		return fmt.Errorf("%d trailing bytes: %w", len(d.b), ErrCorrupt)
	}
	return nil
}

func decodeOne(b []byte, r *Row, keys bool) error {
	if len(b) == 0 || b[0] != codecVersion && b[0] != typedListVersion {
		return fmt.Errorf("version: %w", ErrCorrupt)
	}
	d := decoder{b: b[1:]}
	if n := d.uvarint("row count"); d.err == nil && n != 1 {
		return fmt.Errorf("row count %d, want 1: %w", n, ErrCorrupt)
	}
	d.row(r, keys, b[0] == typedListVersion)
	if d.err != nil {
		*r = Row{}
		return d.err
	}
	if len(d.b) != 0 {
		*r = Row{}
		return fmt.Errorf("%d trailing bytes: %w", len(d.b), ErrCorrupt)
	}
	return nil
}
