// Package wire defines the JSON shapes of the read API, shared by the
// server (readapi), the client and the CLI's JSON output, with conversions
// to and from the model types. It does no I/O.
package wire

import (
	"cmp"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"slices"
	"time"
	"unicode/utf8"

	"github.com/sluicehq/sluice/internal/model"
)

// TimeFormat is how timestamps are written: RFC 3339, UTC, milliseconds.
const TimeFormat = "2006-01-02T15:04:05.000Z07:00"

// FormatTS writes ms since the epoch as TimeFormat.
func FormatTS(ms int64) string { return time.UnixMilli(ms).UTC().Format(TimeFormat) }

// ParseTS reads an RFC 3339 timestamp into milliseconds since the epoch.
func ParseTS(s string) (int64, error) {
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return 0, fmt.Errorf("%q is not RFC 3339", s)
	}
	return t.UnixMilli(), nil
}

// Reading is the JSON form of a reading.
type Reading struct {
	DeviceID string           `json:"device_id"`
	TS       string           `json:"ts"`
	Seq      *int64           `json:"seq,omitempty"`
	Metrics  map[string]Value `json:"metrics"`
}

// ReadingOf converts a model reading.
func ReadingOf(r model.Reading) Reading {
	j := Reading{DeviceID: r.DeviceID, TS: FormatTS(r.TS), Metrics: make(map[string]Value, len(r.Metrics))}
	if r.HasSeq {
		seq := r.Seq
		j.Seq = &seq
	}
	for _, m := range r.Metrics {
		name := m.Name
		m.Name = ""
		j.Metrics[name] = Value(m)
	}
	return j
}

// Model converts back, metrics sorted by name.
func (j Reading) Model() (model.Reading, error) {
	ts, err := ParseTS(j.TS)
	if err != nil {
		return model.Reading{}, fmt.Errorf("ts: %w", err)
	}
	r := model.Reading{DeviceID: j.DeviceID, TS: ts, Metrics: make([]model.Metric, 0, len(j.Metrics))}
	if j.Seq != nil {
		r.Seq, r.HasSeq = *j.Seq, true
	}
	for name, v := range j.Metrics {
		m := model.Metric(v)
		m.Name = name
		r.Metrics = append(r.Metrics, m)
	}
	slices.SortFunc(r.Metrics, func(a, b model.Metric) int { return cmp.Compare(a.Name, b.Name) })
	return r, nil
}

// ReadingsPage is the answer of GET /v1/readings.
type ReadingsPage struct {
	Readings   []Reading `json:"readings"`
	NextCursor string    `json:"next_cursor,omitempty"`
}

// Event is the JSON form of an audit event.
type Event struct {
	EventID    string          `json:"event_id"`
	Stream     string          `json:"stream"`
	TS         string          `json:"ts"`
	Actor      string          `json:"actor,omitempty"`
	Action     string          `json:"action"`
	Resource   string          `json:"resource,omitempty"`
	Outcome    string          `json:"outcome,omitempty"`
	Attributes json.RawMessage `json:"attributes,omitempty"`
}

// EventOf converts a model event. Attributes that are not valid JSON (the
// store only ever holds valid objects) are left out rather than breaking
// the document.
func EventOf(e model.AuditEvent) Event {
	var attrs json.RawMessage
	if len(e.Attributes) > 0 && json.Valid(e.Attributes) {
		attrs = e.Attributes
	}
	return Event{EventID: e.EventID, Stream: e.Stream, TS: FormatTS(e.TS), Actor: e.Actor, Action: e.Action,
		Resource: e.Resource, Outcome: e.Outcome, Attributes: attrs}
}

// Model converts back.
func (j Event) Model() (model.AuditEvent, error) {
	ts, err := ParseTS(j.TS)
	if err != nil {
		return model.AuditEvent{}, fmt.Errorf("ts: %w", err)
	}
	var attrs []byte
	if len(j.Attributes) > 0 && string(j.Attributes) != "null" {
		attrs = j.Attributes
	}
	return model.AuditEvent{EventID: j.EventID, Stream: j.Stream, TS: ts, Actor: j.Actor,
		Action: j.Action, Resource: j.Resource, Outcome: j.Outcome, Attributes: attrs}, nil
}

// EventsPage is the answer of GET /v1/audit.
type EventsPage struct {
	Events     []Event `json:"events"`
	NextCursor string  `json:"next_cursor,omitempty"`
}

// Partition is the JSON form of a catalogue entry.
type Partition struct {
	Kind      string `json:"kind"`
	Series    string `json:"series"`
	Day       string `json:"day"`
	SubBucket uint32 `json:"sub_bucket"`
	State     string `json:"state"`
	Closed    bool   `json:"closed"`
	Rows      int64  `json:"rows"`
	Bytes     int64  `json:"bytes"`
	MinTS     string `json:"min_ts"`
	MaxTS     string `json:"max_ts"`
	// Ahead says the entry is a claim, not exact: written ahead of its
	// partition by a gateway that has not settled it (another gateway's,
	// or one that stopped without settling and has not run since).
	Ahead bool `json:"ahead,omitempty"`
}

