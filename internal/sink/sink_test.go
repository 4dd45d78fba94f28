package sink

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/sluicehq/sluice/internal/buckets"
	"github.com/sluicehq/sluice/internal/model"
	"github.com/sluicehq/sluice/internal/reader"
	"github.com/sluicehq/sluice/internal/store"
	"github.com/sluicehq/sluice/internal/store/pebblestore"
)

const (
	tenant = "acme"
	base   = int64(20_000) * model.MillisPerDay // midnight of a day
	day    = model.MillisPerDay
)

var discard = slog.New(slog.DiscardHandler)

func testConfig() Config {
	return Config{BatchRows: 50, Linger: time.Millisecond, QueueRows: 10_000, AdmissionTimeout: 5 * time.Second, Commits: 3, HotPartitions: 100}
}

func testBuckets() buckets.Config {
	return buckets.Config{MaxRows: 20, MaxBytes: 64 << 10, Writer: 0, MaxSeriesDays: 1000}
}

func openStore(t *testing.T, dir string) *pebblestore.Store {
	t.Helper()
	st, err := pebblestore.Open(dir, pebblestore.Options{CacheBytes: 1 << 20}, discard)
	if err != nil {
		t.Fatalf("open store: %v", err)
	}
	return st
}

// tempStore opens a store that the test closes at its end.
func tempStore(t *testing.T) *pebblestore.Store {
	t.Helper()
	st := openStore(t, t.TempDir())
	t.Cleanup(func() {
		if err := st.Close(); err != nil {
			t.Errorf("close store: %v", err)
		}
	})
	return st
}

// start starts a sink that the test closes at its end (before the store).
func start(t *testing.T, cfg Config, bcfg buckets.Config, st Store, opts ...Option) *Sink {
	t.Helper()
	// Every test checks load's invariant (WithInFlightCheck).
	s := New(cfg, bcfg, st, discard, prometheus.NewRegistry(), append(opts, WithInFlightCheck())...)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := s.Close(ctx); err != nil {
			t.Errorf("close sink: %v", err)
		}
	})
	return s
}

// hookStore runs hook before every commit; a hook error fails the commit
// without writing anything.
type hookStore struct {
	*pebblestore.Store
	hook    func(n int, b *store.Batch) error // n counts commits from 1
	commits atomic.Int64
}

func (h *hookStore) Commit(ctx context.Context, b *store.Batch) error {
	n := int(h.commits.Add(1))
	if h.hook != nil {
		if err := h.hook(n, b); err != nil {
			return err
		}
	}
	return h.Store.Commit(ctx, b)
}

// gate blocks commits until opened. Tests defer open, so that a test that
// fails early does not leave the sink's Close (a cleanup) stuck.
type gate struct {
	ch   chan struct{}
	once sync.Once
}

func newGate() *gate { return &gate{ch: make(chan struct{})} }

func (g *gate) open() { g.once.Do(func() { close(g.ch) }) }
func (g *gate) wait() { <-g.ch }

// waitFor polls cond until it holds, failing the test if it never does.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("gave up waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

func reading(dev string, ts int64, metrics ...string) model.Reading {
	r := model.Reading{DeviceID: dev, TS: ts}
	for i, m := range metrics {
		r.Metrics = append(r.Metrics, model.Metric{Name: m, Value: float64(ts%1000) + float64(i)/10})
	}
	return r
}

func event(stream, id string, ts int64, actor string) model.AuditEvent {
	return model.AuditEvent{EventID: id, Stream: stream, TS: ts, Actor: actor, Action: "act", Outcome: "ok"}
}

func readAll(t *testing.T, st reader.Store, tenant, dev string) []model.Reading {
	t.Helper()
	var out []model.Reading
	q := reader.Query{Tenant: tenant, Series: dev, From: base - day, To: base + 3*day, Limit: reader.MaxLimit}
	for {
		page, cursor, err := reader.Readings(context.Background(), st, q)
		if err != nil {
			t.Fatalf("read %s: %v", dev, err)
		}
		out = append(out, page...)
		if cursor == "" {
			return out
		}
		q.Cursor = cursor
	}
}

func readAudit(t *testing.T, st reader.Store, tenant, stream string) []model.AuditEvent {
	t.Helper()
	q := reader.Query{Tenant: tenant, Series: stream, From: base - day, To: base + 3*day, Limit: reader.MaxLimit}
	evs, cursor, err := reader.Audit(context.Background(), st, q)
	if err != nil || cursor != "" {
		t.Fatalf("read audit %s: cursor %q, %v", stream, cursor, err)
	}
	return evs
}

func sortReadings(rs []model.Reading) []model.Reading {
	out := slices.Clone(rs)
	slices.SortFunc(out, func(a, b model.Reading) int {
		switch {
		case a.TS < b.TS:
			return -1
		case a.TS > b.TS:
			return 1
		}
		return 0
	})
	return out
}

// catalogue returns every partition of the series over the days the tests
// write.
func catalogue(t *testing.T, st *pebblestore.Store, kind model.Kind, tenant, series string) []model.PartitionInfo {
	t.Helper()
	var out []model.PartitionInfo
	for d := model.DayOf(base - day); d <= model.DayOf(base+2*day); d++ {
		parts, err := st.Catalogue(context.Background(), model.SeriesDay{Kind: kind, Tenant: tenant, Series: series, Day: d})
		if err != nil {
			t.Fatalf("catalogue: %v", err)
		}
		out = append(out, parts...)
	}
	return out
}

// checkCatalogue checks the catalogue of a series against the rows stored:
// each partition within the bounds, holding rows only inside its
// [MinTS, MaxTS], with Rows counting them exactly (no failed commits and no
// overwrites in these tests), filled one after another.
// scanPartition returns the rows of a partition and their size, checking
// that each is inside the entry's [MinTS, MaxTS].
func scanPartition(t *testing.T, st *pebblestore.Store, pi model.PartitionInfo) ([]model.ReadingRow, int64) {
	t.Helper()
	rows, err := st.ScanReadings(context.Background(), pi.Key, store.Range{From: pi.Key.Day.Start(), To: pi.Key.Day.End()}, 1<<20)
	if err != nil {
		t.Fatalf("scan %v: %v", pi.Key, err)
	}
	var bytes int64
	for _, r := range rows {
		bytes += r.Size()
		if r.TS < pi.MinTS || r.TS > pi.MaxTS {
			t.Errorf("%v holds a row at %d outside its catalogue range [%d, %d]", pi.Key, r.TS, pi.MinTS, pi.MaxTS)
		}
	}
	return rows, bytes
}

