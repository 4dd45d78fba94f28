package reader_test

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/sluicehq/sluice/internal/buckets"
	"github.com/sluicehq/sluice/internal/model"
	"github.com/sluicehq/sluice/internal/reader"
	"github.com/sluicehq/sluice/internal/store"
	"github.com/sluicehq/sluice/internal/store/pebblestore"
)

const (
	tenant = "acme"
	device = "dev-1"
	stream = "billing"
	day    = model.MillisPerDay
)

var cmpOpts = cmp.Options{cmpopts.EquateEmpty()}

func openStore(t testing.TB) *pebblestore.Store {
	t.Helper()
	st, err := pebblestore.Open(t.TempDir(), pebblestore.Options{CacheBytes: 1 << 20}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatalf("open store: %v", err)
	}
	t.Cleanup(func() {
		if err := st.Close(); err != nil {
			t.Errorf("close store: %v", err)
		}
	})
	return st
}

// part is one partition's content. Its catalogue entry is computed from it.
type part struct {
	sub      uint32
	readings []model.ReadingRow
	events   []model.AuditEvent
}

func split(n int) uint32 { return buckets.SubID(0, n) }

// write commits parts of the device's (or stream's) day, one batch with
// their catalogue entries. Every row's ts must be inside the day.
func write(t testing.TB, st *pebblestore.Store, d model.Day, parts ...part) {
	t.Helper()
	var b store.Batch
	for _, p := range parts {
		kind, series := model.KindReadings, device
		if len(p.events) > 0 {
			kind, series = model.KindAudit, stream
		}
		pk := model.PartitionKey{Kind: kind, Tenant: tenant, Series: series, Day: d, Sub: p.sub}
		pi := model.PartitionInfo{Key: pk, State: buckets.StateSplit}
		if p.sub == 0 {
			pi.State = buckets.StateSingle
		}
		note := func(ts int64) {
			if model.DayOf(ts) != d {
				t.Fatalf("row at %d is not in day %v", ts, d)
			}
			if pi.Rows == 0 || ts < pi.MinTS {
				pi.MinTS = ts
			}
			if pi.Rows == 0 || ts > pi.MaxTS {
				pi.MaxTS = ts
			}
			pi.Rows++
		}
		for _, r := range p.readings {
			note(r.TS)
			pi.Bytes += r.Size()
		}
		for _, e := range p.events {
			note(e.TS)
			pi.Bytes += e.Size()
		}
		b.Partitions = append(b.Partitions, store.PartitionWrite{Key: pk, Readings: p.readings, Events: p.events})
		b.Catalogue = append(b.Catalogue, pi)
	}
	if err := st.Commit(t.Context(), &b); err != nil {
		t.Fatalf("commit: %v", err)
	}
}

func row(ts int64, metric string, v float64) model.ReadingRow {
	return model.ReadingRow{TS: ts, Metric: metric, Value: v}
}

// model of the store: every partition written, for computing expectations.
type dataset struct {
	parts map[model.Day][]part
}

func (ds *dataset) add(d model.Day, p part) {
	if ds.parts == nil {
		ds.parts = make(map[model.Day][]part)
	}
	ds.parts[d] = append(ds.parts[d], p)
}

func (ds *dataset) commit(t *testing.T, st *pebblestore.Store) {
	t.Helper()
	for d, ps := range ds.parts {
		write(t, st, d, ps...)
	}
}

type rkey struct {
	ts     int64
	metric string
}

// readings is what a read of [from, to) must return: one row per (ts,
// metric), from the partition with the highest sub, grouped by ts.
func (ds *dataset) readings(from, to int64) []model.Reading {
	best := make(map[rkey]model.ReadingRow)
	bestSub := make(map[rkey]uint32)
	for _, ps := range ds.parts {
		for _, p := range ps {
			for _, r := range p.readings {
				k := rkey{r.TS, r.Metric}
				if r.TS < from || r.TS >= to {
					continue
				}
				if s, ok := bestSub[k]; !ok || p.sub > s {
					best[k], bestSub[k] = r, p.sub
				}
			}
		}
	}
	keys := slices.SortedFunc(maps.Keys(best), func(a, b rkey) int {
		if a.ts != b.ts {
			return cmpInt(a.ts, b.ts)
		}
		return strings.Compare(a.metric, b.metric)
	})
	var out []model.Reading
	for _, k := range keys {
		r := best[k]
		if n := len(out); n == 0 || out[n-1].TS != r.TS {
			out = append(out, model.Reading{DeviceID: device, TS: r.TS})
		}
		last := &out[len(out)-1]
		last.Metrics = append(last.Metrics, model.Metric{Name: r.Metric, Value: r.Value})
		if r.HasSeq {
			last.Seq, last.HasSeq = r.Seq, true
		}
	}
	return out
}

