// Package storetest is the conformance suite every storage backend runs. A
// backend's test calls Run with a function that opens an empty store; the
// suite checks the contract the sink and the reader rely on: rows come back
// in clustering order (ts, key) inside a Range, a key holds one row (the last
// written), partitions never leak into one another, audit ids are found only
// once committed, the catalogue round trips ordered by sub-bucket, and a
// commit is atomic.
//
// It only uses the backend through Backend, so it knows nothing of how a
// backend lays out its keys.
package storetest

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/sluicehq/sluice/internal/model"
	"github.com/sluicehq/sluice/internal/store"
)

// Backend is what the sink and the reader use of a storage backend.
type Backend interface {
	Commit(ctx context.Context, b *store.Batch) error
	Catalogue(ctx context.Context, sd model.SeriesDay) ([]model.PartitionInfo, error)
	AuditSeen(ctx context.Context, ids []store.AuditID) ([]bool, error)
	ScanReadings(ctx context.Context, pk model.PartitionKey, r store.Range, limit int) ([]model.ReadingRow, error)
	ScanAudit(ctx context.Context, pk model.PartitionKey, r store.Range, limit int) ([]model.AuditEvent, error)
	EachPartition(ctx context.Context, tenant string, kind model.Kind, day model.Day, fn func(model.PartitionInfo) error) error
	EachSeries(ctx context.Context, tenant string, kind model.Kind, day model.Day, fn func(series string) error) error
}

// Option changes what Run expects of a backend.
type Option func(*options)

type options struct{ notAtomic bool }

// NotAtomic is for backends whose Commit is not atomic across partitions
// (Cassandra writes partitions in parallel): instead of "a reader never sees
// part of a batch", Run checks the weaker promise such a backend makes: a
// catalogue entry is written after the rows it describes, and everything is
// visible once Commit returned.
func NotAtomic() Option { return func(o *options) { o.notAtomic = true } }

// Run runs every conformance test, each on a fresh store from open. open
// registers the store's cleanup with t.
func Run(t *testing.T, open func(t *testing.T) Backend, opts ...Option) {
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	atomic := testAtomicBatch
	if o.notAtomic {
		atomic = testOrderedCommit
	}
	tests := []struct {
		name string
		fn   func(t *testing.T, b Backend)
	}{
		{"ReadingsRoundTrip", testReadingsRoundTrip},
		{"ReadingsRange", testReadingsRange},
		{"RangeMatchesContains", testRangeMatchesContains},
		{"Limit", testLimit},
		{"Overwrite", testOverwrite},
		{"OverwriteInBatch", testOverwriteInBatch},
		{"PartitionIsolation", testPartitionIsolation},
		{"AuditRoundTrip", testAuditRoundTrip},
		{"AuditRange", testAuditRange},
		{"AuditSeen", testAuditSeen},
		{"Catalogue", testCatalogue},
		{"EachPartition", testEachPartition},
		{"EachSeries", testEachSeries},
		{"EmptyBatch", testEmptyBatch},
		{"AtomicBatch", atomic},
		{"CancelledCommit", testCancelledCommit},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tc.fn(t, open(t))
		})
	}
}

// everything selects every row a partition can hold but one at
// math.MaxInt64, which To excludes.
var everything = store.Range{From: math.MinInt64, To: math.MaxInt64}

const day = model.MillisPerDay

var cmpOpts = []cmp.Option{cmpopts.EquateEmpty()}

func commit(t *testing.T, b Backend, batch *store.Batch) {
	t.Helper()
	if err := b.Commit(t.Context(), batch); err != nil {
		t.Fatalf("Commit: %v", err)
	}
}

func scanReadings(t *testing.T, b Backend, pk model.PartitionKey, r store.Range, limit int) []model.ReadingRow {
	t.Helper()
	rows, err := b.ScanReadings(t.Context(), pk, r, limit)
	if err != nil {
		t.Fatalf("ScanReadings(%v, %+v, %d): %v", pk, r, limit, err)
	}
	return rows
}

func scanAudit(t *testing.T, b Backend, pk model.PartitionKey, r store.Range, limit int) []model.AuditEvent {
	t.Helper()
	evs, err := b.ScanAudit(t.Context(), pk, r, limit)
	if err != nil {
		t.Fatalf("ScanAudit(%v, %+v, %d): %v", pk, r, limit, err)
	}
	return evs
}

func catalogue(t *testing.T, b Backend, sd model.SeriesDay) []model.PartitionInfo {
	t.Helper()
	parts, err := b.Catalogue(t.Context(), sd)
	if err != nil {
		t.Fatalf("Catalogue(%v): %v", sd, err)
	}
	return parts
}

// readingsKey returns a readings partition key whose day holds ts.
func readingsKey(tenant, series string, ts int64, sub uint32) model.PartitionKey {
	return model.PartitionKey{Kind: model.KindReadings, Tenant: tenant, Series: series, Day: model.DayOf(ts), Sub: sub}
}

func auditKey(tenant, stream string, ts int64, sub uint32) model.PartitionKey {
	return model.PartitionKey{Kind: model.KindAudit, Tenant: tenant, Series: stream, Day: model.DayOf(ts), Sub: sub}
}

func sortEvents(evs []model.AuditEvent) []model.AuditEvent {
	out := slices.Clone(evs)
	slices.SortFunc(out, func(a, b model.AuditEvent) int {
		if a.TS != b.TS {
			return cmpInt(a.TS, b.TS)
		}
		return strings.Compare(a.EventID, b.EventID)
	})
	return out
}

