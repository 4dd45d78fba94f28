// Package model holds Sluice's value types: readings, audit events, days and
// partition keys. It does no I/O and never reads the clock.
package model

import (
	"fmt"
	"hash/maphash"
	"time"
	"unicode/utf8"
)

// Kind says which table a partition belongs to.
type Kind uint8

// The kinds of data Sluice stores.
const (
	KindReadings Kind = 1
	KindAudit    Kind = 2
)

// String returns the kind's name as used in the read API and the CLI.
func (k Kind) String() string {
	switch k {
	case KindReadings:
		return "readings"
	case KindAudit:
		return "audit"
	default:
		return fmt.Sprintf("kind(%d)", uint8(k))
	}
}

// ParseKind is the inverse of Kind.String.
func ParseKind(s string) (Kind, error) {
	switch s {
	case "readings":
		return KindReadings, nil
	case "audit":
		return KindAudit, nil
	}
	return 0, fmt.Errorf("unknown kind %q (allowed: readings, audit)", s)
}

// MillisPerDay is the length of a day bucket in milliseconds.
const MillisPerDay = int64(24 * time.Hour / time.Millisecond)

// Day is a UTC day bucket: the number of whole days since 1970-01-01.
type Day int32

// DayOf returns the UTC day that holds the timestamp ts (milliseconds since
// the Unix epoch). ts must lie in the valid time range (CheckTime): outside
// it the day number wraps. A timestamp from outside goes through
// CheckedDayOf.
func DayOf(ts int64) Day {
	d := ts / MillisPerDay
	if ts < 0 && ts%MillisPerDay != 0 {
		d--
	}
	return Day(d)
}

// Start returns the first millisecond of the day.
func (d Day) Start() int64 { return int64(d) * MillisPerDay }

// End returns the first millisecond after the day.
func (d Day) End() int64 { return (int64(d) + 1) * MillisPerDay }

// Time returns midnight UTC of the day.
func (d Day) Time() time.Time { return timeOfMillis(d.Start()) }

// String formats the day as YYYY-MM-DD.
func (d Day) String() string { return d.Time().Format(time.DateOnly) }

// ParseDay parses YYYY-MM-DD, years 0000 through 9999.
func ParseDay(s string) (Day, error) {
	if len(s) > len(time.DateOnly) {
		return 0, fmt.Errorf("parse day %.20q…: want YYYY-MM-DD", s)
	}
	t, err := time.Parse(time.DateOnly, s)
	if err != nil {
		return 0, fmt.Errorf("parse day %q: want YYYY-MM-DD", s)
	}
	d, err := CheckedDayOf(t.UnixMilli())
	if err != nil {
		return 0, fmt.Errorf("parse day %q: %w", s, err)
	}
	return d, nil
}

// ValueType is the type of a metric value. The zero type is float64, so a
// Metric or ReadingRow written before typed values existed is a float.
type ValueType uint8

// The types a metric value may have.
const (
	TypeFloat  ValueType = 0
	TypeInt    ValueType = 1
	TypeBool   ValueType = 2
	TypeString ValueType = 3
)

// String names the type as the read API and the docs do.
func (t ValueType) String() string {
	switch t {
	case TypeFloat:
		return "float"
	case TypeInt:
		return "int"
	case TypeBool:
		return "bool"
	case TypeString:
		return "string"
	default:
		return fmt.Sprintf("type(%d)", uint8(t))
	}
}

// Valid reports whether t is one of the four types.
func (t ValueType) Valid() bool { return t <= TypeString }

// Metric is one named value of a reading. Which field holds the value
// depends on Type: Value for a float (the zero Type), Int for an int and
// for a bool (1 true, 0 false), Str for a string. The other fields are zero.
type Metric struct {
	Name  string
	Value float64
	Type  ValueType
	Int   int64
	Str   string
}

// IntMetric returns the metric name = v, typed int.
func IntMetric(name string, v int64) Metric { return Metric{Name: name, Type: TypeInt, Int: v} }

// BoolMetric returns the metric name = v, typed bool.
func BoolMetric(name string, v bool) Metric {
	return Metric{Name: name, Type: TypeBool, Int: boolInt(v)}
}

// StringMetric returns the metric name = v, typed string.
func StringMetric(name, v string) Metric { return Metric{Name: name, Type: TypeString, Str: v} }

