package retention

import (
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/sluicehq/sluice/internal/model"
	"github.com/sluicehq/sluice/internal/store"
)

// Policy is how long each kind of data is kept. In a tenant override a zero
// field means "the default policy".
type Policy struct {
	Readings    Duration `mapstructure:"readings"`
	Audit       Duration `mapstructure:"audit"`
	Rollups     Duration `mapstructure:"rollups"`
	DeadLetters Duration `mapstructure:"dead_letters"`
}

func (p Policy) get(k store.BucketKind) Duration {
	switch k {
	case store.BucketReadings:
		return p.Readings
	case store.BucketAudit:
		return p.Audit
	case store.BucketRollups:
		return p.Rollups
	case store.BucketDeadLetters:
		return p.DeadLetters
	}
	return 0
}

// Config is the retention configuration (key retention.*).
type Config struct {
	// Policy is the default for every tenant (retention.readings, ...).
	Policy `mapstructure:",squash"`
	// AuditFloor is the shortest audit policy accepted, for every tenant:
	// a guard against a typo deleting records that must be kept.
	AuditFloor Duration `mapstructure:"audit_floor"`
	// Enabled runs the sweeper in the gateway every Interval. Policies
	// still bound ingest and reads when it is off.
	Enabled  bool     `mapstructure:"enabled"`
	Interval Duration `mapstructure:"interval"`
	// Tenants overrides the default policy per tenant.
	Tenants map[string]Policy `mapstructure:"tenants"`
}

// DefaultConfig keeps readings 30 days, audit events 400 days, rollups two
// years and dead letters 30 days, and sweeps hourly.
func DefaultConfig() Config {
	return Config{
		Policy: Policy{
			Readings:    Duration(30 * Day),
			Audit:       Duration(400 * Day),
			Rollups:     Duration(2 * Year),
			DeadLetters: Duration(30 * Day),
		},
		AuditFloor: Duration(90 * Day),
		Enabled:    true,
		Interval:   Duration(time.Hour),
		Tenants:    map[string]Policy{},
	}
}

// Bound is a duration every policy must be longer than, with the key that
// sets it, e.g. limits.max_future or an allowed lateness: data younger than
// it may still arrive, so it must not be dropped.
type Bound struct {
	Key string
	D   time.Duration
}

// Validate reports every bad setting, naming its key. Policies are refused
// when zero or negative, shorter than one day (data expires by whole UTC
// days), not longer than a bound, or, for audit, shorter than audit_floor.
func (c Config) Validate(bounds ...Bound) error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	check := func(key string, d Duration, override bool) {
		switch {
		case override && d == 0:
			return // inherits the default
		case d <= 0:
			bad("%s: must be a positive duration such as 30d or 2y, got %s (retention cannot be switched off by zero: it would drop everything)", key, d)
			return
		case d.D() < Day:
			bad("%s: must be at least 1d (data expires by whole UTC days), got %s", key, d)
			return
		}
		for _, b := range bounds {
			if d.D() <= b.D {
				bad("%s: must be longer than %s (%s): data that young may still arrive, got %s", key, b.Key, b.D, d)
			}
		}
	}
	policy := func(prefix string, p Policy, override bool) {
		check(prefix+"readings", p.Readings, override)
		check(prefix+"audit", p.Audit, override)
		check(prefix+"rollups", p.Rollups, override)
		check(prefix+"dead_letters", p.DeadLetters, override)
		if p.Audit > 0 && p.Audit < c.AuditFloor {
			bad("%saudit: must be at least retention.audit_floor (%s), got %s", prefix, c.AuditFloor, p.Audit)
		}
	}
	if c.AuditFloor < 0 {
		bad("retention.audit_floor: must not be negative, got %s", c.AuditFloor)
	}
	policy("retention.", c.Policy, false)
	names := make([]string, 0, len(c.Tenants))
	for t := range c.Tenants {
		names = append(names, t)
	}
	slices.Sort(names)
	for _, t := range names {
		if !model.ValidTenant(t) {
			bad("retention.tenants: %q is not a tenant name ("+model.TenantRule+")", t)
			continue
		}
		policy("retention.tenants."+t+".", c.Tenants[t], true)
	}
	if c.Interval.D() < time.Minute {
		bad("retention.interval: must be at least 1m, got %s", c.Interval)
	}
	return errors.Join(errs...)
}

// For returns how long data of kind k of tenant is kept. For the rollups of
// every tenant at once (tenant ""), it is the longest rollups policy of any
// tenant: a ClickHouse day partition holds all tenants, so it may only go
// when every tenant's policy lets it.
func (c Config) For(k store.BucketKind, tenant string) time.Duration {
	d := c.Policy.get(k)
	if tenant == "" {
		for _, p := range c.Tenants {
			d = max(d, p.get(k))
		}
		return d.D()
	}
	if p, ok := c.Tenants[tenant]; ok && p.get(k) > 0 {
		d = p.get(k)
	}
	return d.D()
}

// Horizon is the oldest instant of kind k of tenant that is kept at now.
// Ingest refuses rows older than it: their day would already be expired.
func (c Config) Horizon(k store.BucketKind, tenant string, now time.Time) time.Time {
	return now.Add(-c.For(k, tenant))
}