// PartitionOf converts a catalogue entry (the tenant is not part of it).
func PartitionOf(p model.PartitionInfo) Partition {
	return Partition{Kind: p.Key.Kind.String(), Series: p.Key.Series, Day: p.Key.Day.String(), SubBucket: p.Key.Sub,
		State: p.State, Closed: p.Closed, Rows: p.Rows, Bytes: p.Bytes, MinTS: FormatTS(p.MinTS), MaxTS: FormatTS(p.MaxTS), Ahead: p.Ahead}
}

// Model converts back; the key's tenant is left empty.
func (j Partition) Model() (model.PartitionInfo, error) {
	kind, err := model.ParseKind(j.Kind)
	if err != nil {
		return model.PartitionInfo{}, fmt.Errorf("kind: %w", err)
	}
	day, err := model.ParseDay(j.Day)
	if err != nil {
		return model.PartitionInfo{}, fmt.Errorf("day: %w", err)
	}
	minTS, err := ParseTS(j.MinTS)
	if err != nil {
		return model.PartitionInfo{}, fmt.Errorf("min_ts: %w", err)
	}
	maxTS, err := ParseTS(j.MaxTS)
	if err != nil {
		return model.PartitionInfo{}, fmt.Errorf("max_ts: %w", err)
	}
	return model.PartitionInfo{
		Key:  model.PartitionKey{Kind: kind, Series: j.Series, Day: day, Sub: j.SubBucket},
		Rows: j.Rows, Bytes: j.Bytes, MinTS: minTS, MaxTS: maxTS, State: j.State, Closed: j.Closed, Ahead: j.Ahead,
	}, nil
}

// PartitionsPage is the answer of GET /v1/partitions.
type PartitionsPage struct {
	Partitions []Partition `json:"partitions"`
	// Unsettled says the entries could not be made exact first: their
	// counts, sizes and time ranges may run ahead of the partitions.
	Unsettled bool `json:"unsettled,omitempty"`
}

// DeadLetter is the JSON form of a dead letter. The payload is a string
// when it is valid UTF-8, else base64 in PayloadBase64.
type DeadLetter struct {
	TS            string `json:"ts"`
	ID            string `json:"id"`
	Source        string `json:"source"`
	Topic         string `json:"topic,omitempty"`
	Reason        string `json:"reason"`
	Error         string `json:"error"`
	Payload       string `json:"payload,omitempty"`
	PayloadBase64 string `json:"payload_base64,omitempty"`
	Truncated     bool   `json:"truncated,omitempty"`
}

// DeadLetterOf converts a model dead letter (the tenant is not part of it).
func DeadLetterOf(d model.DeadLetter) DeadLetter {
	j := DeadLetter{TS: FormatTS(d.TS), ID: d.ID, Source: d.Source, Topic: d.Topic, Reason: d.Reason, Error: d.Error, Truncated: d.Truncated}
	if utf8.Valid(d.Payload) {
		j.Payload = string(d.Payload)
	} else {
		j.PayloadBase64 = base64.StdEncoding.EncodeToString(d.Payload)
	}
	return j
}

// Model converts back; the tenant is left empty.
func (j DeadLetter) Model() (model.DeadLetter, error) {
	ts, err := ParseTS(j.TS)
	if err != nil {
		return model.DeadLetter{}, fmt.Errorf("ts: %w", err)
	}
	payload := []byte(j.Payload)
	if j.PayloadBase64 != "" {
		if payload, err = base64.StdEncoding.DecodeString(j.PayloadBase64); err != nil {
			return model.DeadLetter{}, fmt.Errorf("payload_base64: %w", err)
		}
	}
	return model.DeadLetter{TS: ts, ID: j.ID, Source: j.Source, Topic: j.Topic, Reason: j.Reason,
		Error: j.Error, Payload: payload, Truncated: j.Truncated}, nil
}

// DeadLettersPage is the answer of GET /v1/deadletters.
type DeadLettersPage struct {
	DeadLetters []DeadLetter `json:"dead_letters"`
	NextCursor  string       `json:"next_cursor,omitempty"`
}

