package retention_test

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/model"
	"github.com/sluicehq/sluice/internal/retention"
	"github.com/sluicehq/sluice/internal/store"
)

// backend is what the suite needs of a store under test: the sweeper's
// interface plus writes and reads to set up and check the data.
type backend interface {
	retention.Store
	Commit(ctx context.Context, b *store.Batch) error
	Catalogue(ctx context.Context, sd model.SeriesDay) ([]model.PartitionInfo, error)
	ScanReadings(ctx context.Context, pk model.PartitionKey, r store.Range, limit int) ([]model.ReadingRow, error)
	ScanAudit(ctx context.Context, pk model.PartitionKey, r store.Range, limit int) ([]model.AuditEvent, error)
	ScanDeadLetters(ctx context.Context, tenant string, day model.Day, r store.Range, limit int) ([]model.DeadLetter, error)
	AuditSeen(ctx context.Context, ids []store.AuditID) ([]bool, error)
}

var discard = slog.New(slog.DiscardHandler)

// now is 10:00 UTC, so that "days kept" is plain arithmetic below.
var now = time.Date(2026, 3, 1, 10, 0, 0, 0, time.UTC)

var today = model.DayOf(now.UnixMilli())

const days = 40

// tenantSpec is one tenant of the fixture: its policies in days and how
// many rows each of its partitions gets.
type tenantSpec struct {
	name                     string
	readings, audit, letters int // policy in days
	rows                     int // rows per partition
}

// fixture is 40 days of readings, audit events and dead letters of several
// tenants with different policies, written through the stores directly
// (the ingest horizon would refuse the old days).
type fixture struct {
	tenants []tenantSpec
	cfg     retention.Config
}

func newFixture(prefix string) fixture {
	f := fixture{tenants: []tenantSpec{
		{name: prefix + "acme", readings: 30, audit: 400, letters: 30, rows: 6},
		{name: prefix + "bulk", readings: 30, audit: 400, letters: 30, rows: 60}, // acme with 10x the rows
		{name: prefix + "brief", readings: 10, audit: 35, letters: 5, rows: 6},
	}}
	f.cfg = retention.DefaultConfig()
	f.cfg.AuditFloor = retention.Duration(retention.Day)
	f.cfg.Tenants = map[string]retention.Policy{}
	for _, t := range f.tenants {
		f.cfg.Tenants[t.name] = retention.Policy{
			Readings: retention.Duration(time.Duration(t.readings) * retention.Day), Audit: retention.Duration(time.Duration(t.audit) * retention.Day),
			DeadLetters: retention.Duration(time.Duration(t.letters) * retention.Day),
		}
	}
	return f
}

// The partitions of each tenant-day: d1 in its single partition and a
// split one, d2 in the single partition of another gateway (writer 1), and
// a late partition of d1 written after the day was complete.
var (
	subSingle  = uint32(0)
	subSplit   = uint32(1<<24 | 1)
	subOther   = uint32(1 << 16)
	subLate    = uint32(1<<24 | 2)
	readingPKs = []struct {
		series string
		sub    uint32
	}{{"d1", subSingle}, {"d1", subSplit}, {"d2", subOther}, {"d1", subLate}}
)

func (f fixture) eventID(t tenantSpec, d model.Day, j int) string {
	return fmt.Sprintf("%s-%d-%d", t.name, d, j)
}

