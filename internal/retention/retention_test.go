package retention_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/sluicehq/sluice/internal/model"
	"github.com/sluicehq/sluice/internal/retention"
	"github.com/sluicehq/sluice/internal/store"
)

func TestParseDuration(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want time.Duration
		str  string
		err  string
	}{
		{in: "30d", want: 30 * 24 * time.Hour, str: "30d"},
		{in: "2y", want: 2 * 365 * 24 * time.Hour, str: "2y"},
		{in: "365d", want: 365 * 24 * time.Hour, str: "1y"},
		{in: "2w", want: 14 * 24 * time.Hour, str: "14d"},
		{in: "12h", want: 12 * time.Hour, str: "12h0m0s"},
		{in: "48h", want: 48 * time.Hour, str: "2d"},
		{in: " 90m ", want: 90 * time.Minute, str: "1h30m0s"},
		{in: "0", want: 0, str: "0s"},
		{in: "", err: "empty duration"},
		{in: "d", err: `"d" is not a duration`},
		{in: "1.5d", err: `"1.5d" is not a duration`},
		{in: "-3d", err: `"-3d" is not a duration`},
		{in: "forever", err: `"forever" is not a duration`},
		{in: "99999999999y", err: "too long"},
	} {
		t.Run(tc.in, func(t *testing.T) {
			got, err := retention.ParseDuration(tc.in)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err = %v, want %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got.D() != tc.want || got.String() != tc.str {
				t.Errorf("= %v (%s), want %v (%s)", got.D(), got, tc.want, tc.str)
			}
		})
	}
}

// Every duration that parses prints as something that parses back to it.
func FuzzParseDuration(f *testing.F) {
	for _, s := range []string{"30d", "2y", "12h", "1h30m", "2w", "0", "-1s", "9223372036854775807ns"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		d, err := retention.ParseDuration(s)
		if err != nil {
			return
		}
		back, err := retention.ParseDuration(d.String())
		if err != nil || back != d {
			t.Fatalf("%q -> %v -> %q -> %v, %v", s, d.D(), d.String(), back.D(), err)
		}
	})
}

func policyConfig() retention.Config {
	c := retention.DefaultConfig() // readings 30d, audit 400d, rollups 2y, dead letters 30d
	c.Tenants = map[string]retention.Policy{
		"short": {Readings: retention.Duration(7 * retention.Day)},
		"long":  {Rollups: retention.Duration(3 * retention.Year)},
	}
	return c
}