func checkCatalogue(t *testing.T, st *pebblestore.Store, bcfg buckets.Config, tenant, dev string) []model.PartitionInfo {
	t.Helper()
	parts := catalogue(t, st, model.KindReadings, tenant, dev)
	// Open partitions per day: the single one, or one split per writer.
	open := make(map[model.Day][]uint32)
	for _, pi := range parts {
		rows, bytes := scanPartition(t, st, pi)
		if pi.Rows != int64(len(rows)) || pi.Bytes != bytes {
			t.Errorf("catalogue entry %v counts %d rows, %d bytes; the partition holds %d rows, %d bytes", pi.Key, pi.Rows, pi.Bytes, len(rows), bytes)
		}
		if pi.Rows > bcfg.MaxRows || pi.Bytes > bcfg.MaxBytes {
			t.Errorf("%v holds %d rows, %d bytes: over the bound", pi.Key, pi.Rows, pi.Bytes)
		}
		if !pi.Closed {
			open[pi.Key.Day] = append(open[pi.Key.Day], pi.Key.Sub)
		}
	}
	for d, subs := range open {
		writers := make(map[int]int)
		for _, sub := range subs {
			w, _, split := buckets.SplitSeq(sub)
			if !split {
				writers[-1]++
				continue
			}
			writers[int(w)]++
		}
		for w, n := range writers {
			if n > 1 || (w >= 0 && writers[-1] > 0) {
				t.Errorf("%s %s on %v has open partitions %#x: more than one per writer", tenant, dev, d, subs)
			}
		}
	}
	return parts
}

func TestWriteEmptyRequest(t *testing.T) {
	st := tempStore(t)
	s := start(t, testConfig(), testBuckets(), st)
	if err := s.Write(t.Context(), &Request{Tenant: tenant}); err != nil {
		t.Errorf("Write of no rows = %v, want nil", err)
	}
}