func (ds *dataset) events(from, to int64) []model.AuditEvent {
	best := make(map[rkey]model.AuditEvent)
	bestSub := make(map[rkey]uint32)
	for _, ps := range ds.parts {
		for _, p := range ps {
			for _, e := range p.events {
				k := rkey{e.TS, e.EventID}
				if e.TS < from || e.TS >= to {
					continue
				}
				if s, ok := bestSub[k]; !ok || p.sub > s {
					best[k], bestSub[k] = e, p.sub
				}
			}
		}
	}
	keys := slices.SortedFunc(maps.Keys(best), func(a, b rkey) int {
		if a.ts != b.ts {
			return cmpInt(a.ts, b.ts)
		}
		return strings.Compare(a.metric, b.metric)
	})
	var out []model.AuditEvent
	for _, k := range keys {
		out = append(out, best[k])
	}
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

// randomDataset spreads readings and events over three days and several
// overlapping partitions per day, with duplicates of the same key in
// different partitions. A reading's cells are in one partition, as the
// planner places them, but a retry may put the same reading in a newer one.
func randomDataset(seed uint64, perPart int) *dataset {
	rng := rand.New(rand.NewPCG(seed, 1))
	ds := &dataset{}
	metrics := []string{"a", "b", "c", "humidity", "temp"}
	subs := []uint32{0, split(1), split(2), buckets.SubID(1, 1)}
	for _, d := range []model.Day{-1, 0, 1} {
		nparts := 1 + rng.IntN(len(subs))
		for _, sub := range subs[:nparts] {
			p := part{sub: sub}
			seenTS := make(map[int64]bool)
			for range perPart {
				ts := d.Start() + rng.Int64N(int64(perPart)*3)
				if rng.IntN(10) == 0 {
					ts = d.End() - 1 - rng.Int64N(3)
				}
				if seenTS[ts] {
					continue
				}
				seenTS[ts] = true
				n := 1 + rng.IntN(3)
				seq, hasSeq := rng.Int64N(100), rng.IntN(2) == 0
				for _, m := range metrics[:n] {
					p.readings = append(p.readings, model.ReadingRow{TS: ts, Metric: m, Value: float64(rng.IntN(1000)), Seq: seq, HasSeq: hasSeq})
				}
			}
			ds.add(d, p)
			var ev part
			ev.sub = sub
			for range perPart {
				ts := d.Start() + rng.Int64N(int64(perPart))
				ev.events = append(ev.events, model.AuditEvent{EventID: fmt.Sprintf("e%d", rng.IntN(perPart)), Stream: stream, TS: ts,
					Actor: fmt.Sprint("actor-", sub), Action: "a", Outcome: "ok"})
			}
			ds.add(d, ev)
		}
	}
	return ds
}

func readAll(t *testing.T, st reader.Store, q reader.Query) []model.Reading {
	t.Helper()
	q.Limit = reader.MaxLimit
	got, cursor, err := reader.Readings(t.Context(), st, q)
	if err != nil {
		t.Fatalf("Readings(%+v): %v", q, err)
	}
	if cursor != "" {
		t.Fatalf("Readings(%+v) of everything returned a cursor", q)
	}
	return got
}

// pageReadings follows cursors from q to the end and returns the pages.
func pageReadings(t *testing.T, st reader.Store, q reader.Query) [][]model.Reading {
	t.Helper()
	var pages [][]model.Reading
	for i := 0; ; i++ {
		page, cursor, err := reader.Readings(t.Context(), st, q)
		if err != nil {
			t.Fatalf("page %d of %+v: %v", i, q, err)
		}
		if len(page) > q.Limit {
			t.Fatalf("page %d has %d readings, limit %d", i, len(page), q.Limit)
		}
		if cursor != "" && len(page) != q.Limit {
			t.Fatalf("page %d has %d readings and a cursor: not full", i, len(page))
		}
		pages = append(pages, page)
		if cursor == "" {
			return pages
		}
		if i > 100_000 {
			t.Fatalf("paging does not end")
		}
		q.Cursor = cursor
	}
}

func pageAudit(t *testing.T, st reader.Store, q reader.Query) [][]model.AuditEvent {
	t.Helper()
	var pages [][]model.AuditEvent
	for i := 0; ; i++ {
		page, cursor, err := reader.Audit(t.Context(), st, q)
		if err != nil {
			t.Fatalf("page %d of %+v: %v", i, q, err)
		}
		if len(page) > q.Limit || (cursor != "" && len(page) != q.Limit) {
			t.Fatalf("page %d has %d events (cursor %q), limit %d", i, len(page), cursor, q.Limit)
		}
		pages = append(pages, page)
		if cursor == "" {
			return pages
		}
		if i > 100_000 {
			t.Fatalf("paging does not end")
		}
		q.Cursor = cursor
	}
}

func TestMergeOverlappingPartitions(t *testing.T) {
	st := openStore(t)
	ds := &dataset{}
	// Three partitions of day 0 whose times interleave, a reading whose
	// metrics a retry spread over two partitions, and a partition of day 1.
	ds.add(0, part{sub: 0, readings: []model.ReadingRow{row(0, "a", 1), row(3, "a", 4), row(6, "a", 7), row(10, "a", 10), row(10, "b", 11)}})
	ds.add(0, part{sub: split(1), readings: []model.ReadingRow{row(1, "a", 2), row(4, "a", 5), row(7, "a", 8), row(10, "c", 12)}})
	ds.add(0, part{sub: split(2), readings: []model.ReadingRow{row(2, "a", 3), row(5, "a", 6), row(8, "a", 9), row(day-1, "z", 13)}})
	ds.add(1, part{sub: 0, readings: []model.ReadingRow{row(day, "a", 14), row(day+5, "a", 15)}})
	ds.add(1, part{sub: buckets.SubID(1, 1), readings: []model.ReadingRow{row(day+1, "b", 16)}})
	ds.commit(t, st)

	tests := []struct {
		name     string
		from, to int64
	}{
		{"both days", 0, 2 * day},
		{"one day", 0, day},
		{"inside a day", 3, 8},
		{"across the boundary", day - 1, day + 2},
		{"wider than the data", -5 * day, 5 * day},
		{"empty part of a day", 11, 1000},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := readAll(t, st, reader.Query{Tenant: tenant, Series: device, From: tc.from, To: tc.to})
			if diff := cmp.Diff(ds.readings(tc.from, tc.to), got, cmpOpts); diff != "" {
				t.Errorf("Readings mismatch (-want +got):\n%s", diff)
			}
		})
	}
	// Spot check the model itself on the merged reading.
	got := readAll(t, st, reader.Query{Tenant: tenant, Series: device, From: 10, To: 11})
	want := []model.Reading{{DeviceID: device, TS: 10, Metrics: []model.Metric{{Name: "a", Value: 10}, {Name: "b", Value: 11}, {Name: "c", Value: 12}}}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("reading spread over two partitions mismatch (-want +got):\n%s", diff)
	}
}

