// Package store holds the types that pass between the write and read paths
// and the storage backends (pebblestore, and later others): a commit batch
// grouped by partition, scan ranges and audit id keys. It does no I/O.
//
// The interfaces themselves are declared by their consumers (sink, readapi,
// retention); this package only carries the values they exchange, so that
// backends never import the packages that use them.
package store

import (
	"context"
	"fmt"

	"github.com/sluicehq/sluice/internal/model"
)

// PartitionWrite is everything one commit adds to one partition. A backend
// may write it as one unit (an UNLOGGED batch in CQL).
type PartitionWrite struct {
	Key      model.PartitionKey
	Readings []model.ReadingRow // Key.Kind == KindReadings
	Events   []model.AuditEvent // Key.Kind == KindAudit
	// NewFrom, when not zero, says that no reading of the series-day at
	// or after it was written (or is being written) by any batch but this
	// one, and that this is the batch's only write to the series-day: the
	// readings here at or after NewFrom are, once the batch is durable, all
	// the store holds of the series-day from NewFrom on, until a later
	// batch writes more; and a later batch that writes to one of its
	// minutes from NewFrom on is committed only after the commit hook's
	// AfterCommit for this one returned. math.MinInt64 says it of every
	// reading. The sink sets it when asked (sink.WithNewMinutes), on a
	// minute boundary; stores ignore it.
	NewFrom int64
}

// Batch is one atomic, durable commit: the rows grouped by partition and the
// catalogue entries they changed. A backend returns from Commit only once
// all of it is durable.
type Batch struct {
	Partitions  []PartitionWrite
	Catalogue   []model.PartitionInfo
	DeadLetters []model.DeadLetter // partitioned by (tenant, day of TS), clustered by (TS, ID)
	// Ahead lists partitions this batch writes rows to whose stored entry
	// may still be exact (or absent) while the batch's own entry for them
	// is not yet stored. A store that is not atomic (Cassandra) marks those
	// entries ahead before it writes any row, so that a crash between the
	// rows and the entries leaves an entry marked for reconciling, not an
	// exact-looking one that misses rows. An atomic store ignores it.
	Ahead []model.PartitionKey
	// Version, when not zero, orders this batch's writes against another
	// batch's writes of the same keys: the greater version wins, whichever
	// lands last. Set by the sink for backends that implement sink.Versioner.
	Version int64
	// Also, when set, adds keys of the caller's own to the batch's write,
	// on a store that writes a batch atomically (the embedded store): it
	// is called with that write, so that what it adds is durable exactly
	// when the batch is, and an error from it fails the commit. The
	// rollups' commit hook sets it for their marks (rollmarks.In); a
	// store that cannot honour it must not be given it.
	Also func(w Setter) error
}

// Setter takes the keys Batch.Also adds to a write. Set copies key and
// value: the caller may reuse them.
type Setter interface {
	Set(key, value []byte) error
}

// Rows counts the rows of the batch.
func (b *Batch) Rows() int {
	n := 0
	for _, p := range b.Partitions {
		n += len(p.Readings) + len(p.Events)
	}
	return n
}

// AuditID identifies an audit event for the idempotency check. The day is the
// UTC day of the event's timestamp: a retry carries the same event, so the
// same day.
type AuditID struct {
	Tenant  string
	Day     model.Day
	EventID string
}

// Pos is a position in a partition's clustering order (TS, Key), where Key is
// the metric name for readings and the event id for audit events.
type Pos struct {
	TS  int64
	Key string
}

// Less orders positions by clustering key.
func (p Pos) Less(q Pos) bool {
	if p.TS != q.TS {
		return p.TS < q.TS
	}
	return p.Key < q.Key
}

// Range selects rows of one partition: TS in [From, To), and, when After is
// set, clustering key strictly after *After.
type Range struct {
	From  int64
	To    int64
	After *Pos
}

// Contains reports whether the row at pos is inside the range.
func (r Range) Contains(pos Pos) bool {
	if pos.TS < r.From || pos.TS >= r.To {
		return false
	}
	return r.After == nil || r.After.Less(pos)
}

// BucketKind says which data a retention bucket holds. Readings and audit
// share their values with model.Kind.
type BucketKind uint8

// The kinds of data that expire.
const (
	BucketReadings               = BucketKind(model.KindReadings)
	BucketAudit                  = BucketKind(model.KindAudit)
	BucketDeadLetters BucketKind = 3
	BucketRollups     BucketKind = 4
)

// BucketKinds lists every kind, in report order.
var BucketKinds = []BucketKind{BucketReadings, BucketAudit, BucketDeadLetters, BucketRollups}

// String returns the kind's name as used in configuration and reports.
func (k BucketKind) String() string {
	switch k {
	case BucketReadings:
		return "readings"
	case BucketAudit:
		return "audit"
	case BucketDeadLetters:
		return "dead_letters"
	case BucketRollups:
		return "rollups"
	}
	return fmt.Sprintf("bucket_kind(%d)", uint8(k))
}

// Bucket is the unit retention drops: one UTC day of one tenant's data of
// one kind. Tenant is empty for a bucket that holds every tenant's day
// (ClickHouse rollup partitions).
type Bucket struct {
	Kind   BucketKind
	Tenant string
	Day    model.Day
}

func (b Bucket) String() string {
	t := b.Tenant
	if t == "" {
		t = "*"
	}
	return fmt.Sprintf("%s/%s/%s", b.Kind, t, b.Day)
}

// BucketSize is what a bucket holds, as its catalogue states it (counts are
// upper bounds: overwrites count again).
type BucketSize struct {
	Partitions int64
	Rows       int64
	Bytes      int64
}

// AuditSeal is the sealed state of one day of one audit stream's log: an
// opaque record (package auditlog encodes it) that a backend stores under
// (Tenant, Stream, Day) outside the day's buckets, so that retention never
// drops it.
type AuditSeal struct {
	Tenant string
	Stream string
	Day    model.Day
	Record []byte
}

// AuditLeaf is one leaf of a sealed stream-day, in log order: the event's
// clustering key and its leaf hash. A backend stores a day's leaves in the
// day's audit bucket, so retention drops them with the events.
type AuditLeaf struct {
	TS      int64
	EventID string
	Hash    [32]byte
}

// AuditLeafWriter stores the leaves of one stream-day, one chunk at a
// time in chunk order. Commit makes what was put durable at the latest
// when a later PutAuditSeal returns; Abort gives up what was put and not
// committed, and does nothing after Commit. A writer must be committed or
// aborted. Whether a chunk can be read before Commit is the backend's
// affair: a seal reads its leaves only after it committed them.
type AuditLeafWriter interface {
	Put(ctx context.Context, chunk uint32, leaves []AuditLeaf) error
	Commit(ctx context.Context) error
	Abort()
}

// SeriesRef names one series of a tenant.
type SeriesRef struct {
	Tenant string
	Series string
}