func cmpInt(a, b int64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

func reversed[T any](s []T) []T {
	out := slices.Clone(s)
	slices.Reverse(out)
	return out
}

func testReadingsRoundTrip(t *testing.T, b Backend) {
	// Each case is one partition whose day holds every ts of its rows;
	// rows are committed in reverse clustering order.
	tests := []struct {
		name string
		pk   model.PartitionKey
		rows []model.ReadingRow // in clustering order
	}{
		{
			name: "values and seq",
			pk:   readingsKey("t1", "dev-1", 1_790_000_000_000, 0),
			rows: []model.ReadingRow{
				{TS: 1_790_000_000_000, Metric: "Z", Value: -1.5},
				{TS: 1_790_000_000_000, Metric: "a", Value: 0},
				{TS: 1_790_000_000_000, Metric: "a.b", Value: math.MaxFloat64},
				{TS: 1_790_000_000_000, Metric: "a_b", Value: math.SmallestNonzeroFloat64},
				{TS: 1_790_000_000_000, Metric: "aa", Value: math.Inf(-1)},
				{TS: 1_790_000_000_001, Metric: "a", Value: 1, Seq: 0, HasSeq: true},
				{TS: 1_790_000_000_002, Metric: "a", Value: 2, Seq: -7, HasSeq: true},
				{TS: 1_790_000_000_003, Metric: "a", Value: 3, Seq: math.MaxInt64, HasSeq: true},
				{TS: 1_790_000_000_004, Metric: "a", Value: 4, Seq: math.MinInt64, HasSeq: true},
				{TS: 1_790_000_000_005, Metric: "temperature.celsius", Value: 21.25, Seq: 300, HasSeq: true},
			},
		},
		{
			name: "typed values",
			pk:   readingsKey("t1", "door-3", 1_790_000_000_000, 0),
			rows: []model.ReadingRow{
				{TS: 1_790_000_000_000, Metric: "count", Type: model.TypeInt, Int: math.MinInt64},
				{TS: 1_790_000_000_000, Metric: "fw", Type: model.TypeString, Str: "1.4.2"},
				{TS: 1_790_000_000_000, Metric: "note", Type: model.TypeString, Str: "caf\u00e9 \"q\"\n\x00"},
				{TS: 1_790_000_000_000, Metric: "open", Type: model.TypeBool, Int: 1},
				{TS: 1_790_000_000_000, Metric: "shut", Type: model.TypeBool, Int: 0},
				{TS: 1_790_000_000_000, Metric: "state", Type: model.TypeString, Str: ""},
				{TS: 1_790_000_000_000, Metric: "temp_c", Value: 21.5},
				{TS: 1_790_000_000_001, Metric: "count", Type: model.TypeInt, Int: math.MaxInt64, Seq: -3, HasSeq: true},
				{TS: 1_790_000_000_001, Metric: "fw", Type: model.TypeString, Str: strings.Repeat("x", 300), Seq: -3, HasSeq: true},
				{TS: 1_790_000_000_001, Metric: "open", Type: model.TypeBool, Int: 0, Seq: -3, HasSeq: true},
				{TS: 1_790_000_000_002, Metric: "count", Type: model.TypeInt, Int: 0},
			},
		},
		{
			name: "day before the epoch",
			pk:   readingsKey("t1", "dev-1", -1, 0),
			rows: []model.ReadingRow{
				{TS: -day, Metric: "a", Value: 1},
				{TS: -day + 1, Metric: "a", Value: 2},
				{TS: -1000, Metric: "a", Value: 3, Seq: 1, HasSeq: true},
				{TS: -1, Metric: "a", Value: 4},
				{TS: -1, Metric: "b", Value: 5},
			},
		},
		{
			name: "epoch day",
			pk:   readingsKey("t1", "dev-1", 0, 0),
			rows: []model.ReadingRow{
				{TS: 0, Metric: "a", Value: 1},
				{TS: 1, Metric: "a", Value: 2},
				{TS: day - 1, Metric: "a", Value: 3},
			},
		},
		{
			name: "split partition of a far day",
			pk:   readingsKey("t1", "dev-1", 40_000*day, 1<<24|1),
			rows: []model.ReadingRow{
				{TS: 40_000 * day, Metric: "x", Value: 1},
				{TS: 40_001*day - 1, Metric: "x", Value: 2},
			},
		},
	}
	var batch store.Batch
	for _, tc := range tests {
		batch.Partitions = append(batch.Partitions, store.PartitionWrite{Key: tc.pk, Readings: reversed(tc.rows)})
	}
	commit(t, b, &batch)
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := scanReadings(t, b, tc.pk, everything, 1000)
			if diff := cmp.Diff(tc.rows, got, cmpOpts...); diff != "" {
				t.Errorf("ScanReadings(%v) mismatch (-want +got):\n%s", tc.pk, diff)
			}
		})
	}
	t.Run("empty partition", func(t *testing.T) {
		got := scanReadings(t, b, readingsKey("t1", "nobody", 0, 0), everything, 1000)
		if len(got) != 0 {
			t.Errorf("ScanReadings of an unwritten partition = %v, want none", got)
		}
	})
}

// rangeRows is the partition the range tests read: three readings at 10,
// 20 and 30 of day 0, and one at each end of the day.
var rangeRows = []model.ReadingRow{
	{TS: 0, Metric: "a", Value: 0},
	{TS: 10, Metric: "a", Value: 1},
	{TS: 10, Metric: "b", Value: 2},
	{TS: 20, Metric: "a", Value: 3},
	{TS: 20, Metric: "b", Value: 4},
	{TS: 20, Metric: "c", Value: 5},
	{TS: 30, Metric: "a", Value: 6},
	{TS: day - 1, Metric: "z", Value: 7},
}

// negRows is a partition of the day before the epoch.
var negRows = []model.ReadingRow{
	{TS: -day, Metric: "a", Value: 1},
	{TS: -10, Metric: "a", Value: 2},
	{TS: -10, Metric: "b", Value: 3},
	{TS: -1, Metric: "a", Value: 4},
}

func pick(rows []model.ReadingRow, idx ...int) []model.ReadingRow {
	out := make([]model.ReadingRow, 0, len(idx))
	for _, i := range idx {
		out = append(out, rows[i])
	}
	return out
}

func testReadingsRange(t *testing.T, b Backend) {
	pos := readingsKey("t", "d", 0, 0)
	neg := readingsKey("t", "d", -1, 0)
	commit(t, b, &store.Batch{Partitions: []store.PartitionWrite{
		{Key: pos, Readings: rangeRows},
		{Key: neg, Readings: negRows},
	}})
	tests := []struct {
		name string
		pk   model.PartitionKey
		rng  store.Range
		want []model.ReadingRow
	}{
		{"whole day", pos, store.Range{From: 0, To: day}, rangeRows},
		{"to is exclusive", pos, store.Range{From: 0, To: 20}, pick(rangeRows, 0, 1, 2)},
		{"from is inclusive", pos, store.Range{From: 20, To: day}, pick(rangeRows, 3, 4, 5, 6, 7)},
		{"one instant", pos, store.Range{From: 20, To: 21}, pick(rangeRows, 3, 4, 5)},
		{"end of day excluded", pos, store.Range{From: 0, To: day - 1}, rangeRows[:7]},
		{"between rows", pos, store.Range{From: 11, To: 20}, nil},
		{"empty range", pos, store.Range{From: 20, To: 20}, nil},
		{"inverted range", pos, store.Range{From: 30, To: 10}, nil},
		{"after a metric", pos, store.Range{From: 0, To: day, After: &store.Pos{TS: 20, Key: "a"}}, pick(rangeRows, 4, 5, 6, 7)},
		{"after the empty key", pos, store.Range{From: 0, To: day, After: &store.Pos{TS: 20, Key: ""}}, pick(rangeRows, 3, 4, 5, 6, 7)},
		{"after a missing metric", pos, store.Range{From: 0, To: day, After: &store.Pos{TS: 20, Key: "bb"}}, pick(rangeRows, 5, 6, 7)},
		{"after every key of a ts", pos, store.Range{From: 0, To: day, After: &store.Pos{TS: 20, Key: "\xff"}}, pick(rangeRows, 6, 7)},
		{"after between instants", pos, store.Range{From: 0, To: day, After: &store.Pos{TS: 25, Key: "zzz"}}, pick(rangeRows, 6, 7)},
		{"after before from", pos, store.Range{From: 20, To: day, After: &store.Pos{TS: 10, Key: "a"}}, pick(rangeRows, 3, 4, 5, 6, 7)},
		{"after and to", pos, store.Range{From: 0, To: 30, After: &store.Pos{TS: 10, Key: "\xff"}}, pick(rangeRows, 3, 4, 5)},
		{"after the last row", pos, store.Range{From: 0, To: day, After: &store.Pos{TS: day - 1, Key: "z"}}, nil},
		{"after past to", pos, store.Range{From: 0, To: 20, After: &store.Pos{TS: 30, Key: ""}}, nil},
		{"negative day", neg, store.Range{From: -day, To: 0}, negRows},
		{"negative bounds", neg, store.Range{From: -10, To: -1}, pick(negRows, 1, 2)},
		{"negative after", neg, store.Range{From: -day, To: 0, After: &store.Pos{TS: -10, Key: "a"}}, pick(negRows, 2, 3)},
		{"negative after every key", neg, store.Range{From: -day, To: 0, After: &store.Pos{TS: -day, Key: "\xff"}}, pick(negRows, 1, 2, 3)},
		{"extreme bounds", neg, everything, negRows},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := scanReadings(t, b, tc.pk, tc.rng, 1000)
			if diff := cmp.Diff(tc.want, got, cmpOpts...); diff != "" {
				t.Errorf("ScanReadings(%+v) mismatch (-want +got):\n%s", tc.rng, diff)
			}
		})
	}
}