func TestMergeAudit(t *testing.T) {
	st := openStore(t)
	ev := func(ts int64, id, actor string) model.AuditEvent {
		return model.AuditEvent{EventID: id, Stream: stream, TS: ts, Actor: actor}
	}
	ds := &dataset{}
	ds.add(0, part{sub: 0, events: []model.AuditEvent{ev(1, "a", "old"), ev(1, "c", "x"), ev(5, "e", "x")}})
	ds.add(0, part{sub: split(1), events: []model.AuditEvent{ev(1, "a", "new"), ev(1, "b", "x"), ev(3, "d", "x")}})
	ds.add(2, part{sub: 0, events: []model.AuditEvent{ev(2*day+1, "a", "x")}})
	ds.commit(t, st)
	q := reader.Query{Tenant: tenant, Series: stream, From: 0, To: 3 * day, Limit: reader.MaxLimit}
	got, cursor, err := reader.Audit(t.Context(), st, q)
	if err != nil || cursor != "" {
		t.Fatalf("Audit = cursor %q, %v", cursor, err)
	}
	want := []model.AuditEvent{ev(1, "a", "new"), ev(1, "b", "x"), ev(1, "c", "x"), ev(3, "d", "x"), ev(5, "e", "x"), ev(2*day+1, "a", "x")}
	if diff := cmp.Diff(want, got, cmpOpts); diff != "" {
		t.Errorf("Audit mismatch (-want +got):\n%s", diff)
	}
}

