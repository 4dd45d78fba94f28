package quota

import (
	"errors"
	"fmt"

	"github.com/sluicehq/sluice/internal/model"
)

// MaxValue is the largest value any quota setting accepts: far beyond what
// one gateway can carry, and it keeps every burst an int on every platform.
const MaxValue = 1<<31 - 1

// Limits are one tenant's quotas. Zero means unlimited, except for a
// burst, where zero means one second of its rate.
type Limits struct {
	// Rows (readings, audit events, dead letters) per second, refilled
	// continuously, and how many may be taken at once from a full bucket.
	RowsPerSecond int64 `mapstructure:"rows_per_second"`
	RowBurst      int64 `mapstructure:"row_burst"`
	// Request body bytes per second as sent (compressed or not; MQTT:
	// payload bytes), and the burst.
	BytesPerSecond int64 `mapstructure:"bytes_per_second"`
	ByteBurst      int64 `mapstructure:"byte_burst"`
	// HTTP ingest requests of the tenant being served at once.
	MaxConcurrentRequests int64 `mapstructure:"max_concurrent_requests"`
}

// Unlimited reports whether no quota applies.
func (l Limits) Unlimited() bool {
	return l.RowsPerSecond == 0 && l.BytesPerSecond == 0 && l.MaxConcurrentRequests == 0
}

// rowBurst and byteBurst are the effective bursts.
func (l Limits) rowBurst() int64  { return burst(l.RowBurst, l.RowsPerSecond) }
func (l Limits) byteBurst() int64 { return burst(l.ByteBurst, l.BytesPerSecond) }

func burst(b, rate int64) int64 {
	if b == 0 {
		return rate
	}
	return b
}

// Override is one tenant's exceptions to the default quotas: a setting
// left out (nil) inherits the default; 0 is unlimited.
type Override struct {
	Tenant                string `mapstructure:"tenant"`
	RowsPerSecond         *int64 `mapstructure:"rows_per_second"`
	RowBurst              *int64 `mapstructure:"row_burst"`
	BytesPerSecond        *int64 `mapstructure:"bytes_per_second"`
	ByteBurst             *int64 `mapstructure:"byte_burst"`
	MaxConcurrentRequests *int64 `mapstructure:"max_concurrent_requests"`
}

// apply returns def with the override's settings.
func (o Override) apply(def Limits) Limits {
	set := func(dst *int64, src *int64) {
		if src != nil {
			*dst = *src
		}
	}
	set(&def.RowsPerSecond, o.RowsPerSecond)
	set(&def.RowBurst, o.RowBurst)
	set(&def.BytesPerSecond, o.BytesPerSecond)
	set(&def.ByteBurst, o.ByteBurst)
	set(&def.MaxConcurrentRequests, o.MaxConcurrentRequests)
	return def
}

// Config is the quota configuration (key quotas.*).
type Config struct {
	// Default applies to every tenant without an override.
	Default Limits `mapstructure:"default"`
	// Tenants override the default per tenant (a list, since tenant names
	// are case-sensitive and configuration keys are not).
	Tenants []Override `mapstructure:"tenants"`
}

// DefaultConfig sets no quota: a single-tenant gateway runs as fast as its
// pipeline, whose global budget (sink.queue_rows) still answers 503 when
// full. A gateway shared by tenants sets quotas.default.
func DefaultConfig() Config {
	return Config{Tenants: []Override{}}
}

// Bound is the least a burst may be, with the key that sets it: the
// largest request must fit in a full bucket, or it could never pass.
type Bound struct {
	Key string
	N   int64
}

// Bounds are the bounds of the row and byte bursts.
type Bounds struct {
	Rows  Bound // e.g. limits.max_rows
	Bytes Bound // e.g. http.max_body_bytes
}

// Validate reports every bad setting, naming its key.
func (c Config) Validate(b Bounds) error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	// check reports the settings of l that own reports as set here (the
	// others were inherited from the default and reported there).
	check := func(prefix string, l Limits, own func(key string) bool) {
		for _, f := range []struct {
			key string
			v   int64
		}{
			{"rows_per_second", l.RowsPerSecond}, {"row_burst", l.RowBurst},
			{"bytes_per_second", l.BytesPerSecond}, {"byte_burst", l.ByteBurst},
			{"max_concurrent_requests", l.MaxConcurrentRequests},
		} {
			if own(f.key) && (f.v < 0 || f.v > MaxValue) {
				bad("%s%s: must be 0 (unlimited) to %d, got %d", prefix, f.key, MaxValue, f.v)
			}
		}
		for _, q := range []struct {
			rateKey, burstKey string
			rate, burst, eff  int64
			min               Bound
		}{
			{"rows_per_second", "row_burst", l.RowsPerSecond, l.RowBurst, l.rowBurst(), b.Rows},
			{"bytes_per_second", "byte_burst", l.BytesPerSecond, l.ByteBurst, l.byteBurst(), b.Bytes},
		} {
			if !own(q.rateKey) && !own(q.burstKey) {
				continue
			}
			if q.rate <= 0 || q.rate > MaxValue || q.burst < 0 || q.burst > MaxValue || q.eff >= q.min.N {
				continue
			}
			if q.burst == 0 {
				bad("%s%s: 0 means one second of %s (%d), less than %s (%d): the largest request could never pass; set %s to at least %d",
					prefix, q.burstKey, q.rateKey, q.rate, q.min.Key, q.min.N, q.burstKey, q.min.N)
				continue
			}
			bad("%s%s: must be at least %s (%d) so that the largest request fits, got %d", prefix, q.burstKey, q.min.Key, q.min.N, q.burst)
		}
	}
	check("quotas.default.", c.Default, func(string) bool { return true })
	seen := make(map[string]bool, len(c.Tenants))
	for i, o := range c.Tenants {
		prefix := fmt.Sprintf("quotas.tenants[%d].", i)
		if !model.ValidTenant(o.Tenant) {
			bad("%stenant: %q must be "+model.TenantRule, prefix, o.Tenant)
			continue
		}
		if seen[o.Tenant] {
			bad("%stenant: %q is listed twice", prefix, o.Tenant)
			continue
		}
		seen[o.Tenant] = true
		set := map[string]bool{
			"rows_per_second": o.RowsPerSecond != nil, "row_burst": o.RowBurst != nil,
			"bytes_per_second": o.BytesPerSecond != nil, "byte_burst": o.ByteBurst != nil,
			"max_concurrent_requests": o.MaxConcurrentRequests != nil,
		}
		check(prefix, o.apply(c.Default), func(key string) bool { return set[key] })
	}
	return errors.Join(errs...)
}