// testRangeMatchesContains checks many ranges against store.Range.Contains,
// the definition of what a range selects.
func testRangeMatchesContains(t *testing.T, b Backend) {
	pk := readingsKey("t", "d", 0, 0)
	commit(t, b, &store.Batch{Partitions: []store.PartitionWrite{{Key: pk, Readings: rangeRows}}})
	bounds := []int64{math.MinInt64, -1, 0, 10, 20, 21, 30, day - 1, day, math.MaxInt64}
	afters := []*store.Pos{nil}
	for _, ts := range []int64{-1, 10, 20, 30, day - 1} {
		for _, k := range []string{"", "a", "bz", "\xff"} {
			afters = append(afters, &store.Pos{TS: ts, Key: k})
		}
	}
	for _, from := range bounds {
		for _, to := range bounds {
			for _, after := range afters {
				rng := store.Range{From: from, To: to, After: after}
				var want []model.ReadingRow
				for _, r := range rangeRows {
					if rng.Contains(store.Pos{TS: r.TS, Key: r.Metric}) {
						want = append(want, r)
					}
				}
				got := scanReadings(t, b, pk, rng, 1000)
				if diff := cmp.Diff(want, got, cmpOpts...); diff != "" {
					t.Fatalf("ScanReadings(From %d, To %d, After %+v) mismatch (-want +got):\n%s", from, to, after, diff)
				}
			}
		}
	}
}

func testLimit(t *testing.T, b Backend) {
	rpk := readingsKey("t", "d", 0, 0)
	apk := auditKey("t", "s", 0, 0)
	var events []model.AuditEvent
	for i := range 7 {
		events = append(events, model.AuditEvent{EventID: fmt.Sprintf("e%d", i), Stream: "s", TS: int64(i / 2), Actor: "u"})
	}
	commit(t, b, &store.Batch{Partitions: []store.PartitionWrite{
		{Key: rpk, Readings: rangeRows},
		{Key: apk, Events: events},
	}})
	for n := 1; n <= len(rangeRows)+1; n++ {
		got := scanReadings(t, b, rpk, everything, n)
		want := rangeRows[:min(n, len(rangeRows))]
		if diff := cmp.Diff(want, got, cmpOpts...); diff != "" {
			t.Errorf("ScanReadings limit %d mismatch (-want +got):\n%s", n, diff)
		}
		after := &store.Pos{TS: 10, Key: "a"}
		got = scanReadings(t, b, rpk, store.Range{From: 0, To: day, After: after}, n)
		want = rangeRows[2:min(2+n, len(rangeRows))]
		if diff := cmp.Diff(want, got, cmpOpts...); diff != "" {
			t.Errorf("ScanReadings after %+v limit %d mismatch (-want +got):\n%s", after, n, diff)
		}
	}
	for n := 1; n <= len(events)+1; n++ {
		got := scanAudit(t, b, apk, everything, n)
		if diff := cmp.Diff(events[:min(n, len(events))], got, cmpOpts...); diff != "" {
			t.Errorf("ScanAudit limit %d mismatch (-want +got):\n%s", n, diff)
		}
	}
}

func testOverwrite(t *testing.T, b Backend) {
	rpk := readingsKey("t", "d", 0, 0)
	apk := auditKey("t", "s", 0, 0)
	writes := []struct {
		reading model.ReadingRow
		event   model.AuditEvent
	}{
		{
			model.ReadingRow{TS: 10, Metric: "a", Value: 1, Seq: 5, HasSeq: true},
			model.AuditEvent{EventID: "e", Stream: "s", TS: 10, Actor: "first", Attributes: []byte(`{"n":1}`)},
		},
		{
			model.ReadingRow{TS: 10, Metric: "a", Value: 2},
			model.AuditEvent{EventID: "e", Stream: "s", TS: 10, Actor: "second", Action: "act"},
		},
		{
			model.ReadingRow{TS: 10, Metric: "a", Value: 3, Seq: 9, HasSeq: true},
			model.AuditEvent{EventID: "e", Stream: "s", TS: 10, Actor: "third", Outcome: "ok"},
		},
		{ // the metric's type changes: the last write wins, type and all
			model.ReadingRow{TS: 10, Metric: "a", Type: model.TypeString, Str: "idle"},
			model.AuditEvent{EventID: "e", Stream: "s", TS: 10, Actor: "fourth"},
		},
		{
			model.ReadingRow{TS: 10, Metric: "a", Type: model.TypeBool, Int: 1, Seq: 2, HasSeq: true},
			model.AuditEvent{EventID: "e", Stream: "s", TS: 10, Actor: "fifth"},
		},
		{
			model.ReadingRow{TS: 10, Metric: "a", Type: model.TypeInt, Int: -4},
			model.AuditEvent{EventID: "e", Stream: "s", TS: 10, Actor: "sixth"},
		},
		{
			model.ReadingRow{TS: 10, Metric: "a", Value: 2.5},
			model.AuditEvent{EventID: "e", Stream: "s", TS: 10, Actor: "seventh"},
		},
	}
	neighbour := model.ReadingRow{TS: 10, Metric: "b", Value: 42}
	commit(t, b, &store.Batch{Partitions: []store.PartitionWrite{{Key: rpk, Readings: []model.ReadingRow{neighbour}}}})
	for i, w := range writes {
		commit(t, b, &store.Batch{Partitions: []store.PartitionWrite{
			{Key: rpk, Readings: []model.ReadingRow{w.reading}},
			{Key: apk, Events: []model.AuditEvent{w.event}},
		}})
		got := scanReadings(t, b, rpk, everything, 100)
		if diff := cmp.Diff([]model.ReadingRow{w.reading, neighbour}, got, cmpOpts...); diff != "" {
			t.Errorf("readings after write %d mismatch (-want +got):\n%s", i, diff)
		}
		gotEv := scanAudit(t, b, apk, everything, 100)
		if diff := cmp.Diff([]model.AuditEvent{w.event}, gotEv, cmpOpts...); diff != "" {
			t.Errorf("events after write %d mismatch (-want +got):\n%s", i, diff)
		}
	}
}