func TestDuplicatesNewestWins(t *testing.T) {
	st := openStore(t)
	const n = 2500 // more than one scan chunk per partition
	var old, newer, newest []model.ReadingRow
	for i := range int64(n) {
		old = append(old, model.ReadingRow{TS: i, Metric: "m", Value: 1, Seq: 1, HasSeq: true})
		if i%2 == 0 {
			newer = append(newer, model.ReadingRow{TS: i, Metric: "m", Value: 2})
		}
		if i%3 == 0 {
			newest = append(newest, model.ReadingRow{TS: i, Metric: "m", Value: 3, Seq: 3, HasSeq: true})
		}
	}
	ds := &dataset{}
	ds.add(0, part{sub: 0, readings: old})
	ds.add(0, part{sub: split(1), readings: newer})
	ds.add(0, part{sub: split(2), readings: newest})
	ds.commit(t, st)
	got := readAll(t, st, reader.Query{Tenant: tenant, Series: device, From: 0, To: day})
	if len(got) != n {
		t.Fatalf("got %d readings, want %d, each once", len(got), n)
	}
	for i, r := range got {
		want := 1.0
		switch {
		case i%3 == 0:
			want = 3
		case i%2 == 0:
			want = 2
		}
		if r.TS != int64(i) || len(r.Metrics) != 1 || r.Metrics[0].Value != want {
			t.Fatalf("reading %d = %+v, want ts %d with value %v from the newest partition", i, r, i, want)
		}
	}
	if diff := cmp.Diff(ds.readings(0, day), got); diff != "" {
		t.Errorf("Readings mismatch (-want +got):\n%s", diff)
	}
}

func TestPagingEveryLimit(t *testing.T) {
	st := openStore(t)
	ds := randomDataset(7, 9)
	ds.commit(t, st)
	from, to := -day, 2*day
	full := readAll(t, st, reader.Query{Tenant: tenant, Series: device, From: from, To: to})
	if diff := cmp.Diff(ds.readings(from, to), full, cmpOpts); diff != "" {
		t.Fatalf("full read mismatch (-want +got):\n%s", diff)
	}
	if len(full) < 30 {
		t.Fatalf("dataset has only %d readings", len(full))
	}
	for limit := 1; limit <= len(full)+1; limit++ {
		pages := pageReadings(t, st, reader.Query{Tenant: tenant, Series: device, From: from, To: to, Limit: limit})
		got := slices.Concat(pages...)
		if diff := cmp.Diff(full, got, cmpOpts); diff != "" {
			t.Fatalf("limit %d: pages differ from the single read (-want +got):\n%s", limit, diff)
		}
		for i := 1; i < len(got); i++ {
			if got[i].TS == got[i-1].TS {
				t.Fatalf("limit %d: reading at %d split across pages", limit, got[i].TS)
			}
		}
		if want := (len(full) + limit - 1) / limit; len(pages) != max(want, 1) {
			t.Errorf("limit %d: %d pages, want %d", limit, len(pages), want)
		}
	}

	fullAudit := ds.events(from, to)
	for limit := 1; limit <= len(fullAudit)+1; limit++ {
		got := slices.Concat(pageAudit(t, st, reader.Query{Tenant: tenant, Series: stream, From: from, To: to, Limit: limit})...)
		if diff := cmp.Diff(fullAudit, got, cmpOpts); diff != "" {
			t.Fatalf("audit limit %d: pages differ from the model (-want +got):\n%s", limit, diff)
		}
	}
}

