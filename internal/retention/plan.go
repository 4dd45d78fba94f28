package retention

import (
	"cmp"
	"slices"
	"time"

	"github.com/sluicehq/sluice/internal/model"
	"github.com/sluicehq/sluice/internal/store"
)

// Expired reports whether the whole of bucket b is older than its policy at
// now: the bucket's day ended at or before now minus the policy. A day that
// is only partly past the horizon is kept, so no row inside its policy is
// ever dropped, whenever it arrived.
func (c Config) Expired(b store.Bucket, now time.Time) bool {
	p := c.For(b.Kind, b.Tenant)
	if p <= 0 {
		return false // no policy: never expires (Validate refuses this)
	}
	return b.Day.End() <= now.Add(-p).UnixMilli()
}

// Before returns the first day that no policy can expire at now: every
// expired bucket's day is before it. Backends list only older days.
func (c Config) Before(now time.Time) model.Day {
	shortest := time.Duration(0)
	for _, k := range store.BucketKinds {
		for _, t := range append([]string{""}, tenantNames(c)...) {
			if p := c.minFor(k, t); p > 0 && (shortest == 0 || p < shortest) {
				shortest = p
			}
		}
	}
	if shortest == 0 {
		return model.DayOf(0)
	}
	// Day d is expired iff d.End() <= h, i.e. d < DayOf(h).
	return model.DayOf(now.Add(-shortest).UnixMilli())
}

// minFor is For, except that for tenant "" it is the default policy (the
// shortest a bucket of an unnamed tenant can have).
func (c Config) minFor(k store.BucketKind, tenant string) time.Duration {
	if tenant == "" {
		return c.Policy.get(k).D()
	}
	return c.For(k, tenant)
}

func tenantNames(c Config) []string {
	out := make([]string, 0, len(c.Tenants))
	for t := range c.Tenants {
		out = append(out, t)
	}
	return out
}

// Plan returns the buckets to drop at now: those of buckets whose whole day
// is older than their policy, oldest day first. It is pure: no I/O, and the
// clock is the now it is given. Duplicates in buckets appear once.
func Plan(c Config, now time.Time, buckets []store.Bucket) []store.Bucket {
	seen := make(map[store.Bucket]struct{}, len(buckets))
	var out []store.Bucket
	for _, b := range buckets {
		if _, dup := seen[b]; dup || !c.Expired(b, now) {
			continue
		}
		seen[b] = struct{}{}
		out = append(out, b)
	}
	slices.SortFunc(out, func(a, b store.Bucket) int {
		return cmp.Or(cmp.Compare(a.Day, b.Day), cmp.Compare(a.Kind, b.Kind), cmp.Compare(a.Tenant, b.Tenant))
	})
	return out
}