// testOverwriteInBatch commits one batch holding a metric of one
// timestamp several times (two readings of one device and instant that the
// sink flushed together, e.g. a retry beside its original): the later row
// wins, type and all, as a later commit would, wherever the rows are in
// the batch. A store that writes the batch at one timestamp must not leave
// the choice to the values (Cassandra keeps the larger of two cells of
// equal timestamp, column by column: the later bool false beside an
// earlier int -4 read back as true).
func testOverwriteInBatch(t *testing.T, b Backend) {
	pk := readingsKey("t", "dup", 0, 0)
	rows := []model.ReadingRow{
		{TS: 20, Metric: "a", Type: model.TypeInt, Int: -4},
		{TS: 20, Metric: "c", Value: 3},
		{TS: 21, Metric: "a", Value: 1},
		{TS: 20, Metric: "a", Type: model.TypeBool, Int: 0, Seq: 7, HasSeq: true},
		{TS: 20, Metric: "c", Value: 1},
		{TS: 20, Metric: "b", Type: model.TypeString, Str: "z"},
		{TS: 20, Metric: "b", Type: model.TypeString, Str: "a"},
	}
	commit(t, b, &store.Batch{Partitions: []store.PartitionWrite{{Key: pk, Readings: rows}}})
	want := []model.ReadingRow{rows[3], rows[6], rows[4], rows[2]}
	if diff := cmp.Diff(want, scanReadings(t, b, pk, everything, 100), cmpOpts...); diff != "" {
		t.Errorf("readings of a batch with repeated cells (-want +got):\n%s", diff)
	}
}

// testPartitionIsolation writes one row to each of many partitions that
// differ in one component (tenants and series that are prefixes of one
// another among them) and checks that each reads back only its own.
func testPartitionIsolation(t *testing.T, b Backend) {
	const ts = 5 * day
	base := readingsKey("a", "dev", ts, 0)
	with := func(f func(*model.PartitionKey)) model.PartitionKey {
		pk := base
		f(&pk)
		return pk
	}
	keys := []model.PartitionKey{
		base,
		with(func(k *model.PartitionKey) { k.Tenant = "ab" }),
		with(func(k *model.PartitionKey) { k.Tenant = "a0" }),
		// Tenant "a" with series "dev" and tenant "ad" with series "ev" spell
		// the same letters: only a separator tells them apart.
		with(func(k *model.PartitionKey) { k.Tenant = "ad" }),
		with(func(k *model.PartitionKey) { k.Tenant = "ad"; k.Series = "ev" }),
		with(func(k *model.PartitionKey) { k.Series = "de" }),
		with(func(k *model.PartitionKey) { k.Series = "dev2" }),
		with(func(k *model.PartitionKey) { k.Series = "devv" }),
		with(func(k *model.PartitionKey) { k.Day++ }),
		with(func(k *model.PartitionKey) { k.Day-- }),
		with(func(k *model.PartitionKey) { k.Sub = 1<<24 | 1 }),
		with(func(k *model.PartitionKey) { k.Sub = 1<<24 | 1<<16 | 1 }),
		with(func(k *model.PartitionKey) { k.Sub = 1 }),
		with(func(k *model.PartitionKey) { k.Sub = 256 }),
		with(func(k *model.PartitionKey) { k.Kind = model.KindAudit }),
		with(func(k *model.PartitionKey) { k.Kind = model.KindAudit; k.Tenant = "ab" }),
		with(func(k *model.PartitionKey) { k.Kind = model.KindAudit; k.Series = "dev2" }),
	}
	// Each partition gets rows at the same clustering keys, told apart by
	// value, and its own catalogue entry.
	var batch store.Batch
	wantRows := make(map[model.PartitionKey][]model.ReadingRow)
	wantEvents := make(map[model.PartitionKey][]model.AuditEvent)
	for i, pk := range keys {
		pi := model.PartitionInfo{Key: pk, Rows: int64(i + 1), Bytes: int64(100 + i), MinTS: ts, MaxTS: ts + int64(i), State: "single"}
		batch.Catalogue = append(batch.Catalogue, pi)
		pw := store.PartitionWrite{Key: pk}
		if pk.Kind == model.KindReadings {
			pw.Readings = []model.ReadingRow{{TS: ts, Metric: "m", Value: float64(i)}, {TS: ts + 1, Metric: "m", Value: float64(i)}}
			wantRows[pk] = pw.Readings
		} else {
			pw.Events = []model.AuditEvent{{EventID: fmt.Sprintf("e%d", i), Stream: pk.Series, TS: ts, Actor: fmt.Sprint(i)}}
			wantEvents[pk] = pw.Events
		}
		batch.Partitions = append(batch.Partitions, pw)
	}
	commit(t, b, &batch)
	for i, pk := range keys {
		t.Run(pk.String(), func(t *testing.T) {
			if pk.Kind == model.KindReadings {
				got := scanReadings(t, b, pk, everything, 100)
				if diff := cmp.Diff(wantRows[pk], got, cmpOpts...); diff != "" {
					t.Errorf("ScanReadings mismatch (-want +got):\n%s", diff)
				}
			} else {
				got := scanAudit(t, b, pk, everything, 100)
				if diff := cmp.Diff(wantEvents[pk], got, cmpOpts...); diff != "" {
					t.Errorf("ScanAudit mismatch (-want +got):\n%s", diff)
				}
			}
			var want []model.PartitionInfo
			for _, pi := range batch.Catalogue {
				if pi.Key.SeriesDay() == pk.SeriesDay() {
					want = append(want, pi)
				}
			}
			slices.SortFunc(want, func(a, b model.PartitionInfo) int { return cmpInt(int64(a.Key.Sub), int64(b.Key.Sub)) })
			got := catalogue(t, b, pk.SeriesDay())
			if diff := cmp.Diff(want, got, cmpOpts...); diff != "" {
				t.Errorf("Catalogue(%v) of partition %d mismatch (-want +got):\n%s", pk.SeriesDay(), i, diff)
			}
		})
	}
}

