package pebblestore

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"

	"github.com/sluicehq/sluice/internal/model"
)

// Key layout. Every key starts with a table byte and the day, so that one
// day of one table is one contiguous key range (retention drops it with a
// single range delete), and one day of one tenant is a contiguous sub-range.
// Strings are terminated by 0x00, which validated ids never contain; the
// last component of a key is not terminated.
//
//	readings   'r' day tenant 0 device 0 sub ts                 -> cells: (name, flags, typed value, [seq])… (merged; cells.go)
//	           'r' day tenant 0 device 0 sub ts metric          -> flags, value, [seq] (stores written up to 10a3f17)
//	audit      'a' day tenant 0 stream 0 sub ts event_id        -> actor, action, resource, outcome, attributes
//	audit ids  'i' day tenant 0 event_id                        -> stream 0 sub ts
//	catalogue  'c' day tenant 0 kind series 0 sub               -> partition info
//	dead       'd' day tenant 0 ts id                           -> source, topic, reason, error, truncated, payload
//	marks      'm' …                                            -> the rollups' marks (MarksIn; package rollmarks)
//
// Integers are big-endian; day and ts have their sign bit flipped so that
// byte order is numeric order.
const (
	tabReadings  = 'r'
	tabAudit     = 'a'
	tabAuditIDs  = 'i'
	tabCatalogue = 'c'
	tabDead      = 'd'
	tabMarks     = 'm' // not the store's: the rollups' marks (MarksIn)
)

func appendDay(b []byte, d model.Day) []byte {
	return binary.BigEndian.AppendUint32(b, uint32(d)^(1<<31))
}

func appendTS(b []byte, ts int64) []byte {
	return binary.BigEndian.AppendUint64(b, uint64(ts)^(1<<63))
}

func appendStr(b []byte, s string) []byte {
	b = append(b, s...)
	return append(b, 0)
}

func tableOf(k model.Kind) byte {
	if k == model.KindAudit {
		return tabAudit
	}
	return tabReadings
}

// partitionPrefix is the key prefix shared by every row of a partition.
func partitionPrefix(b []byte, pk model.PartitionKey) []byte {
	b = append(b, tableOf(pk.Kind))
	b = appendDay(b, pk.Day)
	b = appendStr(b, pk.Tenant)
	b = appendStr(b, pk.Series)
	return binary.BigEndian.AppendUint32(b, pk.Sub)
}

func auditIDKey(b []byte, tenant string, d model.Day, id string) []byte {
	b = append(b, tabAuditIDs)
	b = appendDay(b, d)
	b = appendStr(b, tenant)
	return append(b, id...)
}

func seriesDayCataloguePrefix(b []byte, sd model.SeriesDay) []byte {
	b = append(b, tabCatalogue)
	b = appendDay(b, sd.Day)
	b = appendStr(b, sd.Tenant)
	b = append(b, byte(sd.Kind))
	return appendStr(b, sd.Series)
}

func catalogueKey(b []byte, pk model.PartitionKey) []byte {
	b = seriesDayCataloguePrefix(b, pk.SeriesDay())
	return binary.BigEndian.AppendUint32(b, pk.Sub)
}

// prefixEndInPlace is prefixEnd written over prefix.
func prefixEndInPlace(prefix []byte) []byte {
	for i := len(prefix) - 1; i >= 0; i-- {
		if prefix[i] != 0xff {
			prefix[i]++
			return prefix[:i+1]
		}
	}
	return nil
}

// prefixEnd returns the smallest key greater than every key with the prefix.
func prefixEnd(prefix []byte) []byte {
	return prefixEndInPlace(append([]byte(nil), prefix...))
}

var errCorrupt = errors.New("corrupt value")

// Reading value: a flags byte, the typed value, then seq as a varint when
// flag bit 0 is set. Flag bits 1-2 hold the value's type (model.ValueType):
// a float (0, what every value written before typed values was) or an int
// is 8 bytes big-endian (float64 bits, int64), a bool one byte (0 or 1), a
// string its length as a uvarint then its bytes. Bits 3-7 are zero.
func encodeReading(b []byte, r model.ReadingRow) []byte {
	flags := byte(r.Type&3) << 1
	if r.HasSeq {
		flags |= 1
	}
	b = append(b, flags)
	switch r.Type {
	case model.TypeInt:
		b = binary.BigEndian.AppendUint64(b, uint64(r.Int))
	case model.TypeBool:
		b = append(b, byte(r.Int&1))
	case model.TypeString:
		b = binary.AppendUvarint(b, uint64(len(r.Str)))
		b = append(b, r.Str...)
	default:
		b = binary.BigEndian.AppendUint64(b, math.Float64bits(r.Value))
	}
	if r.HasSeq {
		b = binary.AppendVarint(b, r.Seq)
	}
	return b
}

func decodeReading(v []byte, r *model.ReadingRow) error {
	if len(v) < 1 || v[0]>>3 != 0 {
		return fmt.Errorf("reading value of %d bytes: %w", len(v), errCorrupt)
	}
	r.Type = model.ValueType(v[0]>>1) & 3
	r.HasSeq = v[0]&1 != 0
	r.Value, r.Int, r.Str, r.Seq = 0, 0, "", 0
	rest := v[1:]
	switch r.Type {
	case model.TypeFloat, model.TypeInt:
		if len(rest) < 8 {
			return fmt.Errorf("reading value of %d bytes: %w", len(v), errCorrupt)
		}
		u := binary.BigEndian.Uint64(rest)
		if r.Type == model.TypeInt {
			r.Int = int64(u)
		} else {
			r.Value = math.Float64frombits(u)
		}
		rest = rest[8:]
	case model.TypeBool:
		if len(rest) < 1 || rest[0] > 1 {
			return fmt.Errorf("reading bool value: %w", errCorrupt)
		}
		r.Int = int64(rest[0])
		rest = rest[1:]
	case model.TypeString:
		n, k := binary.Uvarint(rest)
		if k <= 0 || n > uint64(len(rest)-k) {
			return fmt.Errorf("reading string value: %w", errCorrupt)
		}
		r.Str = string(rest[k : k+int(n)])
		rest = rest[k+int(n):]
	}
	if r.HasSeq {
		s, n := binary.Varint(rest)
		if n <= 0 {
			return fmt.Errorf("reading seq: %w", errCorrupt)
		}
		r.Seq = s
	}
	return nil
}