func TestConcurrentWrites(t *testing.T) {
	st := tempStore(t)
	bcfg := testBuckets()
	s := start(t, testConfig(), bcfg, st)
	const (
		writers  = 16
		requests = 25
		devices  = 5
	)
	metrics := []string{"a", "b", "temp"}
	want := make(map[string][]model.Reading)
	wantEvents := make(map[string][]string)
	reqs := make([][]*Request, writers)
	for g := range writers {
		for i := range requests {
			dev := fmt.Sprintf("dev-%d", (g+i)%devices)
			ts := base + int64(g*1000+i)*1000
			if i%7 == 0 {
				ts += day // some rows on the next day
			}
			r := reading(dev, ts, metrics[:1+(g+i)%3]...)
			id := fmt.Sprintf("g%d-i%d", g, i)
			req := &Request{Tenant: tenant, Readings: []model.Reading{r}, Audit: []model.AuditEvent{event("s", id, ts, "u")}}
			reqs[g] = append(reqs[g], req)
			want[dev] = append(want[dev], r)
			wantEvents["s"] = append(wantEvents["s"], id)
		}
	}
	var wg sync.WaitGroup
	errs := make(chan error, writers*requests)
	for g := range writers {
		wg.Go(func() {
			for _, req := range reqs[g] {
				if err := s.Write(context.Background(), req); err != nil {
					errs <- err
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Errorf("Write: %v", err)
	}
	for dev, rs := range want {
		got := readAll(t, st, tenant, dev)
		if diff := cmp.Diff(sortReadings(rs), got); diff != "" {
			t.Errorf("%s read back mismatch (-want +got):\n%s", dev, diff)
		}
		checkCatalogue(t, st, bcfg, tenant, dev)
	}
	var gotIDs []string
	for _, e := range readAudit(t, st, tenant, "s") {
		gotIDs = append(gotIDs, e.EventID)
	}
	if diff := cmp.Diff(wantEvents["s"], gotIDs, cmpopts.SortSlices(func(a, b string) bool { return a < b })); diff != "" {
		t.Errorf("audit events read back mismatch (-want +got):\n%s", diff)
	}
	if got := testutil.ToFloat64(s.m.rows.WithLabelValues("readings")) + testutil.ToFloat64(s.m.rows.WithLabelValues("audit")); got != float64(countRows(reqs)) {
		t.Errorf("rows written counter = %v, want %d", got, countRows(reqs))
	}
}

func countRows(reqs [][]*Request) int {
	n := 0
	for _, rs := range reqs {
		for _, r := range rs {
			n += r.Rows()
		}
	}
	return n
}

func TestGroupCommit(t *testing.T) {
	g := newGate()
	defer g.open()
	hs := &hookStore{Store: tempStore(t), hook: func(int, *store.Batch) error { g.wait(); return nil }}
	cfg := testConfig()
	cfg.Commits, cfg.BatchRows, cfg.Linger = 1, 10_000, 5*time.Millisecond
	s := start(t, cfg, testBuckets(), hs)
	const requests = 40
	var wg sync.WaitGroup
	errs := make([]error, requests)
	for i := range requests {
		wg.Go(func() {
			errs[i] = s.Write(context.Background(), &Request{Tenant: tenant, Readings: []model.Reading{reading(fmt.Sprint("dev-", i%4), base+int64(i), "a", "b")}})
		})
	}
	waitFor(t, "every request admitted", func() bool { return testutil.ToFloat64(s.m.queued) == 2*requests })
	g.open()
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("request %d: %v", i, err)
		}
	}
	commits := testutil.ToFloat64(s.m.commits)
	if commits < 1 || commits >= requests {
		t.Errorf("%v commits for %d concurrent requests, want fewer commits than requests", commits, requests)
	}
	if got := testutil.ToFloat64(s.m.rows.WithLabelValues("readings")); got != 2*requests {
		t.Errorf("rows written counter = %v, want %d", got, 2*requests)
	}
	if got := testutil.ToFloat64(s.m.queued); got != 0 {
		t.Errorf("queued rows gauge = %v after every request was answered, want 0", got)
	}
	var n int
	for d := range 4 {
		n += len(readAll(t, hs.Store, tenant, fmt.Sprint("dev-", d)))
	}
	if n != requests {
		t.Errorf("read back %d readings, want %d", n, requests)
	}
}

func TestBusy(t *testing.T) {
	g := newGate()
	defer g.open()
	hs := &hookStore{Store: tempStore(t), hook: func(int, *store.Batch) error { g.wait(); return nil }}
	cfg := testConfig()
	cfg.QueueRows, cfg.BatchRows, cfg.AdmissionTimeout = 10, 10, 20*time.Millisecond
	s := start(t, cfg, testBuckets(), hs)
	req := func(dev string, n int) *Request {
		var rs []model.Reading
		for i := range n {
			rs = append(rs, reading(dev, base+int64(i), "m"))
		}
		return &Request{Tenant: tenant, Readings: rs}
	}
	var wg sync.WaitGroup
	var errA, errC error
	wg.Go(func() { errA = s.Write(context.Background(), req("a", 6)) })
	waitFor(t, "request a admitted", func() bool { return testutil.ToFloat64(s.m.queued) == 6 })

	// 6 more rows do not fit in what is left of the budget of 10.
	err := s.Write(context.Background(), req("b", 6))
	var busy *BusyError
	if !errors.As(err, &busy) {
		t.Fatalf("Write with the budget exhausted = %v, want a *BusyError", err)
	}
	if busy.RetryAfter <= 0 {
		t.Errorf("BusyError.RetryAfter = %v, want a positive hint", busy.RetryAfter)
	}
	if got := testutil.ToFloat64(s.m.busy); got != 1 {
		t.Errorf("busy counter = %v, want 1", got)
	}
	// A caller that gives up first gets its own context's error.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := s.Write(ctx, req("b", 6)); !errors.Is(err, context.Canceled) {
		t.Errorf("Write with a cancelled context = %v, want context.Canceled", err)
	}
	// What still fits is admitted.
	wg.Go(func() { errC = s.Write(context.Background(), req("c", 4)) })
	waitFor(t, "request c admitted", func() bool { return testutil.ToFloat64(s.m.queued) == 10 })
	g.open()
	wg.Wait()
	if errA != nil || errC != nil {
		t.Errorf("admitted requests: %v, %v; want both stored", errA, errC)
	}
	// A request larger than the whole budget runs alone.
	if err := s.Write(context.Background(), req("d", 25)); err != nil {
		t.Errorf("Write of 25 rows with a budget of 10 = %v, want nil", err)
	}
	for dev, want := range map[string]int{"a": 6, "b": 0, "c": 4, "d": 25} {
		if got := len(readAll(t, hs.Store, tenant, dev)); got != want {
			t.Errorf("device %s: read back %d readings, want %d", dev, got, want)
		}
	}
}

// TestZeroAdmissionTimeout checks that a zero timeout admits without
// waiting when the budget allows, and refuses at once when it does not.
func TestZeroAdmissionTimeout(t *testing.T) {
	g := newGate()
	defer g.open()
	hs := &hookStore{Store: tempStore(t), hook: func(int, *store.Batch) error { g.wait(); return nil }}
	cfg := testConfig()
	cfg.QueueRows, cfg.BatchRows, cfg.AdmissionTimeout = 10, 10, 0
	s := start(t, cfg, testBuckets(), hs)
	var wg sync.WaitGroup
	var errA error
	wg.Go(func() {
		errA = s.Write(context.Background(), &Request{Tenant: tenant, Readings: []model.Reading{reading("a", base, "m1", "m2", "m3", "m4", "m5", "m6")}})
	})
	waitFor(t, "request admitted", func() bool { return testutil.ToFloat64(s.m.queued) == 6 })
	err := s.Write(context.Background(), &Request{Tenant: tenant, Readings: []model.Reading{reading("b", base, "m1", "m2", "m3", "m4", "m5")}})
	var busy *BusyError
	if !errors.As(err, &busy) {
		t.Errorf("Write over the budget with no admission wait = %v, want a *BusyError", err)
	}
	g.open()
	wg.Wait()
	if errA != nil {
		t.Errorf("Write within the budget with no admission wait = %v, want nil", errA)
	}
}

func TestAuditDeduplication(t *testing.T) {
	tests := []struct {
		name string
		// requests are written concurrently when concurrent, else in order.
		requests   []Request
		concurrent bool
		// conflict[i] says request i must fail with a *ConflictError.
		conflict []bool
		want     []model.AuditEvent
	}{
		{
			name:     "twice in one request",
			requests: []Request{{Tenant: tenant, Audit: []model.AuditEvent{event("s", "x", base+1, "first"), event("s", "x", base+1, "first"), event("s", "y", base+2, "u")}}},
			want:     []model.AuditEvent{event("s", "x", base+1, "first"), event("s", "y", base+2, "u")},
		},
		{
			name:     "twice in one request with different payloads",
			requests: []Request{{Tenant: tenant, Audit: []model.AuditEvent{event("s", "x", base+1, "first"), event("s", "x", base+1, "second"), event("s", "y", base+2, "u")}}},
			conflict: []bool{true},
		},
		{
			name: "in a later request",
			requests: []Request{
				{Tenant: tenant, Audit: []model.AuditEvent{event("s", "x", base+1, "first")}},
				{Tenant: tenant, Audit: []model.AuditEvent{event("s", "x", base+1, "first"), event("s", "z", base+3, "u")}},
			},
			want: []model.AuditEvent{event("s", "x", base+1, "first"), event("s", "z", base+3, "u")},
		},
		{
			name: "in a later request with a different payload",
			requests: []Request{
				{Tenant: tenant, Audit: []model.AuditEvent{event("s", "x", base+1, "first")}},
				{Tenant: tenant, Audit: []model.AuditEvent{event("s", "x", base+1, "retry"), event("s", "z", base+3, "u")}},
			},
			conflict: []bool{false, true},
			want:     []model.AuditEvent{event("s", "x", base+1, "first")},
		},
		{
			name: "retried into another stream",
			requests: []Request{
				{Tenant: tenant, Audit: []model.AuditEvent{event("s", "x", base+1, "first")}},
				{Tenant: tenant, Audit: []model.AuditEvent{event("other", "x", base+1, "first")}},
			},
			conflict: []bool{false, true},
			want:     []model.AuditEvent{event("s", "x", base+1, "first")},
		},
		{
			name: "retried with another timestamp of the same day",
			requests: []Request{
				{Tenant: tenant, Audit: []model.AuditEvent{event("s", "x", base+1, "first")}},
				{Tenant: tenant, Audit: []model.AuditEvent{event("s", "x", base+2, "first")}},
			},
			conflict: []bool{false, true},
			want:     []model.AuditEvent{event("s", "x", base+1, "first")},
		},
		{
			name: "in concurrent requests",
			requests: []Request{
				{Tenant: tenant, Audit: []model.AuditEvent{event("s", "x", base+1, "u")}},
				{Tenant: tenant, Audit: []model.AuditEvent{event("s", "x", base+1, "u")}},
				{Tenant: tenant, Audit: []model.AuditEvent{event("s", "x", base+1, "u"), event("s", "w", base, "u")}},
				{Tenant: tenant, Audit: []model.AuditEvent{event("s", "x", base+1, "u")}},
			},
			concurrent: true,
			want:       []model.AuditEvent{event("s", "w", base, "u"), event("s", "x", base+1, "u")},
		},
		{
			name: "same id on another day is another event",
			requests: []Request{
				{Tenant: tenant, Audit: []model.AuditEvent{event("s", "x", base+1, "u")}},
				{Tenant: tenant, Audit: []model.AuditEvent{event("s", "x", base+day, "u")}},
			},
			want: []model.AuditEvent{event("s", "x", base+1, "u"), event("s", "x", base+day, "u")},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			st := tempStore(t)
			s := start(t, testConfig(), testBuckets(), st)
			var wg sync.WaitGroup
			errs := make([]error, len(tc.requests))
			for i := range tc.requests {
				if tc.concurrent {
					wg.Go(func() { errs[i] = s.Write(context.Background(), &tc.requests[i]) })
				} else {
					errs[i] = s.Write(context.Background(), &tc.requests[i])
				}
			}
			wg.Wait()
			for i, err := range errs {
				var ce *ConflictError
				switch want := i < len(tc.conflict) && tc.conflict[i]; {
				case want && !errors.As(err, &ce):
					t.Errorf("request %d: %v, want a *ConflictError", i, err)
				case want && ce.EventID != "x":
					t.Errorf("request %d: conflict names event %q, want x", i, ce.EventID)
				case !want && err != nil:
					t.Errorf("request %d: %v", i, err)
				}
			}
			var got []model.AuditEvent
			for _, stream := range []string{"s", "other"} {
				got = append(got, readAudit(t, st, tenant, stream)...)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("stored events mismatch (-want +got):\n%s", diff)
			}
		})
	}
	t.Run("other tenant", func(t *testing.T) {
		st := tempStore(t)
		s := start(t, testConfig(), testBuckets(), st)
		for _, tn := range []string{"a", "ab"} {
			if err := s.Write(t.Context(), &Request{Tenant: tn, Audit: []model.AuditEvent{event("s", "x", base, "u")}}); err != nil {
				t.Fatalf("Write for tenant %s: %v", tn, err)
			}
		}
		for _, tn := range []string{"a", "ab"} {
			if got := readAudit(t, st, tn, "s"); len(got) != 1 {
				t.Errorf("tenant %s holds %d events, want 1", tn, len(got))
			}
		}
	})
}