func testAuditRoundTrip(t *testing.T, b Backend) {
	pk := auditKey("t", "billing", 3*day, 0)
	neg := auditKey("t", "billing", -1, 0)
	events := []model.AuditEvent{
		{EventID: "a", Stream: "billing", TS: 3 * day, Actor: "alice", Action: "login", Resource: "/", Outcome: "ok"},
		{EventID: "b", Stream: "billing", TS: 3 * day, Actor: "bob", Action: "delete", Resource: "invoice/7", Outcome: "denied",
			Attributes: []byte(`{"ip":"10.0.0.1","n":[1,2]}`)},
		{EventID: "b1", Stream: "billing", TS: 3 * day, Actor: "ünïcödé", Action: "x"},
		{EventID: "0", Stream: "billing", TS: 3*day + 1, Attributes: []byte(`{}`)},
		{EventID: "evt-long-id-0123456789abcdef", Stream: "billing", TS: 4*day - 1, Actor: "a", Action: "b", Resource: "c", Outcome: "d"},
	}
	negEvents := []model.AuditEvent{
		{EventID: "x", Stream: "billing", TS: -day, Actor: "old"},
		{EventID: "y", Stream: "billing", TS: -1, Outcome: "late", Attributes: []byte(`{"k":null}`)},
	}
	commit(t, b, &store.Batch{Partitions: []store.PartitionWrite{
		{Key: pk, Events: reversed(events)},
		{Key: neg, Events: reversed(negEvents)},
	}})
	tests := []struct {
		name string
		pk   model.PartitionKey
		rng  store.Range
		want []model.AuditEvent
	}{
		{"all", pk, everything, sortEvents(events)},
		{"day before the epoch", neg, everything, negEvents},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := scanAudit(t, b, tc.pk, tc.rng, 100)
			if diff := cmp.Diff(tc.want, got, cmpOpts...); diff != "" {
				t.Errorf("ScanAudit mismatch (-want +got):\n%s", diff)
			}
			for i, e := range got {
				if (e.Attributes == nil) != (tc.want[i].Attributes == nil) {
					t.Errorf("event %q: attributes nil = %v, want %v", e.EventID, e.Attributes == nil, tc.want[i].Attributes == nil)
				}
			}
		})
	}
}

func testAuditRange(t *testing.T, b Backend) {
	pk := auditKey("t", "s", 0, 0)
	events := []model.AuditEvent{
		{EventID: "a", Stream: "s", TS: 10},
		{EventID: "b", Stream: "s", TS: 10},
		{EventID: "a", Stream: "s", TS: 20},
		{EventID: "c", Stream: "s", TS: 30},
	}
	commit(t, b, &store.Batch{Partitions: []store.PartitionWrite{{Key: pk, Events: events}}})
	tests := []struct {
		name string
		rng  store.Range
		want []model.AuditEvent
	}{
		{"to is exclusive", store.Range{From: 0, To: 20}, events[:2]},
		{"from is inclusive", store.Range{From: 20, To: day}, events[2:]},
		{"after an event", store.Range{From: 0, To: day, After: &store.Pos{TS: 10, Key: "a"}}, events[1:]},
		{"after a prefix of an id", store.Range{From: 0, To: day, After: &store.Pos{TS: 10, Key: ""}}, events},
		{"after every id", store.Range{From: 0, To: day, After: &store.Pos{TS: 10, Key: "\xff"}}, events[2:]},
		{"after the last", store.Range{From: 0, To: day, After: &store.Pos{TS: 30, Key: "c"}}, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := scanAudit(t, b, pk, tc.rng, 100)
			if diff := cmp.Diff(tc.want, got, cmpOpts...); diff != "" {
				t.Errorf("ScanAudit(%+v) mismatch (-want +got):\n%s", tc.rng, diff)
			}
		})
	}
}

func testAuditSeen(t *testing.T, b Backend) {
	const ts = 9*day + 500
	d := model.DayOf(ts)
	commit(t, b, &store.Batch{Partitions: []store.PartitionWrite{
		{Key: auditKey("a", "s", ts, 0), Events: []model.AuditEvent{
			{EventID: "x", Stream: "s", TS: ts},
			{EventID: "bx", Stream: "s", TS: ts + 1},
		}},
		{Key: auditKey("a", "other", ts, 1<<24|1), Events: []model.AuditEvent{
			{EventID: "y", Stream: "other", TS: ts},
		}},
	}})
	tests := []struct {
		name string
		id   store.AuditID
		want bool
	}{
		{"committed", store.AuditID{Tenant: "a", Day: d, EventID: "x"}, true},
		{"committed in a split partition of another stream", store.AuditID{Tenant: "a", Day: d, EventID: "y"}, true},
		{"committed with a prefix id", store.AuditID{Tenant: "a", Day: d, EventID: "bx"}, true},
		{"unknown id", store.AuditID{Tenant: "a", Day: d, EventID: "z"}, false},
		{"empty id", store.AuditID{Tenant: "a", Day: d, EventID: ""}, false},
		{"id extending a committed one", store.AuditID{Tenant: "a", Day: d, EventID: "x1"}, false},
		{"prefix of a committed id", store.AuditID{Tenant: "a", Day: d, EventID: "b"}, false},
		{"other tenant", store.AuditID{Tenant: "ab", Day: d, EventID: "x"}, false},
		{"tenant plus id prefix", store.AuditID{Tenant: "ab", Day: d, EventID: "x"}, false},
		{"prefix tenant", store.AuditID{Tenant: "", Day: d, EventID: "x"}, false},
		{"next day", store.AuditID{Tenant: "a", Day: d + 1, EventID: "x"}, false},
		{"previous day", store.AuditID{Tenant: "a", Day: d - 1, EventID: "x"}, false},
		{"committed, asked again", store.AuditID{Tenant: "a", Day: d, EventID: "x"}, true},
		{"unknown, asked again", store.AuditID{Tenant: "a", Day: d, EventID: "z"}, false},
	}
	ids := make([]store.AuditID, len(tests))
	want := make([]bool, len(tests))
	for i, tc := range tests {
		ids[i], want[i] = tc.id, tc.want
	}
	got, err := b.AuditSeen(t.Context(), ids)
	if err != nil {
		t.Fatalf("AuditSeen: %v", err)
	}
	if len(got) != len(tests) {
		t.Fatalf("AuditSeen returned %d answers for %d ids", len(got), len(tests))
	}
	for i, tc := range tests {
		if got[i] != tc.want {
			t.Errorf("%s: AuditSeen(%+v) = %v, want %v", tc.name, tc.id, got[i], tc.want)
		}
	}
	// Tenant "ab" and id "x" must not be confused with tenant "a" and id "bx".
	commit(t, b, &store.Batch{Partitions: []store.PartitionWrite{
		{Key: auditKey("ab", "s", ts, 0), Events: []model.AuditEvent{{EventID: "q", Stream: "s", TS: ts}}},
	}})
	got, err = b.AuditSeen(t.Context(), []store.AuditID{{Tenant: "a", Day: d, EventID: "bq"}, {Tenant: "ab", Day: d, EventID: "q"}})
	if err != nil {
		t.Fatalf("AuditSeen: %v", err)
	}
	if diff := cmp.Diff([]bool{false, true}, got); diff != "" {
		t.Errorf("AuditSeen of tenant/id prefixes mismatch (-want +got):\n%s", diff)
	}
	// The smallest and the largest key asked for are stored: the bounds of
	// a lookup in key order.
	got, err = b.AuditSeen(t.Context(), []store.AuditID{
		{Tenant: "a", Day: d, EventID: "x"}, {Tenant: "a", Day: d, EventID: "c"}, {Tenant: "a", Day: d, EventID: "bx"},
	})
	if err != nil {
		t.Fatalf("AuditSeen: %v", err)
	}
	if diff := cmp.Diff([]bool{true, false, true}, got); diff != "" {
		t.Errorf("AuditSeen with stored ids at both ends (-want +got):\n%s", diff)
	}
	got, err = b.AuditSeen(t.Context(), nil)
	if err != nil || len(got) != 0 {
		t.Errorf("AuditSeen(nil) = %v, %v; want no answers and no error", got, err)
	}
}