// Bucket is the JSON form of one step of a rollup series. Count counts
// every value of the step, whatever its type; the aggregates of a type are
// present only when the step has values of that type: sum, min and max of
// its floats (float_count of them); int_count, int_sum (exact, an integer
// of any size), int_min, int_max; bool_count and true_count; str_count;
// and of each type its first and last value with their times. Mean is
// that of the numeric values, floats and ints together. First and last,
// with first_ts and last_ts, are the step's earliest and latest value of
// any type, in its JSON type (see Value).
type Bucket struct {
	Start      string   `json:"start"`
	Count      uint64   `json:"count"`
	FloatCount uint64   `json:"float_count,omitempty"`
	Sum        *float64 `json:"sum,omitempty"`
	Min        *float64 `json:"min,omitempty"`
	Max        *float64 `json:"max,omitempty"`
	Mean       *float64 `json:"mean,omitempty"`
	First      *Value   `json:"first,omitempty"`
	FirstTS    string   `json:"first_ts,omitempty"`
	Last       *Value   `json:"last,omitempty"`
	LastTS     string   `json:"last_ts,omitempty"`

	IntCount   uint64      `json:"int_count,omitempty"`
	IntSum     json.Number `json:"int_sum,omitempty"`
	IntMin     *int64      `json:"int_min,omitempty"`
	IntMax     *int64      `json:"int_max,omitempty"`
	IntFirst   *int64      `json:"int_first,omitempty"`
	IntFirstTS string      `json:"int_first_ts,omitempty"`
	IntLast    *int64      `json:"int_last,omitempty"`
	IntLastTS  string      `json:"int_last_ts,omitempty"`

	BoolCount   uint64  `json:"bool_count,omitempty"`
	TrueCount   *uint64 `json:"true_count,omitempty"`
	BoolFirst   *bool   `json:"bool_first,omitempty"`
	BoolFirstTS string  `json:"bool_first_ts,omitempty"`
	BoolLast    *bool   `json:"bool_last,omitempty"`
	BoolLastTS  string  `json:"bool_last_ts,omitempty"`

	StrCount   uint64  `json:"str_count,omitempty"`
	StrFirst   *string `json:"str_first,omitempty"`
	StrFirstTS string  `json:"str_first_ts,omitempty"`
	StrLast    *string `json:"str_last,omitempty"`
	StrLastTS  string  `json:"str_last_ts,omitempty"`
}

// Rank is the JSON form of one device of a top list: the ranking value,
// the device's count of values (every type), the mean and max of its
// numeric (float and int) values when it has some, its exact int sum and
// its true count when it has ints or bools, and its latest value of any
// type.
type Rank struct {
	Device    string      `json:"device"`
	Value     float64     `json:"value"`
	Count     uint64      `json:"count"`
	Mean      *float64    `json:"mean,omitempty"`
	Max       *float64    `json:"max,omitempty"`
	IntSum    json.Number `json:"int_sum,omitempty"`
	TrueCount *uint64     `json:"true_count,omitempty"`
	Last      *Value      `json:"last,omitempty"`
	LastTS    string      `json:"last_ts,omitempty"`
}

// RollupSeries is the answer of GET /v1/rollups.
type RollupSeries struct {
	Device  string   `json:"device"`
	Metric  string   `json:"metric"`
	Step    string   `json:"step"`
	Buckets []Bucket `json:"buckets"`
}

// TopList is the answer of GET /v1/top.
type TopList struct {
	Metric  string `json:"metric"`
	By      string `json:"by"`
	Devices []Rank `json:"devices"`
}

// Mismatch is one (device, metric) whose rollups do not match the raw
// store: Raw and Rollup are the counts of values of every type, and Diffs
// names each aggregate that differs, with both values (e.g. "int_sum: raw
// 12, rollup 9").
type Mismatch struct {
	Device string   `json:"device"`
	Metric string   `json:"metric"`
	Raw    int64    `json:"raw"`
	Rollup int64    `json:"rollup"`
	Diffs  []string `json:"diffs,omitempty"`
}

// Verification is the answer of GET /v1/rollups/verify.
type Verification struct {
	Day        string     `json:"day"`
	Devices    int        `json:"devices"`
	Metrics    int        `json:"metrics"`
	RawRows    int64      `json:"raw_rows"`
	RollupRows int64      `json:"rollup_rows"`
	Mismatches []Mismatch `json:"mismatches"`
}

// RebuildResult sums up a rollup rebuild.
type RebuildResult struct {
	DeviceDays int   `json:"device_days"`
	Readings   int64 `json:"readings"`     // raw reading rows read
	Written    int   `json:"rows_written"` // rebuilt rollup rows
	Retracted  int   `json:"rows_retracted"`
}

// RebuildProgress is one NDJSON line of the answer of POST
// /v1/rollups/rebuild: progress, then one line with Result or Error.
type RebuildProgress struct {
	Done   int            `json:"done,omitempty"`
	Total  int            `json:"total,omitempty"`
	Device string         `json:"device,omitempty"`
	Day    string         `json:"day,omitempty"`
	Result *RebuildResult `json:"result,omitempty"`
	Error  string         `json:"error,omitempty"`
}

// RankedPartition is one partition of a ranking (GET /v1/partitions/top):
// its catalogue entry and, ranked by rate, its recent write rate on the
// gateway that answered.
type RankedPartition struct {
	Partition
	RowsPerSecond float64 `json:"rows_per_second,omitempty"`
}

// TopPartitionsPage is the answer of GET /v1/partitions/top.
type TopPartitionsPage struct {
	Kind       string            `json:"kind"`
	Day        string            `json:"day"`
	By         string            `json:"by"`
	Partitions []RankedPartition `json:"partitions"`
	// Unsettled says some listed entries are claims (Ahead): their counts
	// may run ahead of their partitions.
	Unsettled bool `json:"unsettled,omitempty"`
}