func TestPagingLarge(t *testing.T) {
	st := openStore(t)
	ds := randomDataset(11, 700) // partitions of more rows than a scan chunk
	ds.commit(t, st)
	ranges := [][2]int64{{-day, 2 * day}, {-day + 500, 1200}}
	for _, r := range ranges {
		want := ds.readings(r[0], r[1])
		for _, limit := range []int{1023, 1025, reader.MaxLimit} {
			got := slices.Concat(pageReadings(t, st, reader.Query{Tenant: tenant, Series: device, From: r[0], To: r[1], Limit: limit})...)
			if diff := cmp.Diff(want, got, cmpOpts); diff != "" {
				t.Fatalf("range %v limit %d mismatch (-want +got):\n%s", r, limit, diff)
			}
		}
		wantEv := ds.events(r[0], r[1])
		for _, limit := range []int{1024} {
			got := slices.Concat(pageAudit(t, st, reader.Query{Tenant: tenant, Series: stream, From: r[0], To: r[1], Limit: limit})...)
			if diff := cmp.Diff(wantEv, got, cmpOpts); diff != "" {
				t.Fatalf("audit range %v limit %d mismatch (-want +got):\n%s", r, limit, diff)
			}
		}
	}
}

func TestBadQuery(t *testing.T) {
	st := openStore(t)
	write(t, st, 0, part{sub: 0, readings: []model.ReadingRow{row(1, "a", 1), row(2, "a", 2)}})
	write(t, st, 0, part{sub: 0, events: []model.AuditEvent{{EventID: "e1", Stream: stream, TS: 1}, {EventID: "e2", Stream: stream, TS: 2}}})
	// Real cursors, to reuse with the wrong query.
	_, readingsCursor, err := reader.Readings(t.Context(), st, reader.Query{Tenant: tenant, Series: device, From: 0, To: day, Limit: 1})
	if err != nil || readingsCursor == "" {
		t.Fatalf("first page: cursor %q, %v", readingsCursor, err)
	}
	_, auditCursor, err := reader.Audit(t.Context(), st, reader.Query{Tenant: tenant, Series: stream, From: 0, To: day, Limit: 1})
	if err != nil || auditCursor == "" {
		t.Fatalf("first audit page: cursor %q, %v", auditCursor, err)
	}
	b64 := base64.RawURLEncoding.EncodeToString
	tests := []struct {
		name      string
		audit     bool
		q         reader.Query
		badCursor bool // the error must be ErrBadCursor
	}{
		{"garbage", false, reader.Query{Series: device, To: day, Limit: 10, Cursor: "!!not base64!!"}, true},
		{"padded base64", false, reader.Query{Series: device, To: day, Limit: 10, Cursor: readingsCursor + "=="}, true},
		{"not json", false, reader.Query{Series: device, To: day, Limit: 10, Cursor: b64([]byte("hello"))}, true},
		{"unknown version", false, reader.Query{Series: device, To: day, Limit: 10, Cursor: b64([]byte(`{"v":2,"k":"readings","s":"dev-1","t":1,"p":"a"}`))}, true},
		{"no version", false, reader.Query{Series: device, To: day, Limit: 10, Cursor: b64([]byte(`{"k":"readings","s":"dev-1","t":1}`))}, true},
		{"other series", false, reader.Query{Series: "dev-2", To: day, Limit: 10, Cursor: readingsCursor}, true},
		{"prefix series", false, reader.Query{Series: "dev-", To: day, Limit: 10, Cursor: readingsCursor}, true},
		{"audit cursor for readings", false, reader.Query{Series: stream, To: day, Limit: 10, Cursor: auditCursor}, true},
		{"readings cursor for audit", true, reader.Query{Series: device, To: day, Limit: 10, Cursor: readingsCursor}, true},
		{"audit cursor for other stream", true, reader.Query{Series: "other", To: day, Limit: 10, Cursor: auditCursor}, true},
		{"zero limit", false, reader.Query{Series: device, To: day, Limit: 0}, false},
		{"limit too large", false, reader.Query{Series: device, To: day, Limit: reader.MaxLimit + 1}, false},
		{"empty range", false, reader.Query{Series: device, From: 5, To: 5, Limit: 10}, false},
		{"inverted range", true, reader.Query{Series: stream, From: 6, To: 5, Limit: 10}, false},
		// A cursor whose position lies outside the range: 2^31 days on,
		// DayOf wrapped and the read walked billions of days.
		{"cursor 2^31 days ahead", false, reader.Query{Series: device, To: day, Limit: 10,
			Cursor: b64(fmt.Appendf(nil, `{"v":1,"k":"readings","s":%q,"t":%d,"e":true}`, device, int64(math.MaxInt32+1)*day))}, true},
		{"cursor at max int64", true, reader.Query{Series: stream, To: day, Limit: 10,
			Cursor: b64(fmt.Appendf(nil, `{"v":1,"k":"audit","s":%q,"t":%d,"p":"e"}`, stream, int64(math.MaxInt64)))}, true},
		{"cursor before the range", false, reader.Query{Series: device, From: 10, To: day, Limit: 10,
			Cursor: b64(fmt.Appendf(nil, `{"v":1,"k":"readings","s":%q,"t":9,"e":true}`, device))}, true},
		{"range to max int64", false, reader.Query{Series: device, From: 0, To: math.MaxInt64, Limit: 10}, false},
		{"range over all int64", false, reader.Query{Series: device, From: math.MinInt64, To: math.MaxInt64, Limit: 10}, false},
		{"range 2^31 days", true, reader.Query{Series: stream, From: -int64(math.MaxInt32) * day, To: 0, Limit: 10}, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			q := tc.q
			q.Tenant = tenant
			done := make(chan error, 1)
			go func() {
				var err error
				if tc.audit {
					_, _, err = reader.Audit(t.Context(), st, q)
				} else {
					_, _, err = reader.Readings(t.Context(), st, q)
				}
				done <- err
			}()
			var err error
			select {
			case err = <-done:
			case <-time.After(10 * time.Second): // a hostile query used to walk 2^31 days
				t.Fatalf("query %+v did not answer within 10s", q)
			}
			if err == nil {
				t.Fatalf("query %+v succeeded, want an error", q)
			}
			if got := errors.Is(err, reader.ErrBadCursor); got != tc.badCursor {
				t.Errorf("query %+v: error %q, errors.Is(ErrBadCursor) = %v, want %v", q, err, got, tc.badCursor)
			}
		})
	}
}