func testCatalogue(t *testing.T, b Backend) {
	sd := model.SeriesDay{Kind: model.KindReadings, Tenant: "t", Series: "dev", Day: -3}
	entry := func(sub uint32, rows int64, closed bool, state string) model.PartitionInfo {
		return model.PartitionInfo{Key: sd.Partition(sub), Rows: rows, Bytes: rows * 40, MinTS: sd.Day.Start() - 5000, MaxTS: sd.Day.End() + int64(sub%1000), State: state, Closed: closed}
	}
	subs := []uint32{0, 1<<24 | 1, 1<<24 | 2, 1<<24 | 1<<16 | 1, 1<<24 | 255<<16 | 65535, 1<<24 | 256}
	var first []model.PartitionInfo
	for i, sub := range subs {
		state := "split"
		if sub == 0 {
			state = "single"
		}
		e := entry(sub, int64(i+1), i%2 == 0, state)
		e.Ahead = i%3 == 1 // a claim, not exact: kept as such
		first = append(first, e)
	}
	shuffled := []model.PartitionInfo{first[3], first[0], first[5], first[1], first[4], first[2]}
	commit(t, b, &store.Batch{Catalogue: shuffled})
	sorted := slices.Clone(first)
	slices.SortFunc(sorted, func(a, b model.PartitionInfo) int { return cmpInt(int64(a.Key.Sub), int64(b.Key.Sub)) })
	if diff := cmp.Diff(sorted, catalogue(t, b, sd), cmpOpts...); diff != "" {
		t.Errorf("Catalogue mismatch (-want +got):\n%s", diff)
	}

	// A later commit overwrites entries, whatever changed in them.
	updated := entry(1<<24|1, 999, true, "split")
	updated.MinTS, updated.MaxTS = math.MinInt64, math.MaxInt64
	zero := model.PartitionInfo{Key: sd.Partition(0)}
	commit(t, b, &store.Batch{Catalogue: []model.PartitionInfo{updated, zero}})
	for i := range sorted {
		switch sorted[i].Key {
		case updated.Key:
			sorted[i] = updated
		case zero.Key:
			sorted[i] = zero
		}
	}
	if diff := cmp.Diff(sorted, catalogue(t, b, sd), cmpOpts...); diff != "" {
		t.Errorf("Catalogue after overwrite mismatch (-want +got):\n%s", diff)
	}

	tests := []struct {
		name string
		sd   model.SeriesDay
	}{
		{"other day", model.SeriesDay{Kind: sd.Kind, Tenant: sd.Tenant, Series: sd.Series, Day: sd.Day + 1}},
		{"other kind", model.SeriesDay{Kind: model.KindAudit, Tenant: sd.Tenant, Series: sd.Series, Day: sd.Day}},
		{"prefix series", model.SeriesDay{Kind: sd.Kind, Tenant: sd.Tenant, Series: "de", Day: sd.Day}},
		{"longer series", model.SeriesDay{Kind: sd.Kind, Tenant: sd.Tenant, Series: "dev2", Day: sd.Day}},
		{"longer tenant", model.SeriesDay{Kind: sd.Kind, Tenant: "tt", Series: sd.Series, Day: sd.Day}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := catalogue(t, b, tc.sd); len(got) != 0 {
				t.Errorf("Catalogue(%v) = %v, want none", tc.sd, got)
			}
		})
	}
}

func testEmptyBatch(t *testing.T, b Backend) {
	commit(t, b, &store.Batch{})
	commit(t, b, &store.Batch{Partitions: []store.PartitionWrite{{Key: readingsKey("t", "d", 0, 0)}}})
	if got := scanReadings(t, b, readingsKey("t", "d", 0, 0), everything, 10); len(got) != 0 {
		t.Errorf("ScanReadings after empty commits = %v, want none", got)
	}
}

// testAtomicBatch commits batches that each add one row to many partitions
// and move a catalogue entry, while a reader checks that it never sees part
// of a batch: once it has seen batch k anywhere, every partition it reads
// afterwards holds batch k.
func testAtomicBatch(t *testing.T, b Backend) {
	const (
		parts   = 12
		batches = 40
	)
	key := func(i int) model.PartitionKey { return readingsKey("t", fmt.Sprintf("s%02d", i), 0, 0) }
	marker := key(parts - 1)
	var wg sync.WaitGroup
	t.Cleanup(wg.Wait) // runs before the store's cleanup closes it
	errc := make(chan error, 1)
	stop := make(chan struct{})
	wg.Go(func() {
		defer close(stop)
		for k := int64(1); k <= batches; k++ {
			var batch store.Batch
			for i := range parts {
				batch.Partitions = append(batch.Partitions, store.PartitionWrite{Key: key(i),
					Readings: []model.ReadingRow{{TS: k, Metric: "m", Value: float64(k)}}})
			}
			batch.Catalogue = []model.PartitionInfo{{Key: marker, Rows: k, MinTS: 1, MaxTS: k, State: "single"}}
			if err := b.Commit(context.Background(), &batch); err != nil {
				errc <- err
				return
			}
		}
	})
	// check reads a partition and returns the newest batch it holds,
	// failing unless it holds every batch up to it.
	check := func(pk model.PartitionKey, atLeast int64) int64 {
		t.Helper()
		rows := scanReadings(t, b, pk, everything, batches+1)
		for i, r := range rows {
			if r.TS != int64(i+1) {
				t.Fatalf("partition %v holds batches %v: a gap", pk, rows)
			}
		}
		n := int64(len(rows))
		if n < atLeast {
			t.Fatalf("partition %v holds %d batches after batch %d was seen elsewhere", pk, n, atLeast)
		}
		return n
	}
	for done := false; !done; {
		select {
		case <-stop:
			done = true
		default:
		}
		var seen int64
		if cat := catalogue(t, b, marker.SeriesDay()); len(cat) > 0 {
			seen = cat[0].MaxTS
		}
		// Rows read after the catalogue entry of batch k hold batch k.
		seen = check(marker, seen)
		for i := range parts - 1 {
			check(key(i), seen)
		}
	}
	wg.Wait()
	select {
	case err := <-errc:
		t.Fatalf("Commit: %v", err)
	default:
	}
	for i := range parts {
		if n := check(key(i), batches); n != batches {
			t.Errorf("partition %v holds %d batches, want %d", key(i), n, batches)
		}
	}
}