func boolInt(v bool) int64 {
	if v {
		return 1
	}
	return 0
}

// Bool returns the value of a bool metric.
func (m Metric) Bool() bool { return m.Int != 0 }

// Reading is what a device reports at one instant. TS is in milliseconds since
// the Unix epoch, UTC. Metrics are sorted by name and unique.
type Reading struct {
	DeviceID string
	TS       int64
	Seq      int64
	HasSeq   bool
	Metrics  []Metric
}

// AuditEvent is one audited action. EventID is the idempotency key.
// Attributes is a raw JSON object, or nil.
type AuditEvent struct {
	EventID    string
	Stream     string
	TS         int64
	Actor      string
	Action     string
	Resource   string
	Outcome    string
	Attributes []byte
}

// PartitionKey names one partition of a table: (tenant, device or stream,
// day, sub-bucket).
type PartitionKey struct {
	Kind   Kind
	Tenant string
	Series string // device id for readings, stream for audit events
	Day    Day
	Sub    uint32
}

func (p PartitionKey) String() string {
	return fmt.Sprintf("%s/%s/%s/%s/%d", p.Kind, p.Tenant, p.Series, p.Day, p.Sub)
}

// SeriesDay is the part of a partition key above the sub-bucket: the unit the
// bucket planner decides for.
type SeriesDay struct {
	Kind   Kind
	Tenant string
	Series string
	Day    Day
}

// SeriesDay drops the sub-bucket.
func (p PartitionKey) SeriesDay() SeriesDay {
	return SeriesDay{Kind: p.Kind, Tenant: p.Tenant, Series: p.Series, Day: p.Day}
}

// hashOdd is an odd constant: multiplying by it is a bijection of uint64.
const hashOdd = 0x9e3779b97f4a7c15

// Hash returns a 64-bit hash of s seeded with seed, for in-memory indexes
// keyed by it (a seed drawn per process, maphash.MakeSeed, so that a
// client cannot choose device ids that collide). For one tenant and
// device it is injective in (Day, Kind).
func (s SeriesDay) Hash(seed maphash.Seed) uint64 {
	t := maphash.String(seed, s.Tenant)
	return maphash.String(seed, s.Series) ^ (t*hashOdd + uint64(uint32(s.Day))<<8 + uint64(s.Kind))
}

// Hash returns a 64-bit hash of p seeded with seed: its series-day's
// (SeriesDay.Hash), mixed with the sub-bucket.
func (p PartitionKey) Hash(seed maphash.Seed) uint64 {
	return p.SeriesDay().Hash(seed) ^ uint64(p.Sub)*(hashOdd+2)
}

// Partition returns the key of sub-bucket sub of the series-day.
func (s SeriesDay) Partition(sub uint32) PartitionKey {
	return PartitionKey{Kind: s.Kind, Tenant: s.Tenant, Series: s.Series, Day: s.Day, Sub: sub}
}

// PartitionInfo is one entry of the partition catalogue: a partition that
// exists, its size and time range, and the bucketing state that produced it.
type PartitionInfo struct {
	Key   PartitionKey
	Rows  int64 // rows written (an upper bound on distinct rows: overwrites count again)
	Bytes int64 // encoded bytes written, same counting
	MinTS int64
	MaxTS int64
	State string // bucketing state that created the partition, e.g. "single" or "split"
	// Closed is set once the partition reached its bound; no row is added to it afterwards.
	Closed bool
	// Ahead marks a claim rather than an exact entry: the gateway wrote it
	// ahead of its partition (or registered it before counting its rows)
	// and has not settled it, so Rows, Bytes and [MinTS, MaxTS] are bounds
	// the partition may not reach. A gateway that stopped without settling
	// leaves it set; the next one to load it counts the rows (see
	// docs/data-model.md, "Reconciling after a crash"). Closed entries are
	// always exact.
	Ahead bool
}

// Overlaps reports whether the partition holds timestamps in [from, to).
func (p PartitionInfo) Overlaps(from, to int64) bool {
	return p.Rows > 0 && p.MinTS < to && p.MaxTS >= from
}

// ReadingRow is one stored cell of the readings table: the value of one metric
// of one reading. Its clustering key is (TS, Metric).
type ReadingRow struct {
	TS     int64
	Metric string
	Value  float64   // a float's value
	Type   ValueType // as in Metric
	Int    int64     // an int's value, or a bool's (1 or 0)
	Str    string    // a string's value
	Seq    int64
	HasSeq bool
}