// TestAuditDuplicateInFlight writes an event while a batch holding the same
// event_id is being committed: the second request is answered only with the
// first batch's outcome.
func TestAuditDuplicateInFlight(t *testing.T) {
	for _, fail := range []bool{false, true} {
		t.Run(fmt.Sprintf("first commit fails %v", fail), func(t *testing.T) {
			g := newGate()
			defer g.open()
			entered := make(chan struct{})
			hs := &hookStore{Store: tempStore(t)}
			hs.hook = func(n int, _ *store.Batch) error {
				if n != 1 {
					return nil
				}
				close(entered)
				g.wait()
				if fail {
					return errors.New("disk on fire")
				}
				return nil
			}
			s := start(t, testConfig(), testBuckets(), hs)
			// Both touch the same series-days: a new one would make the
			// flusher wait for the held commit before reading its catalogue.
			first := &Request{Tenant: tenant, Audit: []model.AuditEvent{event("s", "x", base, "first")}, Readings: []model.Reading{reading("d", base, "m")}}
			second := &Request{Tenant: tenant, Audit: []model.AuditEvent{event("s", "x", base, "first")}, Readings: []model.Reading{reading("d", base, "m2")}}
			var wg sync.WaitGroup
			var err1, err2 error
			wg.Go(func() { err1 = s.Write(context.Background(), first) })
			<-entered
			wg.Go(func() { err2 = s.Write(context.Background(), second) })
			// The second request's batch is planned while the first is held.
			waitFor(t, "second request planned", func() bool { return testutil.ToFloat64(s.m.auditDuplicates) == 1 })
			g.open()
			wg.Wait()
			stored := readAudit(t, hs.Store, tenant, "s")
			if !fail {
				if err1 != nil || err2 != nil {
					t.Errorf("Write = %v, %v; want both nil", err1, err2)
				}
				if diff := cmp.Diff([]model.AuditEvent{first.Audit[0]}, stored); diff != "" {
					t.Errorf("stored events mismatch (-want +got):\n%s", diff)
				}
				return
			}
			if err1 == nil {
				t.Errorf("first Write succeeded though its commit failed")
			}
			if err2 == nil && len(stored) == 0 {
				t.Errorf("second Write succeeded, but its audit event is not stored: it was skipped as a duplicate of a failed commit")
			}
			// A retry of the second request stores the event once.
			if err := s.Write(context.Background(), second); err != nil {
				t.Fatalf("retry: %v", err)
			}
			stored = readAudit(t, hs.Store, tenant, "s")
			if diff := cmp.Diff([]model.AuditEvent{second.Audit[0]}, stored); diff != "" {
				t.Errorf("stored events after the retry mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

// TestFailedPlacementIsNotADuplicate puts, in one batch, a request whose
// event cannot be placed (its stream used every split id) before another
// request with the same event_id: the second copy must still be stored.
func TestFailedPlacementIsNotADuplicate(t *testing.T) {
	st := tempStore(t)
	full := model.SeriesDay{Kind: model.KindAudit, Tenant: tenant, Series: "full", Day: model.DayOf(base)}
	if err := st.Commit(t.Context(), &store.Batch{Catalogue: []model.PartitionInfo{
		{Key: full.Partition(0), Rows: 20, MinTS: base, MaxTS: base, State: buckets.StateSingle, Closed: true},
		{Key: full.Partition(buckets.SubID(0, 65535)), Rows: 20, MinTS: base, MaxTS: base, State: buckets.StateSplit, Closed: true},
	}}); err != nil {
		t.Fatal(err)
	}
	cfg := testConfig()
	cfg.BatchRows, cfg.Linger = 2, time.Second // the two requests make one batch
	s := start(t, cfg, testBuckets(), st)
	var wg sync.WaitGroup
	var errA, errB error
	wg.Go(func() {
		errA = s.Write(context.Background(), &Request{Tenant: tenant, Audit: []model.AuditEvent{event("full", "x", base, "a")}})
	})
	waitFor(t, "request a admitted", func() bool { return testutil.ToFloat64(s.m.queued) == 1 })
	errB = s.Write(context.Background(), &Request{Tenant: tenant, Audit: []model.AuditEvent{event("ok", "x", base, "b")}})
	wg.Wait()
	if !errors.Is(errA, buckets.ErrSplitsExhausted) {
		t.Errorf("request placing into a full series-day = %v, want ErrSplitsExhausted", errA)
	}
	if errB != nil {
		t.Fatalf("request b: %v", errB)
	}
	if diff := cmp.Diff([]model.AuditEvent{event("ok", "x", base, "b")}, readAudit(t, st, tenant, "ok")); diff != "" {
		t.Errorf("events of request b mismatch (-want +got):\n%s", diff)
	}
}

func TestCommitFailure(t *testing.T) {
	var failing atomic.Bool
	failing.Store(true)
	hs := &hookStore{Store: tempStore(t), hook: func(int, *store.Batch) error {
		if failing.Load() {
			return errors.New("disk on fire")
		}
		return nil
	}}
	bcfg := testBuckets()
	s := start(t, testConfig(), bcfg, hs)
	const requests = 30
	var wg sync.WaitGroup
	errs := make([]error, requests)
	for i := range requests {
		wg.Go(func() {
			req := &Request{Tenant: tenant,
				Readings: []model.Reading{reading("dev", base+int64(i), "a", "b")},
				Audit:    []model.AuditEvent{event("s", fmt.Sprint("e", i), base+int64(i), "u")}}
			errs[i] = s.Write(context.Background(), req)
		})
	}
	wg.Wait()
	for i, err := range errs {
		if err == nil {
			t.Errorf("request %d succeeded though every commit failed", i)
		}
	}
	if got := testutil.ToFloat64(s.m.commitErrors); got < 1 {
		t.Errorf("commit errors counter = %v, want at least 1", got)
	}
	if got := readAll(t, hs.Store, tenant, "dev"); len(got) != 0 {
		t.Errorf("failed requests stored %d readings", len(got))
	}
	if got := readAudit(t, hs.Store, tenant, "s"); len(got) != 0 {
		t.Errorf("failed requests stored %d events", len(got))
	}
	if got := catalogue(t, hs.Store, model.KindReadings, tenant, "dev"); len(got) != 0 {
		t.Errorf("failed requests stored catalogue entries: %v", got)
	}

	// The sink goes on once the store recovers, and the retried events are
	// not taken for duplicates of the failed ones.
	failing.Store(false)
	for i := range requests {
		req := &Request{Tenant: tenant,
			Readings: []model.Reading{reading("dev", base+int64(i), "a", "b")},
			Audit:    []model.AuditEvent{event("s", fmt.Sprint("e", i), base+int64(i), "u")}}
		if err := s.Write(context.Background(), req); err != nil {
			t.Fatalf("Write after recovery: %v", err)
		}
	}
	if got := readAll(t, hs.Store, tenant, "dev"); len(got) != requests {
		t.Errorf("read back %d readings, want %d", len(got), requests)
	}
	if got := readAudit(t, hs.Store, tenant, "s"); len(got) != requests {
		t.Errorf("read back %d events, want %d", len(got), requests)
	}
	// Counts may overstate (the planner kept the failed rows) but the
	// bound holds and every stored row is inside its entry's range.
	var rows int64
	for _, pi := range catalogue(t, hs.Store, model.KindReadings, tenant, "dev") {
		rows += pi.Rows
		if pi.Rows > bcfg.MaxRows {
			t.Errorf("%v counts %d rows, over the bound", pi.Key, pi.Rows)
		}
	}
	if rows < 2*requests {
		t.Errorf("catalogue counts %d rows, fewer than the %d stored", rows, 2*requests)
	}
}

func TestClose(t *testing.T) {
	g := newGate()
	hs := &hookStore{Store: tempStore(t), hook: func(int, *store.Batch) error { g.wait(); return nil }}
	s := New(testConfig(), testBuckets(), hs, discard, prometheus.NewRegistry(), WithInFlightCheck())
	defer s.Close(context.Background())
	defer g.open() // runs first: a test that fails early leaves nothing stuck
	const requests = 5
	var wg sync.WaitGroup
	errs := make([]error, requests)
	for i := range requests {
		wg.Go(func() {
			errs[i] = s.Write(context.Background(), &Request{Tenant: tenant, Readings: []model.Reading{reading("dev", base+int64(i), "a")}})
		})
	}
	waitFor(t, "every request admitted", func() bool { return testutil.ToFloat64(s.m.queued) == requests })

	// Close gives up waiting when its context ends, without losing work.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
	err := s.Close(ctx)
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Close while a commit is stuck = %v, want context.DeadlineExceeded", err)
	}
	if err := s.Write(context.Background(), &Request{Tenant: tenant, Readings: []model.Reading{reading("dev", base+100, "a")}}); !errors.Is(err, ErrClosed) {
		t.Errorf("Write after Close = %v, want ErrClosed", err)
	}
	g.open()
	if err := s.Close(context.Background()); err != nil {
		t.Fatalf("Close: %v", err)
	}
	// Close returned: every admitted request is stored.
	if got := readAll(t, hs.Store, tenant, "dev"); len(got) != requests {
		t.Errorf("after Close %d readings are stored, want %d", len(got), requests)
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("admitted request %d: %v", i, err)
		}
	}
	if err := s.Write(context.Background(), &Request{Tenant: tenant, Readings: []model.Reading{reading("dev", base+101, "a")}}); !errors.Is(err, ErrClosed) {
		t.Errorf("Write after Close = %v, want ErrClosed", err)
	}
	if err := s.Close(context.Background()); err != nil {
		t.Errorf("second Close = %v, want nil", err)
	}
}

// noisy returns n readings of dev with 1 to 3 metrics, their timestamps
// wandering back and forth inside two days.
func noisy(dev string, n, offset int) []model.Reading {
	metrics := []string{"a", "b", "c"}
	var out []model.Reading
	for i := range n {
		k := i + offset
		ts := base + int64(k*7919%5000)*1000 + int64(k)
		if k%9 == 0 {
			ts += day
		}
		out = append(out, reading(dev, ts, metrics[:1+k%3]...))
	}
	return out
}

func TestNoisyDevice(t *testing.T) {
	st := tempStore(t)
	bcfg := testBuckets()
	cfg := testConfig()
	cfg.Commits, cfg.BatchRows = 4, 12
	s := start(t, cfg, bcfg, st)
	all := noisy("dev", 600, 0)
	var wg sync.WaitGroup
	var failed atomic.Int64
	for w := range 6 {
		wg.Go(func() {
			// Writer w sends requests w, w+6, ... of three readings each.
			for r := w; 3*r < len(all); r += 6 {
				req := &Request{Tenant: tenant, Readings: all[3*r : min(3*r+3, len(all))]}
				if err := s.Write(context.Background(), req); err != nil {
					t.Errorf("Write: %v", err)
					failed.Add(1)
				}
			}
		})
	}
	wg.Wait()
	if failed.Load() > 0 {
		t.FailNow()
	}
	if diff := cmp.Diff(sortReadings(all), readAll(t, st, tenant, "dev")); diff != "" {
		t.Errorf("read back mismatch (-want +got):\n%s", diff)
	}
	parts := checkCatalogue(t, st, bcfg, tenant, "dev")
	var rows int64
	for _, r := range all {
		rows += int64(len(r.Metrics))
	}
	// Readings of up to 3 cells: every closed partition holds at least
	// MaxRows-2 rows; two days, so two partially filled partitions.
	if limit := 2 + rows/(bcfg.MaxRows-2); int64(len(parts)) > limit {
		t.Errorf("%d partitions for %d rows, more than %d", len(parts), rows, limit)
	}
}

// TestCatalogueNotOverwrittenByOlderBatch holds the commit of one batch
// while a later batch for the same partition is planned: the later batch's
// catalogue entry (which counts both) must be the one that stays.
func TestCatalogueNotOverwrittenByOlderBatch(t *testing.T) {
	entered := make(chan struct{})
	second := make(chan struct{})
	hs := &hookStore{Store: tempStore(t)}
	hs.hook = func(n int, _ *store.Batch) error {
		switch n {
		case 1:
			close(entered)
			// Give a later batch the chance to overtake this one, as
			// another committer may. The sink must not let it.
			select {
			case <-second:
			case <-time.After(200 * time.Millisecond):
			}
		case 2:
			close(second)
		}
		return nil
	}
	bcfg := testBuckets()
	s := start(t, testConfig(), bcfg, hs)
	var wg sync.WaitGroup
	var err1 error
	wg.Go(func() {
		err1 = s.Write(context.Background(), &Request{Tenant: tenant, Readings: []model.Reading{reading("dev", base, "a")}})
	})
	<-entered
	if err := s.Write(context.Background(), &Request{Tenant: tenant, Readings: []model.Reading{reading("dev", base+day/2, "a", "b")}}); err != nil {
		t.Errorf("second Write: %v", err)
	}
	wg.Wait()
	if err1 != nil {
		t.Errorf("first Write: %v", err1)
	}
	want := []model.PartitionInfo{{
		Key:   model.PartitionKey{Kind: model.KindReadings, Tenant: tenant, Series: "dev", Day: model.DayOf(base)},
		Rows:  3,
		Bytes: 3 * model.ReadingRow{Metric: "a"}.Size(),
		MinTS: base, MaxTS: base + day/2, State: buckets.StateSingle,
	}}
	if diff := cmp.Diff(want, catalogue(t, hs.Store, model.KindReadings, tenant, "dev")); diff != "" {
		t.Errorf("catalogue mismatch (-want +got):\n%s", diff)
	}
	if got := readAll(t, hs.Store, tenant, "dev"); len(got) != 2 {
		t.Errorf("read back %d readings, want 2", len(got))
	}
}

// TestRestart closes the sink and store in the middle of filling a noisy
// device's partitions, reopens both and writes more: the planner resumes
// the open partition, keeps the bound, and never reuses a split id. Then a
// gateway with another writer slot joins.
func TestRestart(t *testing.T) {
	dir := t.TempDir()
	bcfg := testBuckets()
	all := noisy("dev", 300, 0)
	quiet := []model.Reading{reading("quiet", base+5, "a"), reading("quiet", base+1, "a"), reading("quiet", base+9, "a")}
	phases := []struct {
		writer   int
		readings []model.Reading
		quiet    model.Reading
	}{
		{0, all[:120], quiet[0]},
		{0, all[120:250], quiet[1]},
		{1, all[250:], quiet[2]},
	}
	var closedBefore []model.PartitionInfo
	for i, ph := range phases {
		st := openStore(t, dir)
		bc := bcfg
		bc.Writer = ph.writer
		s := New(testConfig(), bc, st, discard, prometheus.NewRegistry(), WithInFlightCheck())
		for j := 0; j < len(ph.readings); j += 4 {
			if err := s.Write(context.Background(), &Request{Tenant: tenant, Readings: ph.readings[j:min(j+4, len(ph.readings))]}); err != nil {
				t.Fatalf("phase %d: Write: %v", i, err)
			}
		}
		if err := s.Write(context.Background(), &Request{Tenant: tenant, Readings: []model.Reading{ph.quiet}}); err != nil {
			t.Fatalf("phase %d: Write: %v", i, err)
		}
		if err := s.Close(context.Background()); err != nil {
			t.Fatalf("phase %d: close sink: %v", i, err)
		}

		parts := checkCatalogue(t, st, bcfg, tenant, "dev")
		// Partitions closed in an earlier phase are never written again.
		for _, before := range closedBefore {
			j := slices.IndexFunc(parts, func(pi model.PartitionInfo) bool { return pi.Key == before.Key })
			if j < 0 || parts[j] != before {
				t.Errorf("phase %d: closed partition %+v changed", i, before)
			}
		}
		closedBefore = closedBefore[:0]
		seqs := make(map[[2]int]bool)
		for _, pi := range parts {
			if pi.Closed {
				closedBefore = append(closedBefore, pi)
			}
			if w, n, ok := buckets.SplitSeq(pi.Key.Sub); ok {
				seqs[[2]int{int(pi.Key.Day), int(w)<<16 | n}] = true
				if pi.State != buckets.StateSplit {
					t.Errorf("%v state %q, want split", pi.Key, pi.State)
				}
			}
		}
		// Splits of each writer are numbered 1, 2, ... with no gap: none
		// was opened twice or skipped.
		for k := range seqs {
			if n := k[1] & 0xffff; n > 1 && !seqs[[2]int{k[0], k[1] - 1}] {
				t.Errorf("phase %d: split %d of writer %d on day %d exists without split %d", i, n, k[1]>>16, k[0], n-1)
			}
		}
		quietParts := checkCatalogue(t, st, bcfg, tenant, "quiet")
		if len(quietParts) != 1 || quietParts[0].Key.Sub != 0 || quietParts[0].Rows != int64(i+1) {
			t.Errorf("phase %d: quiet device partitions %+v, want one single partition with %d rows", i, quietParts, i+1)
		}
		var want []model.Reading
		for _, p := range phases[:i+1] {
			want = append(want, p.readings...)
		}
		if diff := cmp.Diff(sortReadings(want), readAll(t, st, tenant, "dev")); diff != "" {
			t.Errorf("phase %d: read back mismatch (-want +got):\n%s", i, diff)
		}
		if err := st.Close(); err != nil {
			t.Fatalf("close store: %v", err)
		}
	}
}

func TestValidate(t *testing.T) {
	tests := []struct {
		name string
		edit func(*Config)
		want []string
	}{
		{"defaults", func(*Config) {}, nil},
		{"zero admission timeout", func(c *Config) { c.AdmissionTimeout = 0 }, nil},
		{"zero batch", func(c *Config) { c.BatchRows = 0 }, []string{"sink.batch_rows", "got 0"}},
		{"negative linger", func(c *Config) { c.Linger = -time.Millisecond }, []string{"sink.linger", "-1ms"}},
		{"long linger", func(c *Config) { c.Linger = 2 * time.Second }, []string{"sink.linger", "2s"}},
		{"queue below batch", func(c *Config) { c.QueueRows = c.BatchRows - 1 }, []string{"sink.queue_rows", "sink.batch_rows"}},
		{"negative admission timeout", func(c *Config) { c.AdmissionTimeout = -time.Second }, []string{"sink.admission_timeout"}},
		{"no committer", func(c *Config) { c.Commits = 0 }, []string{"sink.commits", "got 0"}},
		{"too many committers", func(c *Config) { c.Commits = 65 }, []string{"sink.commits", "got 65"}},
		{"no hot partitions", func(c *Config) { c.HotPartitions = 0 }, []string{"sink.hot_partitions", "1..1000000", "got 0"}},
		{"too many hot partitions", func(c *Config) { c.HotPartitions = 1_000_001 }, []string{"sink.hot_partitions", "got 1000001"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg := DefaultConfig()
			tc.edit(&cfg)
			err := cfg.Validate()
			if len(tc.want) == 0 {
				if err != nil {
					t.Errorf("Validate() = %v, want nil", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("Validate() = nil, want an error naming %q", tc.want)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("Validate() = %q, want it to mention %q", err, w)
				}
			}
		})
	}
}

// versionStore is a hookStore whose writes are ordered by batch version
// (as in Cassandra), handing out versions 1, 2, 3, …
type versionStore struct {
	*hookStore
	last atomic.Int64
}

func (v *versionStore) Version() int64 { return v.last.Add(1) }

// TestVersionedBatchesCommitConcurrently: on a Versioner store, a batch that
// shares a catalogue entry with a batch in flight is committed at once, not
// after it, and carries the greater version.
func TestVersionedBatchesCommitConcurrently(t *testing.T) {
	entered := make(chan int64, 2)
	second := make(chan struct{})
	vs := &versionStore{hookStore: &hookStore{Store: tempStore(t)}}
	vs.hook = func(n int, b *store.Batch) error {
		entered <- b.Version
		if n == 1 {
			select {
			case <-second:
			case <-time.After(10 * time.Second):
				t.Error("the second batch was not committed while the first was in flight")
			}
		} else {
			close(second)
		}
		return nil
	}
	s := start(t, testConfig(), testBuckets(), vs)
	var wg sync.WaitGroup
	wg.Go(func() {
		if err := s.Write(context.Background(), &Request{Tenant: tenant, Readings: []model.Reading{reading("dev", base, "a")}}); err != nil {
			t.Errorf("first Write: %v", err)
		}
	})
	v1 := <-entered
	if err := s.Write(context.Background(), &Request{Tenant: tenant, Readings: []model.Reading{reading("dev", base+1, "a")}}); err != nil {
		t.Errorf("second Write: %v", err)
	}
	wg.Wait()
	if v2 := <-entered; v1 == 0 || v2 <= v1 {
		t.Errorf("versions %d then %d: want increasing, non-zero", v1, v2)
	}
	if got := readAll(t, vs.Store, tenant, "dev"); len(got) != 2 {
		t.Errorf("read back %d readings, want 2", len(got))
	}
}

// TestReserve checks the reservation a transport takes before it decodes:
// it is refused as Write would be when the budget is full, Release gives it
// back, WriteReserved trims what was reserved beyond the request's rows and
// admits what is missing, and a used reservation cannot be used again.
func TestReserve(t *testing.T) {
	g := newGate()
	defer g.open()
	hs := &hookStore{Store: tempStore(t), hook: func(int, *store.Batch) error { g.wait(); return nil }}
	cfg := testConfig()
	cfg.QueueRows, cfg.BatchRows, cfg.AdmissionTimeout = 10, 10, 20*time.Millisecond
	s := start(t, cfg, testBuckets(), hs)
	req := func(dev string, n int) *Request {
		var rs []model.Reading
		for i := range n {
			rs = append(rs, reading(dev, base+int64(i), "m"))
		}
		return &Request{Tenant: tenant, Readings: rs}
	}
	ctx := context.Background()

	r1, err := s.Reserve(ctx, 8)
	if err != nil {
		t.Fatal(err)
	}
	// 8 of 10 reserved: 3 more do not fit.
	var busy *BusyError
	if _, err := s.Reserve(ctx, 3); !errors.As(err, &busy) {
		t.Fatalf("Reserve over the budget = %v, want a *BusyError", err)
	}
	if err := s.Write(ctx, req("x", 3)); !errors.As(err, &busy) {
		t.Fatalf("Write over what reservations left = %v, want a *BusyError", err)
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := s.Reserve(cctx, 3); !errors.Is(err, context.Canceled) {
		t.Errorf("Reserve with a cancelled context = %v, want context.Canceled", err)
	}
	r1.Release()
	r1.Release() // twice is harmless

	// Reserved 8, the request holds 2: 6 go back at once.
	r2, err := s.Reserve(ctx, 8)
	if err != nil {
		t.Fatalf("Reserve after Release = %v", err)
	}
	var wg sync.WaitGroup
	var errA error
	wg.Go(func() { errA = s.WriteReserved(ctx, r2, req("a", 2)) })
	waitFor(t, "request a queued", func() bool { return testutil.ToFloat64(s.m.queued) == 2 })
	r3, err := s.Reserve(ctx, 8)
	if err != nil {
		t.Fatalf("Reserve of what the trimmed reservation gave back = %v", err)
	}
	r2.Release() // after WriteReserved: nothing
	if _, err := s.Reserve(ctx, 1); !errors.As(err, &busy) {
		t.Fatalf("Reserve with the budget full = %v, want a *BusyError", err)
	}
	// Reserved 1 of a request of 3: the 2 missing are not to be had.
	r3.Release()
	r4, err := s.Reserve(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	hog, err := s.Reserve(ctx, 7)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.WriteReserved(ctx, r4, req("b", 3)); !errors.As(err, &busy) {
		t.Fatalf("WriteReserved past its reservation with the budget full = %v, want a *BusyError", err)
	}
	if err := s.WriteReserved(ctx, r4, req("b", 1)); err == nil {
		t.Error("WriteReserved with a used reservation = nil, want an error")
	}
	hog.Release()
	// The failed WriteReserved gave its reservation back: 8 free again.
	r5, err := s.Reserve(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	wg.Go(func() {
		if err := s.WriteReserved(ctx, r5, req("c", 5)); err != nil {
			t.Errorf("WriteReserved admitting 4 more rows = %v", err)
		}
	})
	waitFor(t, "request c queued", func() bool { return testutil.ToFloat64(s.m.queued) == 7 })
	g.open()
	wg.Wait()
	if errA != nil {
		t.Errorf("request a: %v", errA)
	}
	for dev, want := range map[string]int{"a": 2, "b": 0, "c": 5, "x": 0} {
		if got := len(readAll(t, hs.Store, tenant, dev)); got != want {
			t.Errorf("device %s: read back %d readings, want %d", dev, got, want)
		}
	}
	// Everything is back: the whole budget can be reserved.
	full, err := s.Reserve(ctx, 10)
	if err != nil {
		t.Fatalf("Reserve of the whole budget at rest = %v", err)
	}
	full.Release()
}

// TestAuditConflictInFlight resubmits an event_id with another payload
// while the batch holding the first is being committed: it is refused with
// a *ConflictError naming the event, and only the first is stored.
func TestAuditConflictInFlight(t *testing.T) {
	g := newGate()
	defer g.open()
	entered := make(chan struct{})
	hs := &hookStore{Store: tempStore(t)}
	hs.hook = func(n int, _ *store.Batch) error {
		if n == 1 {
			close(entered)
			g.wait()
		}
		return nil
	}
	s := start(t, testConfig(), testBuckets(), hs)
	first := &Request{Tenant: tenant, Audit: []model.AuditEvent{event("s", "x", base, "first")}, Readings: []model.Reading{reading("d", base, "m")}}
	second := &Request{Tenant: tenant, Audit: []model.AuditEvent{event("s", "x", base, "second")}, Readings: []model.Reading{reading("d", base, "m")}}
	var wg sync.WaitGroup
	var err1 error
	wg.Go(func() { err1 = s.Write(context.Background(), first) })
	<-entered
	err2 := s.Write(context.Background(), second)
	var ce *ConflictError
	if !errors.As(err2, &ce) || ce.EventID != "x" || ce.Stream != "s" {
		t.Errorf("second Write = %v, want a *ConflictError naming event x of stream s", err2)
	}
	g.open()
	wg.Wait()
	if err1 != nil {
		t.Fatalf("first Write: %v", err1)
	}
	if diff := cmp.Diff([]model.AuditEvent{first.Audit[0]}, readAudit(t, hs.Store, tenant, "s")); diff != "" {
		t.Errorf("stored events mismatch (-want +got):\n%s", diff)
	}
}

// TestAuditGate refuses a whole request when the gate refuses one of its
// events.
func TestAuditGate(t *testing.T) {
	st := tempStore(t)
	late := errors.New("late")
	s := New(testConfig(), testBuckets(), st, slog.New(slog.DiscardHandler), nil, WithInFlightCheck(), WithAuditGate(func(e *model.AuditEvent) error {
		if e.EventID == "late" {
			return late
		}
		return nil
	}))
	t.Cleanup(func() { _ = s.Close(context.Background()) })
	req := &Request{Tenant: tenant, Audit: []model.AuditEvent{event("s", "ok", base, "u"), event("s", "late", base, "u")}}
	if err := s.Write(context.Background(), req); !errors.Is(err, late) {
		t.Fatalf("Write = %v, want the gate's error", err)
	}
	if got := readAudit(t, st, tenant, "s"); len(got) != 0 {
		t.Errorf("%d events stored, want none", len(got))
	}
}

// The planner stays near buckets.max_series_days while more distinct
// series-days than that are written within one settle interval: their
// entries run ahead, which keeps a series-day in memory until they are
// settled, so a planner over its bound settles idle ones early (here every
// 100 ms, a 32nd of the interval) instead of at the next tick, which comes
// only after the rounds below. Without that, every series-day written in
// the interval was held (here all 400, against a bound of 20).
func TestPlannerBoundedWithinSettleInterval(t *testing.T) {
	const interval = 3200 * time.Millisecond
	st := tempStore(t)
	bcfg := testBuckets()
	bcfg.MaxSeriesDays = 20
	bcfg.Reserve = buckets.DefaultReserve(bcfg) // as the gateway runs: entries ahead
	s := New(testConfig(), bcfg, st, discard, prometheus.NewRegistry(), WithSettleInterval(interval), WithInFlightCheck())
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := s.Close(ctx); err != nil {
			t.Errorf("close sink: %v", err)
		}
	})
	peak := 0.0
	start := time.Now()
	rounds := 0
	// Rounds of 10 new series-days each, every 20 ms, stopping well before
	// the first regular settle.
	for ; rounds < 40 && time.Since(start) < interval*3/4; rounds++ {
		var rs []model.Reading
		for d := range 10 {
			rs = append(rs, reading(fmt.Sprintf("dev-%d-%d", rounds, d), base+int64(rounds), "a"))
		}
		if err := s.Write(t.Context(), &Request{Tenant: tenant, Readings: rs}); err != nil {
			t.Fatal(err)
		}
		peak = max(peak, testutil.ToFloat64(s.m.seriesDays))
		time.Sleep(20 * time.Millisecond)
	}
	if rounds < 30 {
		t.Fatalf("only %d rounds of 20 ms in %s: too few to tell a bounded planner from one holding them all", rounds, interval*3/4)
	}
	// The bound, plus the series-days written in one or two early-settle
	// periods (about five rounds each) and those whose settle is still
	// being committed; 10 per round without early settles.
	t.Logf("%d rounds: planner held up to %v series-days", rounds, peak)
	if limit := 200.0; peak > limit {
		t.Errorf("planner held up to %v series-days, want at most %v", peak, limit)
	}
	// Nothing written was lost on the way: every reading reads back, from
	// the partitions its series-day's catalogue names.
	for round := range rounds {
		for d := range 10 {
			sd := model.SeriesDay{Kind: model.KindReadings, Tenant: tenant, Series: fmt.Sprintf("dev-%d-%d", round, d), Day: model.DayOf(base)}
			parts, err := st.Catalogue(t.Context(), sd)
			if err != nil {
				t.Fatal(err)
			}
			n := 0
			for _, p := range parts {
				rows, err := st.ScanReadings(t.Context(), p.Key, store.Range{From: base, To: base + day}, 10)
				if err != nil {
					t.Fatal(err)
				}
				n += len(rows)
			}
			if n != 1 {
				t.Errorf("%v: %d rows read back, want 1", sd, n)
			}
		}
	}
}

// recordingHook is a CommitHook that refuses batches while refuse is set
// and records what it was told.
type recordingHook struct {
	mu            sync.Mutex
	refuse        bool
	before        int
	after, failed int
}

func (h *recordingHook) BeforeCommit(*store.Batch) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.refuse {
		return errors.New("marks unavailable")
	}
	h.before++
	return nil
}

func (h *recordingHook) AfterCommit(_ *store.Batch, err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.after++
	if err != nil {
		h.failed++
	}
}

// A batch the commit hook refuses is not written and its requests fail;
// every batch it accepted is reported back after its commit, failed or
// not, so that the hook can account for what it let through.
func TestCommitHook(t *testing.T) {
	var failing atomic.Bool
	hs := &hookStore{Store: tempStore(t), hook: func(int, *store.Batch) error {
		if failing.Load() {
			return errors.New("disk on fire")
		}
		return nil
	}}
	h := &recordingHook{refuse: true}
	s := start(t, testConfig(), testBuckets(), hs, WithCommitHook(h))
	write := func(i int) error {
		return s.Write(context.Background(), &Request{Tenant: tenant, Readings: []model.Reading{reading("dev", base+int64(i), "a")}})
	}
	if err := write(0); err == nil {
		t.Error("a request succeeded though the hook refused its batch")
	}
	if got := readAll(t, hs.Store, tenant, "dev"); len(got) != 0 {
		t.Errorf("a refused batch stored %d readings", len(got))
	}
	h.mu.Lock()
	h.refuse = false
	h.mu.Unlock()
	if err := write(1); err != nil {
		t.Fatal(err)
	}
	failing.Store(true)
	if err := write(2); err == nil {
		t.Error("a request succeeded though its commit failed")
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.before != 2 || h.after != 2 || h.failed != 1 {
		t.Errorf("hook told %d before, %d after (%d failed); want 2, 2 and 1", h.before, h.after, h.failed)
	}
}