// testOrderedCommit commits batches that each add one row to many
// partitions and move a catalogue entry, while a reader checks that once the
// catalogue shows batch k, every partition holds batch k: rows are written
// before the catalogue entry that counts them.
func testOrderedCommit(t *testing.T, b Backend) {
	const (
		parts   = 12
		batches = 40
	)
	key := func(i int) model.PartitionKey { return readingsKey("t", fmt.Sprintf("s%02d", i), 0, 0) }
	marker := key(parts - 1)
	var wg sync.WaitGroup
	t.Cleanup(wg.Wait)
	errc := make(chan error, 1)
	stop := make(chan struct{})
	wg.Go(func() {
		defer close(stop)
		for k := int64(1); k <= batches; k++ {
			var batch store.Batch
			for i := range parts {
				batch.Partitions = append(batch.Partitions, store.PartitionWrite{Key: key(i),
					Readings: []model.ReadingRow{{TS: k, Metric: "m", Value: float64(k)}}})
			}
			batch.Catalogue = []model.PartitionInfo{{Key: marker, Rows: k, MinTS: 1, MaxTS: k, State: "single"}}
			if err := b.Commit(context.Background(), &batch); err != nil {
				errc <- err
				return
			}
		}
	})
	check := func(pk model.PartitionKey, atLeast int64) int64 {
		t.Helper()
		rows := scanReadings(t, b, pk, everything, batches+1)
		for i, r := range rows {
			if r.TS != int64(i+1) {
				t.Fatalf("partition %v holds batches %v: a gap", pk, rows)
			}
		}
		n := int64(len(rows))
		if n < atLeast {
			t.Fatalf("partition %v holds %d batches after the catalogue showed batch %d", pk, n, atLeast)
		}
		return n
	}
	for done := false; !done; {
		select {
		case <-stop:
			done = true
		default:
		}
		var seen int64
		if cat := catalogue(t, b, marker.SeriesDay()); len(cat) > 0 {
			seen = cat[0].MaxTS
		}
		for i := range parts {
			check(key(i), seen)
		}
	}
	wg.Wait()
	select {
	case err := <-errc:
		t.Fatalf("Commit: %v", err)
	default:
	}
	for i := range parts {
		if n := check(key(i), batches); n != batches {
			t.Errorf("partition %v holds %d batches, want %d", key(i), n, batches)
		}
	}
}

func testCancelledCommit(t *testing.T, b Backend) {
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	pk := readingsKey("t", "d", 0, 0)
	apk := auditKey("t", "s", 0, 0)
	batch := &store.Batch{
		Partitions: []store.PartitionWrite{
			{Key: pk, Readings: []model.ReadingRow{{TS: 1, Metric: "m", Value: 1}}},
			{Key: apk, Events: []model.AuditEvent{{EventID: "e", Stream: "s", TS: 1}}},
		},
		Catalogue: []model.PartitionInfo{{Key: pk, Rows: 1, MinTS: 1, MaxTS: 1, State: "single"}},
	}
	err := b.Commit(ctx, batch)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Commit with a cancelled context = %v, want an error wrapping context.Canceled", err)
	}
	if got := scanReadings(t, b, pk, everything, 10); len(got) != 0 {
		t.Errorf("rows of a cancelled commit are stored: %v", got)
	}
	if got := scanAudit(t, b, apk, everything, 10); len(got) != 0 {
		t.Errorf("events of a cancelled commit are stored: %v", got)
	}
	if got := catalogue(t, b, pk.SeriesDay()); len(got) != 0 {
		t.Errorf("catalogue of a cancelled commit is stored: %v", got)
	}
	seen, err := b.AuditSeen(t.Context(), []store.AuditID{{Tenant: "t", Day: 0, EventID: "e"}})
	if err != nil {
		t.Fatalf("AuditSeen: %v", err)
	}
	if seen[0] {
		t.Errorf("AuditSeen finds the event of a cancelled commit")
	}
}

// testEachPartition: the catalogue of a tenant's kind on a day, every
// series and sub-bucket of it, and nothing of another tenant, kind or day.
func testEachPartition(t *testing.T, b Backend) {
	tenant := "each-" + strings.NewReplacer("/", "-", " ", "-").Replace(t.Name())
	d := model.Day(-5)
	var want []model.PartitionInfo
	var batch store.Batch
	for i := range 150 {
		sd := model.SeriesDay{Kind: model.KindReadings, Tenant: tenant, Series: fmt.Sprintf("dev-%03d", i), Day: d}
		for _, sub := range []uint32{0, 1<<24 | 1} {
			pi := model.PartitionInfo{Key: sd.Partition(sub), Rows: int64(i + 1), Bytes: int64(40 * (i + 1)), MinTS: d.Start(), MaxTS: d.Start() + int64(i), State: "split", Closed: sub == 0, Ahead: i%7 == 0 && sub != 0}
			want = append(want, pi)
			batch.Catalogue = append(batch.Catalogue, pi)
		}
	}
	// Neighbours that must not be listed.
	for _, sd := range []model.SeriesDay{
		{Kind: model.KindAudit, Tenant: tenant, Series: "dev-000", Day: d},
		{Kind: model.KindReadings, Tenant: tenant + "x", Series: "dev-000", Day: d},
		{Kind: model.KindReadings, Tenant: tenant, Series: "dev-000", Day: d + 1},
	} {
		batch.Catalogue = append(batch.Catalogue, model.PartitionInfo{Key: sd.Partition(0), Rows: 1, State: "single"})
	}
	commit(t, b, &batch)
	var got []model.PartitionInfo
	if err := b.EachPartition(t.Context(), tenant, model.KindReadings, d, func(pi model.PartitionInfo) error {
		got = append(got, pi)
		return nil
	}); err != nil {
		t.Fatalf("EachPartition: %v", err)
	}
	key := func(a, b model.PartitionInfo) int {
		if c := strings.Compare(a.Key.Series, b.Key.Series); c != 0 {
			return c
		}
		return cmpInt(int64(a.Key.Sub), int64(b.Key.Sub))
	}
	slices.SortFunc(got, key)
	slices.SortFunc(want, key)
	if diff := cmp.Diff(want, got, cmpOpts...); diff != "" {
		t.Errorf("EachPartition mismatch (-want +got):\n%s", diff)
	}
	// An error from fn stops the listing and is returned.
	stop := errors.New("enough")
	n := 0
	err := b.EachPartition(t.Context(), tenant, model.KindReadings, d, func(model.PartitionInfo) error {
		n++
		return stop
	})
	if !errors.Is(err, stop) || n != 1 {
		t.Errorf("EachPartition with fn failing: %v after %d calls, want %v after 1", err, n, stop)
	}
}