// cancellingStore cancels its reader's context at the n-th catalogue read.
type cancellingStore struct {
	reader.Store
	n, reads int
	cancel   context.CancelFunc
}

func (c *cancellingStore) Catalogue(ctx context.Context, sd model.SeriesDay) ([]model.PartitionInfo, error) {
	if c.reads++; c.reads == c.n {
		c.cancel()
	}
	return nil, nil // a store that does not look at ctx itself
}

// A read whose context ends (client gone, read.timeout) stops at the next
// day instead of walking the rest of its range.
func TestStopsWhenContextEnds(t *testing.T) {
	for _, audit := range []bool{false, true} {
		ctx, cancel := context.WithCancel(t.Context())
		st := &cancellingStore{Store: openStore(t), n: 3, cancel: cancel}
		q := reader.Query{Tenant: tenant, Series: device, From: 0, To: reader.MaxDays * day, Limit: 10}
		var err error
		if audit {
			_, _, err = reader.Audit(ctx, st, q)
		} else {
			_, _, err = reader.Readings(ctx, st, q)
		}
		cancel()
		if !errors.Is(err, context.Canceled) || st.reads != 3 {
			t.Errorf("audit %v: error %v after %d catalogue reads; want context.Canceled after 3", audit, err, st.reads)
		}
	}
}

// countingStore counts the catalogue reads and scans that reach the store.
type countingStore struct {
	reader.Store
	mu         sync.Mutex
	scans      map[model.PartitionKey]int
	catalogues map[model.Day]int
}

func newCounting(st reader.Store) *countingStore {
	return &countingStore{Store: st, scans: make(map[model.PartitionKey]int), catalogues: make(map[model.Day]int)}
}

func (c *countingStore) Catalogue(ctx context.Context, sd model.SeriesDay) ([]model.PartitionInfo, error) {
	c.mu.Lock()
	c.catalogues[sd.Day]++
	c.mu.Unlock()
	return c.Store.Catalogue(ctx, sd)
}

func (c *countingStore) ScanReadings(ctx context.Context, pk model.PartitionKey, r store.Range, limit int) ([]model.ReadingRow, error) {
	c.mu.Lock()
	c.scans[pk]++
	c.mu.Unlock()
	return c.Store.ScanReadings(ctx, pk, r, limit)
}