// MetricOf returns the row's metric with its typed value.
func (r ReadingRow) MetricOf() Metric {
	return Metric{Name: r.Metric, Value: r.Value, Type: r.Type, Int: r.Int, Str: r.Str}
}

// ReadingRows flattens readings into rows, in input order.
func ReadingRows(r Reading) []ReadingRow { return AppendReadingRows(nil, r) }

// AppendReadingRows appends the rows of r to dst.
func AppendReadingRows(dst []ReadingRow, r Reading) []ReadingRow {
	for _, m := range r.Metrics {
		dst = append(dst, ReadingRow{TS: r.TS, Metric: m.Name, Value: m.Value, Type: m.Type, Int: m.Int, Str: m.Str, Seq: r.Seq, HasSeq: r.HasSeq})
	}
	return dst
}

// AppendRow is AppendReadingRows' inverse, a row at a time: it adds row r
// of device to readings, rows coming in time order, as a metric of the
// last reading when it has r's timestamp, else as a new reading (with
// room for as many metrics as the one before it had). A row's sequence
// number, if it has one, is its reading's.
func AppendRow(readings []Reading, device string, r ReadingRow) []Reading {
	if n := len(readings); n > 0 && readings[n-1].TS == r.TS {
		last := &readings[n-1]
		last.Metrics = append(last.Metrics, r.MetricOf())
		if r.HasSeq {
			last.Seq, last.HasSeq = r.Seq, true
		}
		return readings
	}
	// A device's readings mostly carry the same metrics, and a slice
	// grown one metric at a time is allocated again at 2, 4 and 8.
	size := firstMetrics
	if n := len(readings); n > 0 {
		size = len(readings[n-1].Metrics)
	}
	metrics := append(make([]Metric, 0, size), r.MetricOf())
	return append(readings, Reading{DeviceID: device, TS: r.TS, Seq: r.Seq, HasSeq: r.HasSeq, Metrics: metrics})
}

// firstMetrics is the room AppendRow gives the first reading: a reading of
// one metric then wastes a few hundred bytes, a reading of several is not
// allocated again at two, four and eight.
const firstMetrics = 8

// Size is the row's payload size in bytes as the partition bound counts it:
// clustering key plus value, without the partition key every row shares.
func (r ReadingRow) Size() int64 {
	n := int64(8 + len(r.Metric) + 9 + len(r.Str))
	if r.HasSeq {
		n += 8
	}
	return n
}

// Size is the event's payload size in bytes as the partition bound counts it.
func (e AuditEvent) Size() int64 {
	return int64(8 + len(e.EventID) + len(e.Actor) + len(e.Action) + len(e.Resource) + len(e.Outcome) + len(e.Attributes) + 5)
}

// DeadLetter is a message that could not be stored as rows (bad JSON, a bad
// field, a device that does not match its topic): kept, with the reason, so
// that nothing a device sent disappears silently. ID makes the key unique
// among dead letters of the same tenant and millisecond.
type DeadLetter struct {
	Tenant    string
	TS        int64 // when the gateway received it, ms since the epoch
	ID        string
	Source    string // e.g. "mqtt"
	Topic     string
	Reason    string // a short category, e.g. "invalid_json", "invalid_field", "device_mismatch"
	Error     string // the full error message
	Payload   []byte // the payload, cut at the configured size limit
	Truncated bool   // Payload was cut
}

// CheckStringValue returns why b may not be the value of a string metric,
// or "": it must be valid UTF-8 of at most max bytes.
func CheckStringValue(b []byte, max int) string {
	if len(b) > max {
		return fmt.Sprintf("is %d bytes long; at most %d allowed", len(b), max)
	}
	if !utf8.Valid(b) {
		return "is not valid UTF-8"
	}
	return ""
}

// TenantRule says what a tenant name may be, for error messages.
const TenantRule = "1-64 characters of A-Z a-z 0-9 _ . : -"

// ValidTenant reports whether s is a valid tenant name (TenantRule).
func ValidTenant(s string) bool {
	if len(s) == 0 || len(s) > 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '.' || c == ':' || c == '-') {
			return false
		}
	}
	return true
}
