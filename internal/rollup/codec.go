package rollup

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
)

// codecVersion is the first byte of an encoded row list.
const codecVersion = 1

// ErrCorrupt is returned for bytes that do not decode.
var ErrCorrupt = errors.New("corrupt rollup rows")

// EncodeRows appends the binary form of rows to b: the durable outbox's
// record format.
func EncodeRows(b []byte, rows []Row) []byte {
	b = append(b, codecVersion)
	b = binary.AppendUvarint(b, uint64(len(rows)))
	for _, r := range rows {
		for _, s := range []string{r.Tenant, r.Device, r.Metric} {
			b = binary.AppendUvarint(b, uint64(len(s)))
			b = append(b, s...)
		}
		b = binary.AppendVarint(b, r.Minute)
		b = binary.BigEndian.AppendUint16(b, r.Writer)
		b = binary.AppendUvarint(b, r.Part)
		b = binary.AppendUvarint(b, r.Count)
		for _, f := range []float64{r.Sum, r.Min, r.Max, r.FirstValue, r.LastValue} {
			b = binary.BigEndian.AppendUint64(b, math.Float64bits(f))
		}
		b = binary.AppendVarint(b, r.FirstTS)
		b = binary.AppendVarint(b, r.LastTS)
		b = binary.AppendUvarint(b, r.Version)
	}
	return b
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

// DecodeRows is the inverse of EncodeRows.
func DecodeRows(b []byte) ([]Row, error) {
	if len(b) == 0 || b[0] != codecVersion {
		return nil, fmt.Errorf("version: %w", ErrCorrupt)
	}
	d := &decoder{b: b[1:]}
	n := d.uvarint("row count")
	if n > uint64(len(d.b)) { // every row takes more than one byte
		return nil, fmt.Errorf("row count %d: %w", n, ErrCorrupt)
	}
	rows := make([]Row, 0, n)
	for range n {
		var r Row
		r.Tenant, r.Device, r.Metric = d.str("tenant"), d.str("device"), d.str("metric")
		r.Minute = d.varint("minute")
		r.Writer = binary.BigEndian.Uint16(d.fixed(2, "writer"))
		r.Part = d.uvarint("part")
		r.Count = d.uvarint("count")
		fs := [5]*float64{&r.Sum, &r.Min, &r.Max, &r.FirstValue, &r.LastValue}
		for _, f := range fs {
			*f = math.Float64frombits(binary.BigEndian.Uint64(d.fixed(8, "value")))
		}
		r.FirstTS, r.LastTS = d.varint("first_ts"), d.varint("last_ts")
		r.Version = d.uvarint("version")
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