func (c *countingStore) ScanAudit(ctx context.Context, pk model.PartitionKey, r store.Range, limit int) ([]model.AuditEvent, error) {
	c.mu.Lock()
	c.scans[pk]++
	c.mu.Unlock()
	return c.Store.ScanAudit(ctx, pk, r, limit)
}

func (c *countingStore) scanned() []uint32 {
	c.mu.Lock()
	defer c.mu.Unlock()
	var subs []uint32
	for pk := range c.scans {
		subs = append(subs, pk.Sub)
	}
	slices.Sort(subs)
	c.scans = make(map[model.PartitionKey]int)
	return subs
}

func TestScansOnlyOverlappingPartitions(t *testing.T) {
	st := openStore(t)
	// Partitions of day 0 cover [0,99], [200,299] plus a late row at 50,
	// [400,499]; one of day 1 and one of day 3.
	var p0, p1, p2 []model.ReadingRow
	for i := range int64(100) {
		p0 = append(p0, row(i, "m", 0))
		p1 = append(p1, row(200+i, "m", 1))
		p2 = append(p2, row(400+i, "m", 2))
	}
	p1 = append(p1, row(50, "late", 1))
	write(t, st, 0, part{sub: 0, readings: p0}, part{sub: split(1), readings: p1}, part{sub: split(2), readings: p2})
	write(t, st, 1, part{sub: 0, readings: []model.ReadingRow{row(day+10, "m", 3)}})
	write(t, st, 3, part{sub: 0, readings: []model.ReadingRow{row(3*day+10, "m", 4)}})
	// A catalogue entry that claims no rows is never scanned.
	empty := model.PartitionInfo{Key: model.PartitionKey{Kind: model.KindReadings, Tenant: tenant, Series: device, Day: 0, Sub: split(3)}, MinTS: 0, MaxTS: day - 1, State: buckets.StateSplit}
	if err := st.Commit(t.Context(), &store.Batch{Catalogue: []model.PartitionInfo{empty}}); err != nil {
		t.Fatal(err)
	}
	cs := newCounting(st)
	tests := []struct {
		name     string
		from, to int64
		want     []uint32
	}{
		{"middle partition", 210, 260, []uint32{split(1)}},
		{"late row widens the range", 40, 60, []uint32{0, split(1)}},
		{"gap between partitions, to at a min", 300, 400, nil},
		{"to just after a min", 300, 401, []uint32{split(2)}},
		{"from at a max", 499, 600, []uint32{split(2)}},
		{"from just after a max", 500, 600, nil},
		{"whole day", 0, day, []uint32{0, split(1), split(2)}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			readAll(t, cs, reader.Query{Tenant: tenant, Series: device, From: tc.from, To: tc.to})
			if diff := cmp.Diff(tc.want, cs.scanned(), cmpOpts); diff != "" {
				t.Errorf("partitions scanned (-want +got):\n%s", diff)
			}
		})
	}

	t.Run("days outside the range are not read", func(t *testing.T) {
		clear(cs.catalogues)
		got := readAll(t, cs, reader.Query{Tenant: tenant, Series: device, From: day, To: 3 * day})
		if len(got) != 1 || got[0].TS != day+10 {
			t.Errorf("got %+v, want the reading of day 1", got)
		}
		want := map[model.Day]int{1: 1, 2: 1}
		if diff := cmp.Diff(want, cs.catalogues); diff != "" {
			t.Errorf("catalogue reads by day (-want +got):\n%s", diff)
		}
		cs.scanned()
	})

	t.Run("partitions before the cursor are not scanned", func(t *testing.T) {
		// Readings are at 0..99 (and a late one at 50), 200..299, 400..499.
		q := reader.Query{Tenant: tenant, Series: device, From: 0, To: day, Limit: 140}
		page, cursor, err := reader.Readings(t.Context(), cs, q)
		if err != nil || cursor == "" || len(page) != 140 {
			t.Fatalf("first page: %d readings, cursor %q, %v", len(page), cursor, err)
		}
		cs.scanned()
		q.Cursor = cursor
		page, cursor, err = reader.Readings(t.Context(), cs, q)
		if err != nil || cursor == "" || page[0].TS != 240 {
			t.Fatalf("second page: starts at %d, cursor %q, %v", page[0].TS, cursor, err)
		}
		// The page starts inside the second partition: the first one
		// ends before the cursor.
		if diff := cmp.Diff([]uint32{split(1), split(2)}, cs.scanned()); diff != "" {
			t.Errorf("partitions scanned for the second page (-want +got):\n%s", diff)
		}
	})
}

