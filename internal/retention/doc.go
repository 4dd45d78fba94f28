// Package retention expires data by age, the way Sluice's tables are built
// for: whole UTC day buckets at a time, never row by row.
//
// A bucket is (kind, tenant, day): one day of one tenant's readings, audit
// events or dead letters, or one day of every tenant's rollups. Config holds
// the policies (a default and per-tenant overrides) and their validation;
// Plan is a pure function that, given the policies, the time and the
// buckets that exist, returns those whose WHOLE day is older than their
// policy (day end <= now - policy); the Sweeper lists buckets from the
// backends' catalogues, plans, and drops each planned bucket through the
// small Store interface: data first, catalogue entries last.
//
// Guarantees:
//   - Nothing inside its policy is dropped: a bucket goes only when its last
//     millisecond is past the horizon, so late rows of a day are kept as
//     long as the day is, and ingest refuses rows older than the horizon
//     (Config.Horizon), which could only land in an expired day.
//   - Crash-safe and idempotent: a bucket stays listed (its catalogue is
//     there) until its data is gone, and every delete is idempotent, so a
//     sweep killed midway is finished by the next one; two sweepers running
//     at once both succeed and leave the same result.
//   - Readers never see a half-dropped day through the gateway: Hide serves
//     no catalogue entry of an expired day, and only expired days are
//     dropped.
//
// The package never reads the clock itself (it is passed in) and does no
// I/O but through the Store interface.
package retention