func TestPlan(t *testing.T) {
	c := policyConfig()
	// 2026-03-01T00:00Z: the horizon of 30d is 2026-01-30T00:00Z exactly.
	midnight := time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)
	day := func(s string) model.Day {
		d, err := model.ParseDay(s)
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	b := func(k store.BucketKind, tenant, d string) store.Bucket {
		return store.Bucket{Kind: k, Tenant: tenant, Day: day(d)}
	}
	for _, tc := range []struct {
		name string
		now  time.Time
		in   []store.Bucket
		want []store.Bucket
	}{
		{name: "day ends exactly at the horizon: dropped", now: midnight,
			in: []store.Bucket{b(store.BucketReadings, "acme", "2026-01-29")}, want: []store.Bucket{b(store.BucketReadings, "acme", "2026-01-29")}},
		{name: "one millisecond earlier the day is kept", now: midnight.Add(-time.Millisecond),
			in: []store.Bucket{b(store.BucketReadings, "acme", "2026-01-29")}},
		{name: "a day partly past the horizon is kept", now: midnight.Add(12 * time.Hour),
			in: []store.Bucket{b(store.BucketReadings, "acme", "2026-01-30")}},
		{name: "per-tenant override", now: midnight,
			in:   []store.Bucket{b(store.BucketReadings, "short", "2026-02-21"), b(store.BucketReadings, "short", "2026-02-22"), b(store.BucketAudit, "short", "2026-02-01")},
			want: []store.Bucket{b(store.BucketReadings, "short", "2026-02-21")}},
		{name: "kinds have their own policies", now: midnight,
			in:   []store.Bucket{b(store.BucketAudit, "acme", "2025-01-24"), b(store.BucketAudit, "acme", "2025-01-25"), b(store.BucketDeadLetters, "acme", "2026-01-29")},
			want: []store.Bucket{b(store.BucketAudit, "acme", "2025-01-24"), b(store.BucketDeadLetters, "acme", "2026-01-29")}},
		{name: "all-tenant rollup days wait for the longest rollups policy", now: midnight,
			// 3y = 1095 days before 2026-03-01 (2024 has 366) is 2023-03-02T00:00Z.
			in:   []store.Bucket{b(store.BucketRollups, "", "2024-01-01"), b(store.BucketRollups, "", "2023-03-02"), b(store.BucketRollups, "", "2023-03-01")},
			want: []store.Bucket{b(store.BucketRollups, "", "2023-03-01")}},
		{name: "oldest first, duplicates once", now: midnight,
			in:   []store.Bucket{b(store.BucketReadings, "b", "2026-01-02"), b(store.BucketReadings, "a", "2026-01-05"), b(store.BucketReadings, "b", "2026-01-02"), b(store.BucketReadings, "a", "2026-01-01")},
			want: []store.Bucket{b(store.BucketReadings, "a", "2026-01-01"), b(store.BucketReadings, "b", "2026-01-02"), b(store.BucketReadings, "a", "2026-01-05")}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, retention.Plan(c, tc.now, tc.in)); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

// Before bounds what backends list: every bucket Plan can drop is before it.
func TestBefore(t *testing.T) {
	c := policyConfig()
	at := time.Date(2026, 3, 1, 10, 0, 0, 0, time.UTC)
	before := c.Before(at)
	// The shortest policy is short's 7d readings: 2026-02-22T10:00 is the
	// horizon, so 2026-02-21 is the last droppable day.
	if got := before.String(); got != "2026-02-22" {
		t.Fatalf("Before = %s, want 2026-02-22", got)
	}
	if len(retention.Plan(c, at, []store.Bucket{{Kind: store.BucketReadings, Tenant: "short", Day: before}})) != 0 {
		t.Error("the day Before returns is droppable")
	}
	if len(retention.Plan(c, at, []store.Bucket{{Kind: store.BucketReadings, Tenant: "short", Day: before - 1}})) != 1 {
		t.Error("the day before Before is not droppable")
	}
}

func TestHorizon(t *testing.T) {
	c := policyConfig()
	at := time.Date(2026, 3, 1, 10, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		kind   store.BucketKind
		tenant string
		want   string
	}{
		{store.BucketReadings, "acme", "2026-01-30T10:00:00Z"},
		{store.BucketReadings, "short", "2026-02-22T10:00:00Z"},
		{store.BucketAudit, "short", "2025-01-25T10:00:00Z"},
	} {
		if got := c.Horizon(tc.kind, tc.tenant, at).Format(time.RFC3339); got != tc.want {
			t.Errorf("Horizon(%s, %s) = %s, want %s", tc.kind, tc.tenant, got, tc.want)
		}
	}
}

func TestValidate(t *testing.T) {
	d := func(s string) retention.Duration {
		v, err := retention.ParseDuration(s)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	for _, tc := range []struct {
		name string
		mod  func(*retention.Config)
		want string // "" for valid
	}{
		{name: "defaults", mod: func(*retention.Config) {}},
		{name: "zero", mod: func(c *retention.Config) { c.Readings = 0 }, want: "retention.readings: must be a positive duration"},
		{name: "negative", mod: func(c *retention.Config) { c.DeadLetters = d("-1h") }, want: "retention.dead_letters: must be a positive duration"},
		{name: "under a day", mod: func(c *retention.Config) { c.Rollups = d("23h") }, want: "retention.rollups: must be at least 1d"},
		{name: "not past the lateness", mod: func(c *retention.Config) { c.Readings = d("2d") }, want: "retention.readings: must be longer than rollups.lateness (72h0m0s)"},
		{name: "audit under floor", mod: func(c *retention.Config) { c.Audit = d("89d") }, want: "retention.audit: must be at least retention.audit_floor (90d), got 89d"},
		{name: "tenant audit under floor", mod: func(c *retention.Config) { c.Tenants = map[string]retention.Policy{"acme": {Audit: d("30d")}} },
			want: "retention.tenants.acme.audit: must be at least retention.audit_floor"},
		{name: "tenant override inherits", mod: func(c *retention.Config) { c.Tenants = map[string]retention.Policy{"acme": {Readings: d("90d")}} }},
		{name: "bad tenant name", mod: func(c *retention.Config) { c.Tenants = map[string]retention.Policy{"a b": {}} }, want: `retention.tenants: "a b" is not a tenant name`},
		{name: "interval", mod: func(c *retention.Config) { c.Interval = d("10s") }, want: "retention.interval: must be at least 1m"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := retention.DefaultConfig()
			tc.mod(&c)
			err := c.Validate(retention.Bound{Key: "limits.max_future", D: 5 * time.Minute}, retention.Bound{Key: "rollups.lateness", D: 72 * time.Hour})
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("unexpected error: %v", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("err = %v, want %q", err, tc.want)
			}
		})
	}
}

// fakeRead serves one catalogue entry for every series-day.
type fakeRead struct{ retention.ReadStore }

func (fakeRead) Catalogue(_ context.Context, sd model.SeriesDay) ([]model.PartitionInfo, error) {
	return []model.PartitionInfo{{Key: sd.Partition(0), Rows: 1}}, nil
}

// Readers through Hide see no partition of an expired day, swept or not.
func TestHide(t *testing.T) {
	c := policyConfig()
	at := time.Date(2026, 3, 1, 10, 0, 0, 0, time.UTC)
	h := retention.Hide(fakeRead{}, c, func() time.Time { return at })
	for _, tc := range []struct {
		kind   model.Kind
		tenant string
		day    string
		want   int
	}{
		{model.KindReadings, "acme", "2026-01-29", 0},
		{model.KindReadings, "acme", "2026-01-30", 1},
		{model.KindReadings, "short", "2026-02-21", 0},
		{model.KindReadings, "short", "2026-02-22", 1},
		{model.KindAudit, "short", "2026-01-01", 1},
	} {
		d, _ := model.ParseDay(tc.day)
		got, err := h.Catalogue(t.Context(), model.SeriesDay{Kind: tc.kind, Tenant: tc.tenant, Series: "x", Day: d})
		if err != nil || len(got) != tc.want {
			t.Errorf("%s %s %s: %d entries (%v), want %d", tc.kind, tc.tenant, tc.day, len(got), err, tc.want)
		}
	}
}