// write stores the fixture: gw is this gateway, other a second gateway on
// the same store (the same store for the embedded backend).
func (f fixture) write(t *testing.T, gw, other backend) {
	t.Helper()
	ctx := t.Context()
	var wg sync.WaitGroup
	errs := make([]error, len(f.tenants))
	for ti, ts := range f.tenants {
		wg.Go(func() { errs[ti] = f.writeTenant(ctx, ts, gw, other) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
}

func (f fixture) writeTenant(ctx context.Context, ts tenantSpec, gw, other backend) error {
	{
		for i := range days {
			d := today - model.Day(i)
			var main, second, late store.Batch
			for _, p := range readingPKs {
				pk := model.PartitionKey{Kind: model.KindReadings, Tenant: ts.name, Series: p.series, Day: d, Sub: p.sub}
				pw := store.PartitionWrite{Key: pk}
				for j := range ts.rows {
					// Rows spread over the whole day; the late partition holds
					// the day's last milliseconds.
					at := d.Start() + int64(j)*(model.MillisPerDay/int64(ts.rows))
					if p.sub == subLate {
						at = d.End() - 1 - int64(j)
					}
					pw.Readings = append(pw.Readings, typedRow(at, j))
				}
				pi := model.PartitionInfo{Key: pk, Rows: int64(ts.rows), Bytes: int64(ts.rows) * 18, MinTS: d.Start(), MaxTS: d.End() - 1, State: "single"}
				b := &main
				switch p.sub {
				case subOther:
					b = &second
				case subLate:
					b = &late
				}
				b.Partitions = append(b.Partitions, pw)
				b.Catalogue = append(b.Catalogue, pi)
			}
			apk := model.PartitionKey{Kind: model.KindAudit, Tenant: ts.name, Series: "s", Day: d}
			pw := store.PartitionWrite{Key: apk}
			for j := range ts.rows {
				pw.Events = append(pw.Events, model.AuditEvent{EventID: f.eventID(ts, d, j), Stream: "s", TS: d.Start() + int64(j)*1000, Action: "login"})
			}
			main.Partitions = append(main.Partitions, pw)
			main.Catalogue = append(main.Catalogue, model.PartitionInfo{Key: apk, Rows: int64(ts.rows), MinTS: d.Start(), MaxTS: d.Start() + int64(ts.rows)*1000, State: "single"})
			for j := range 2 {
				main.DeadLetters = append(main.DeadLetters, model.DeadLetter{Tenant: ts.name, TS: d.Start() + int64(j)*5*3_600_000, ID: fmt.Sprint(j),
					Source: "mqtt", Reason: "invalid_json", Payload: []byte("{")})
			}
			for _, c := range []struct {
				st backend
				b  *store.Batch
			}{{gw, &main}, {other, &second}, {gw, &late}} {
				if err := c.st.Commit(ctx, c.b); err != nil {
					return fmt.Errorf("commit %s %s: %w", ts.name, d, err)
				}
			}
		}
	}
	return nil
}

// kept is the expectation, computed without the package under test: with
// now at 10:00, a policy of P days keeps today and the P days before it.
// typedRow is row j of a partition: its value a float, an int, a bool or a
// string in turn, so that retention is checked on every type of value.
func typedRow(at int64, j int) model.ReadingRow {
	r := model.ReadingRow{TS: at, Metric: "m"}
	switch j % 4 {
	case 0:
		r.Value = float64(j)
	case 1:
		r.Type, r.Int = model.TypeInt, int64(j)
	case 2:
		r.Type, r.Int = model.TypeBool, int64(j/2%2)
	default:
		r.Type, r.Str = model.TypeString, fmt.Sprintf("state-%d", j)
	}
	return r
}

func kept(policyDays int, d model.Day) bool { return int(today-d) <= policyDays }

// check verifies every tenant-day of every kind: all of it is there when
// its policy keeps it, none of it (rows, catalogue, audit ids, dead
// letters) when not. keepAll overrides the expectation (dry runs).
func (f fixture) check(t *testing.T, st backend, keepAll bool) {
	t.Helper()
	ctx := t.Context()
	bad := 0
	for _, ts := range f.tenants {
		for i := range days {
			d := today - model.Day(i)
			all := store.Range{From: d.Start(), To: d.End()}
			// readings
			want := 0
			if keepAll || kept(ts.readings, d) {
				want = ts.rows
			}
			for _, p := range readingPKs {
				pk := model.PartitionKey{Kind: model.KindReadings, Tenant: ts.name, Series: p.series, Day: d, Sub: p.sub}
				rows, err := st.ScanReadings(ctx, pk, all, 100_000)
				if err != nil {
					t.Fatal(err)
				}
				if len(rows) != want {
					bad++
					t.Errorf("%v: %d rows, want %d", pk, len(rows), want)
				}
				// The kept rows are the written ones, with their types.
				var got, wantRows []model.ReadingRow
				for j := range len(rows) {
					wantRows = append(wantRows, typedRow(0, j))
					r := rows[j]
					r.TS = 0
					got = append(got, r)
				}
				sortRows := func(rs []model.ReadingRow) {
					slices.SortFunc(rs, func(a, b model.ReadingRow) int {
						return cmp.Or(cmp.Compare(a.Type, b.Type), cmp.Compare(a.Value, b.Value), cmp.Compare(a.Int, b.Int), strings.Compare(a.Str, b.Str))
					})
				}
				sortRows(got)
				sortRows(wantRows)
				if len(rows) == want && !slices.Equal(got, wantRows) {
					bad++
					t.Errorf("%v: rows %v, want the values written, %v", pk, got, wantRows)
				}
			}
			for _, series := range []string{"d1", "d2"} {
				cat, err := st.Catalogue(ctx, model.SeriesDay{Kind: model.KindReadings, Tenant: ts.name, Series: series, Day: d})
				if err != nil {
					t.Fatal(err)
				}
				wantCat := map[bool]int{true: 3, false: 1}[series == "d1"]
				if want == 0 {
					wantCat = 0
				}
				if len(cat) != wantCat {
					bad++
					t.Errorf("readings catalogue of %s %s %s: %d entries, want %d", ts.name, series, d, len(cat), wantCat)
				}
			}
			// audit
			want = 0
			if keepAll || kept(ts.audit, d) {
				want = ts.rows
			}
			apk := model.PartitionKey{Kind: model.KindAudit, Tenant: ts.name, Series: "s", Day: d}
			evs, err := st.ScanAudit(ctx, apk, all, 100_000)
			if err != nil {
				t.Fatal(err)
			}
			cat, err := st.Catalogue(ctx, apk.SeriesDay())
			if err != nil {
				t.Fatal(err)
			}
			ids := make([]store.AuditID, ts.rows)
			for j := range ids {
				ids[j] = store.AuditID{Tenant: ts.name, Day: d, EventID: f.eventID(ts, d, j)}
			}
			seen, err := st.AuditSeen(ctx, ids)
			if err != nil {
				t.Fatal(err)
			}
			nSeen := 0
			for _, s := range seen {
				if s {
					nSeen++
				}
			}
			if len(evs) != want || nSeen != want || len(cat) != min(want, 1) {
				bad++
				t.Errorf("audit of %s %s: %d events, %d ids, %d catalogue entries; want %d, %d, %d", ts.name, d, len(evs), nSeen, len(cat), want, want, min(want, 1))
			}
			// dead letters
			want = 0
			if keepAll || kept(ts.letters, d) {
				want = 2
			}
			dls, err := st.ScanDeadLetters(ctx, ts.name, d, all, 1000)
			if err != nil {
				t.Fatal(err)
			}
			if len(dls) != want {
				bad++
				t.Errorf("dead letters of %s %s: %d, want %d", ts.name, d, len(dls), want)
			}
			if bad > 20 {
				t.Fatal("too many differences")
			}
		}
	}
}

// expectedDrops counts the buckets of each kind the policies expire.
func (f fixture) expectedDrops() map[store.BucketKind]int {
	out := map[store.BucketKind]int{}
	for _, ts := range f.tenants {
		for i := range days {
			d := today - model.Day(i)
			for k, p := range map[store.BucketKind]int{store.BucketReadings: ts.readings, store.BucketAudit: ts.audit, store.BucketDeadLetters: ts.letters} {
				if !kept(p, d) {
					out[k]++
				}
			}
		}
	}
	return out
}

func (f fixture) names() []string {
	var out []string
	for _, t := range f.tenants {
		out = append(out, t.name)
	}
	return out
}

// only keeps a report's buckets of the fixture's tenants (a Cassandra
// keyspace shared by several tests may hold others).
func (f fixture) only(bs []store.Bucket) []store.Bucket {
	var out []store.Bucket
	for _, b := range bs {
		if slices.Contains(f.names(), b.Tenant) {
			out = append(out, b)
		}
	}
	return out
}

func countKinds(bs []store.Bucket) map[store.BucketKind]int {
	out := map[store.BucketKind]int{}
	for _, b := range bs {
		out[b.Kind]++
	}
	return out
}

func sweeper(f fixture, st retention.Store) *retention.Sweeper {
	return retention.New(f.cfg, []retention.Store{st}, func() time.Time { return now }, discard, nil)
}

// runSuite is the retention acceptance test of one backend. open returns
// the store under test and a second gateway's store on the same data.
func runSuite(t *testing.T, open func(t *testing.T) (backend, backend)) {
	t.Run("sweep drops exactly the expired days", func(t *testing.T) {
		st, other := open(t)
		f := newFixture(uniq("s"))
		f.write(t, st, other)
		f.check(t, st, true)

		// A dry run plans and measures, and changes nothing.
		dry, err := sweeper(f, st).Sweep(t.Context(), retention.Options{DryRun: true})
		if err != nil {
			t.Fatal(err)
		}
		if got, want := countKinds(f.only(dry.Buckets)), f.expectedDrops(); !equalCounts(got, want) {
			t.Errorf("dry run planned %v, want %v", got, want)
		}
		if dry.Deletes != 0 {
			t.Errorf("dry run issued %d deletes", dry.Deletes)
		}
		f.check(t, st, true)

		// One tenant at a time, so that acme and bulk (10x the rows) can be
		// compared: the deletes grow with buckets, not rows.
		reps := map[string]retention.Report{}
		for _, ts := range f.tenants {
			rep, err := sweeper(f, st).Sweep(t.Context(), retention.Options{Tenant: ts.name})
			if err != nil {
				t.Fatalf("sweep %s: %v", ts.name, err)
			}
			reps[ts.name] = rep
		}
		acme, bulk := reps[f.tenants[0].name], reps[f.tenants[1].name]
		for _, k := range []store.BucketKind{store.BucketReadings, store.BucketDeadLetters} {
			a, b := acme.Kinds[k], bulk.Kinds[k]
			if a == nil || b == nil || a.Days == 0 || a.Days != b.Days {
				t.Fatalf("%s: acme %+v, bulk %+v: want the same number of days dropped", k, a, b)
			}
			if a.Deletes != b.Deletes {
				t.Errorf("%s: %d deletes for acme, %d for bulk with 10x the rows: deletes must not grow with rows", k, a.Deletes, b.Deletes)
			}
			t.Logf("%s: acme %d days %d rows %d deletes; bulk %d days %d rows %d deletes", k, a.Days, a.Rows, a.Deletes, b.Days, b.Rows, b.Deletes)
		}
		if a, b := acme.Kinds[store.BucketReadings], bulk.Kinds[store.BucketReadings]; b.Rows != 10*a.Rows || a.Rows == 0 {
			t.Errorf("readings rows: acme %d, bulk %d; want bulk = 10 x acme", a.Rows, b.Rows)
		}
		f.check(t, st, false)

		// Nothing left to do: a second sweep plans nothing of these tenants.
		again, err := sweeper(f, st).Sweep(t.Context(), retention.Options{})
		if err != nil {
			t.Fatal(err)
		}
		if n := len(f.only(again.Buckets)); n != 0 {
			t.Errorf("second sweep planned %d buckets", n)
		}
		f.check(t, st, false)
	})

	t.Run("killed sweep is finished by the next", func(t *testing.T) {
		st, other := open(t)
		f := newFixture(uniq("k"))
		f.write(t, st, other)
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		crash := &crashing{Store: st, cancel: cancel, crashAt: 5}
		_, err := sweeper(f, crash).Sweep(ctx, retention.Options{})
		if err == nil {
			t.Fatal("the crashing sweep reported no error")
		}
		if crash.dataDropped == 0 {
			t.Fatal("the crashing sweep dropped nothing before it crashed")
		}
		// The bucket whose data went but whose catalogue did not is still
		// listed, so the next sweep finds it.
		listed, err := st.Buckets(t.Context(), today+1)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Contains(listed, crash.halfDone) {
			t.Fatalf("half-dropped bucket %v is no longer listed", crash.halfDone)
		}
		rep, err := sweeper(f, st).Sweep(t.Context(), retention.Options{})
		if err != nil {
			t.Fatalf("resumed sweep: %v", err)
		}
		if !slices.Contains(rep.Buckets, crash.halfDone) {
			t.Errorf("resumed sweep did not finish %v", crash.halfDone)
		}
		f.check(t, st, false)
	})

	t.Run("two sweepers at once", func(t *testing.T) {
		st, other := open(t)
		f := newFixture(uniq("c"))
		f.write(t, st, other)
		var wg sync.WaitGroup
		errs := make([]error, 2)
		for i, s := range []backend{st, other} {
			wg.Go(func() { _, errs[i] = sweeper(f, s).Sweep(t.Context(), retention.Options{}) })
		}
		wg.Wait()
		if err := errors.Join(errs...); err != nil {
			t.Fatal(err)
		}
		f.check(t, st, false)
	})
}

func equalCounts(a, b map[store.BucketKind]int) bool {
	for _, k := range store.BucketKinds {
		if a[k] != b[k] {
			return false
		}
	}
	return true
}

// crashing stands for a gateway killed midway through a sweep: on the
// crashAt-th readings bucket it drops the data and dies before the catalogue; the
// sweep's context is cancelled then, so nothing after it runs.
type crashing struct {
	retention.Store
	cancel      context.CancelFunc
	crashAt     int
	n           int
	dataDropped int
	halfDone    store.Bucket
}

func (c *crashing) DropData(ctx context.Context, b store.Bucket) (int, error) {
	n, err := c.Store.DropData(ctx, b)
	if err == nil {
		c.dataDropped++
	}
	return n, err
}

func (c *crashing) DropCatalogue(ctx context.Context, b store.Bucket) (int, error) {
	if b.Kind == store.BucketReadings {
		c.n++
	}
	if c.n == c.crashAt && c.halfDone == (store.Bucket{}) {
		c.halfDone = b
		c.cancel()
		return 0, errors.New("killed")
	}
	return c.Store.DropCatalogue(ctx, b)
}

var uniqN int

func uniq(p string) string {
	uniqN++
	return fmt.Sprintf("%s%d-%d-", p, time.Now().UnixNano()%1_000_000, uniqN)
}