// testEachSeries: the series of a tenant's kind on a day, each once however
// many partitions it has, in byte order, and none of another tenant, kind
// or day; fn's error and the end of ctx stop the listing.
func testEachSeries(t *testing.T, b Backend) {
	tenant := "series-" + strings.NewReplacer("/", "-", " ", "-").Replace(t.Name())
	d := model.Day(-3)
	// Names whose byte order differs from a natural or case-folded one.
	want := []string{"Pump-9", "pump", "pump-1", "pump-10", "pump-2", "pump-20", "pump~", "zone/7", "\u00e9tuve", "\u6c34\u6cf5"}
	var batch store.Batch
	for i, series := range want {
		sd := model.SeriesDay{Kind: model.KindReadings, Tenant: tenant, Series: series, Day: d}
		// Up to four partitions: two writers' single ones and split ones.
		for _, sub := range []uint32{0, 1 << 16, 1<<24 | 1, 1<<24 | 1<<16 | 2}[:1+i%4] {
			batch.Catalogue = append(batch.Catalogue, model.PartitionInfo{Key: sd.Partition(sub), Rows: 1, State: "split"})
		}
	}
	for _, sd := range []model.SeriesDay{
		{Kind: model.KindAudit, Tenant: tenant, Series: "stream-a", Day: d},
		{Kind: model.KindReadings, Tenant: tenant + "x", Series: "pump-3", Day: d},
		{Kind: model.KindReadings, Tenant: tenant[:len(tenant)-1], Series: "pump-4", Day: d},
		{Kind: model.KindReadings, Tenant: tenant, Series: "pump-5", Day: d - 1},
		{Kind: model.KindReadings, Tenant: tenant, Series: "pump-6", Day: d + 1},
	} {
		batch.Catalogue = append(batch.Catalogue, model.PartitionInfo{Key: sd.Partition(0), Rows: 1, State: "single"})
	}
	commit(t, b, &batch)
	list := func(ctx context.Context, kind model.Kind, day model.Day, fn func(string) error) ([]string, error) {
		var got []string
		err := b.EachSeries(ctx, tenant, kind, day, func(s string) error {
			got = append(got, s)
			return fn(s)
		})
		return got, err
	}
	none := func(string) error { return nil }
	got, err := list(t.Context(), model.KindReadings, d, none)
	if err != nil {
		t.Fatalf("EachSeries: %v", err)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("EachSeries mismatch (-want +got):\n%s", diff)
	}
	if got, err := list(t.Context(), model.KindAudit, d, none); err != nil || !slices.Equal(got, []string{"stream-a"}) {
		t.Errorf("EachSeries of the audit streams: %q, %v; want [stream-a]", got, err)
	}
	if got, err := list(t.Context(), model.KindReadings, d-2, none); err != nil || len(got) != 0 {
		t.Errorf("EachSeries of an empty day: %q, %v; want nothing", got, err)
	}

	// An error from fn stops the listing and is returned.
	stop := errors.New("enough")
	got, err = list(t.Context(), model.KindReadings, d, func(string) error { return stop })
	if !errors.Is(err, stop) || len(got) != 1 {
		t.Errorf("EachSeries with fn failing: %v after %q, want %v after one series", err, got, stop)
	}
	// So does the end of ctx, even in the middle of a series' partitions.
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	got, err = list(ctx, model.KindReadings, d, func(s string) error {
		if s == "pump-1" {
			cancel()
		}
		return nil
	})
	if !errors.Is(err, context.Canceled) || !slices.Equal(got, want[:3]) {
		t.Errorf("EachSeries cancelled at pump-1: %v after %q, want %v after %q", err, got, context.Canceled, want[:3])
	}
}

// CatalogueLoader is a Backend that also reads many series-days'
// catalogues at once (sink.CatalogueLoader).
type CatalogueLoader interface {
	Backend
	Catalogues(ctx context.Context, sds []model.SeriesDay) ([][]model.PartitionInfo, error)
}

// CataloguesMatch checks that Catalogues returns, for each of sds, what
// Catalogue returns for it alone, and returns how many entries it read.
func CataloguesMatch(t *testing.T, b CatalogueLoader, sds []model.SeriesDay) int {
	t.Helper()
	got, err := b.Catalogues(t.Context(), sds)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(sds) {
		t.Fatalf("Catalogues returned %d lists for %d series-days", len(got), len(sds))
	}
	entries := 0
	for i, sd := range sds {
		want := catalogue(t, b, sd)
		if diff := cmp.Diff(want, got[i], cmp.Comparer(func(a, b []model.PartitionInfo) bool { return len(a) == 0 && len(b) == 0 || cmp.Equal(a, b) })); diff != "" {
			t.Errorf("%v: Catalogues differs from Catalogue (-want +got):\n%s", sd, diff)
		}
		entries += len(got[i])
	}
	return entries
}

// CatalogueFixture returns a batch of catalogue entries of tenant's series
// on day, and the series-days of series in order: every fifth series-day
// has no entry, the others one to three split partitions with counts and
// ranges that differ by series. Tests of Catalogues add their own edge
// cases to it.
func CatalogueFixture(tenant string, day model.Day, series []string) (store.Batch, []model.SeriesDay) {
	var b store.Batch
	var sds []model.SeriesDay
	for i, s := range series {
		sd := model.SeriesDay{Kind: model.KindReadings, Tenant: tenant, Series: s, Day: day}
		sds = append(sds, sd)
		if i%5 == 4 {
			continue // no entry
		}
		for n := range 1 + i%3 {
			b.Catalogue = append(b.Catalogue, model.PartitionInfo{Key: sd.Partition(uint32(1<<24 | n)), Rows: int64(10 + i),
				Bytes: int64(100 * i), MinTS: day.Start() + int64(i), MaxTS: day.Start() + int64(1000+i), State: "split", Closed: n < i%3})
		}
	}
	return b, sds
}