func TestPartitionCreatedAfterPage(t *testing.T) {
	st := openStore(t)
	ds := &dataset{}
	first := part{sub: 0}
	for i := range int64(10) {
		first.readings = append(first.readings, row(i*10, "a", float64(i)))
	}
	ds.add(0, first)
	ds.commit(t, st)
	q := reader.Query{Tenant: tenant, Series: device, From: 0, To: 2 * day, Limit: 4}
	page1, cursor, err := reader.Readings(t.Context(), st, q)
	if err != nil || cursor == "" {
		t.Fatalf("first page: cursor %q, %v", cursor, err)
	}
	// Then the bucketing moves on: a split of the same day with rows after
	// the cursor (and one before it, which this read has passed), and a
	// partition of the next day.
	late := part{sub: split(1), readings: []model.ReadingRow{row(5, "late", 0), row(35, "b", 1), row(40, "b", 2), row(1000, "c", 3)}}
	next := part{sub: 0, readings: []model.ReadingRow{row(day+1, "a", 4)}}
	write(t, st, 0, late)
	write(t, st, 1, next)
	ds.add(0, late)
	ds.add(1, next)
	q.Cursor = cursor
	var rest []model.Reading
	for _, page := range pageReadings(t, st, q) {
		rest = append(rest, page...)
	}
	want := ds.readings(page1[len(page1)-1].TS+1, q.To)
	if diff := cmp.Diff(want, rest, cmpOpts); diff != "" {
		t.Errorf("pages after the new partitions mismatch (-want +got):\n%s", diff)
	}
	if !slices.ContainsFunc(rest, func(r model.Reading) bool { return r.TS == 35 }) {
		t.Errorf("rows of the new partition after the cursor are missing: %+v", rest)
	}
}

// The span bound is the query's MaxDays when it sets one (the read API's
// read.max_days), else MaxDays: a configured bound above MaxDays is not
// cut short by a second, different one.
func TestQueryMaxDays(t *testing.T) {
	st := openStore(t)
	for _, tc := range []struct {
		maxDays, days int
		ok            bool
	}{{0, reader.MaxDays, true}, {0, reader.MaxDays + 1, false}, {5000, 4000, true}, {5000, 5001, false}, {2, 3, false}} {
		q := reader.Query{Tenant: tenant, Series: device, From: 0, To: int64(tc.days) * day, Limit: 10, MaxDays: tc.maxDays}
		_, _, err := reader.Readings(t.Context(), st, q)
		if tc.ok != (err == nil) || (!tc.ok && !errors.Is(err, reader.ErrBadQuery)) {
			t.Errorf("MaxDays %d, %d days: error %v, want ok=%v", tc.maxDays, tc.days, err, tc.ok)
		}
	}
}

// BenchmarkReadingsMinute reads one device-minute back, as a rollup
// recompute does: one reading of six metrics (a large fleet's minute), or
// sixty (a device reporting every second).
func BenchmarkReadingsMinute(b *testing.B) {
	for _, n := range []int{1, 60} {
		b.Run(fmt.Sprintf("readings=%d", n), func(b *testing.B) {
			st := openStore(b)
			d := model.Day(20000)
			m := d.Start() + 600_000
			var rows []model.ReadingRow
			for i := range n {
				for _, name := range []string{"a", "b", "c", "d", "e", "f"} {
					rows = append(rows, row(m+int64(i)*1000, name, float64(i)))
				}
			}
			write(b, st, d, part{readings: rows})
			q := reader.Query{Tenant: tenant, Series: device, From: m, To: m + 60_000, Limit: reader.MaxLimit}
			b.ReportAllocs()
			for b.Loop() {
				out, _, err := reader.Readings(b.Context(), st, q)
				if err != nil || len(out) != n || len(out[n-1].Metrics) != 6 {
					b.Fatalf("read %d readings, %v", len(out), err)
				}
			}
		})
	}
}