func appendBytes(b, s []byte) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

func encodeAudit(b []byte, e model.AuditEvent) []byte {
	for _, s := range []string{e.Actor, e.Action, e.Resource, e.Outcome} {
		b = binary.AppendUvarint(b, uint64(len(s)))
		b = append(b, s...)
	}
	return appendBytes(b, e.Attributes)
}

func decodeAudit(v []byte, e *model.AuditEvent) error { return decodeAuditInto(v, e, false) }

// decodeAuditInto decodes an audit value into e. If owned, v belongs to
// the caller and never changes: e's strings and attributes are then views
// of it, not copies.
func decodeAuditInto(v []byte, e *model.AuditEvent, owned bool) error {
	var fields [5][]byte
	for i := range fields {
		n, k := binary.Uvarint(v)
		if k <= 0 || uint64(len(v)-k) < n {
			return fmt.Errorf("audit value field %d: %w", i, errCorrupt)
		}
		fields[i] = v[k : k+int(n) : k+int(n)]
		v = v[k+int(n):]
	}
	str := func(b []byte) string { return string(b) }
	if owned {
		str = view
	}
	e.Actor, e.Action, e.Resource, e.Outcome = str(fields[0]), str(fields[1]), str(fields[2]), str(fields[3])
	switch {
	case len(fields[4]) == 0:
		e.Attributes = nil
	case owned:
		e.Attributes = fields[4]
	default:
		e.Attributes = append([]byte(nil), fields[4]...)
	}
	return nil
}

const catalogueVersion = 1

// Bits of a catalogue entry's flags byte. Entries written before flagAhead
// existed have it clear, as they were then taken to be exact.
const (
	flagClosed = 1 << 0
	flagAhead  = 1 << 1
)

func encodeInfo(b []byte, pi model.PartitionInfo) []byte {
	b = append(b, catalogueVersion)
	b = binary.AppendVarint(b, pi.Rows)
	b = binary.AppendVarint(b, pi.Bytes)
	b = binary.AppendVarint(b, pi.MinTS)
	b = binary.AppendVarint(b, pi.MaxTS)
	var flags byte
	if pi.Closed {
		flags |= flagClosed
	}
	if pi.Ahead {
		flags |= flagAhead
	}
	b = append(b, flags)
	return append(b, pi.State...)
}

func decodeInfo(v []byte, pi *model.PartitionInfo) error {
	if len(v) < 8 {
		return fmt.Errorf("catalogue entry version: %w", errCorrupt)
	}
	v = v[8:] // the batch version the merge orders by (merge.go)
	if len(v) < 1 || v[0] != catalogueVersion {
		return fmt.Errorf("catalogue entry version: %w", errCorrupt)
	}
	v = v[1:]
	var nums [4]int64
	for i := range nums {
		x, n := binary.Varint(v)
		if n <= 0 {
			return fmt.Errorf("catalogue entry field %d: %w", i, errCorrupt)
		}
		nums[i] = x
		v = v[n:]
	}
	if len(v) < 1 {
		return fmt.Errorf("catalogue entry flags: %w", errCorrupt)
	}
	pi.Rows, pi.Bytes, pi.MinTS, pi.MaxTS = nums[0], nums[1], nums[2], nums[3]
	pi.Closed = v[0]&flagClosed != 0
	pi.Ahead = v[0]&flagAhead != 0
	pi.State = string(v[1:])
	return nil
}

func deadPrefix(b []byte, tenant string, d model.Day) []byte {
	b = append(b, tabDead)
	b = appendDay(b, d)
	return appendStr(b, tenant)
}

func encodeDead(b []byte, dl model.DeadLetter) []byte {
	for _, s := range []string{dl.Source, dl.Topic, dl.Reason, dl.Error} {
		b = binary.AppendUvarint(b, uint64(len(s)))
		b = append(b, s...)
	}
	t := byte(0)
	if dl.Truncated {
		t = 1
	}
	b = append(b, t)
	return appendBytes(b, dl.Payload)
}

func decodeDead(v []byte, dl *model.DeadLetter) error {
	var fields [4]string
	for i := range fields {
		n, k := binary.Uvarint(v)
		if k <= 0 || uint64(len(v)-k) < n {
			return fmt.Errorf("dead letter field %d: %w", i, errCorrupt)
		}
		fields[i] = string(v[k : k+int(n)])
		v = v[k+int(n):]
	}
	if len(v) < 1 {
		return fmt.Errorf("dead letter flags: %w", errCorrupt)
	}
	dl.Source, dl.Topic, dl.Reason, dl.Error = fields[0], fields[1], fields[2], fields[3]
	dl.Truncated = v[0] == 1
	n, k := binary.Uvarint(v[1:])
	if k <= 0 || uint64(len(v)-1-k) < n {
		return fmt.Errorf("dead letter payload: %w", errCorrupt)
	}
	dl.Payload = append([]byte(nil), v[1+k:1+k+int(n)]...)
	return nil
}
