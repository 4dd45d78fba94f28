package cqlstore

import (
	"context"

	gocql "github.com/apache/cassandra-gocql-driver/v2"
)

// Tables lists the tables of the schema.
var Tables = []string{"readings", "audit", "audit_ids", "catalogue", "dead_letters", "tenant_days", "audit_seals", "audit_leaves", "audit_leaf_buckets"}

// Truncate empties every table, so that a test starts from an empty store.
func (s *Store) Truncate(ctx context.Context) error {
	for _, t := range Tables {
		if err := s.sess.Query(`TRUNCATE ` + t).ExecContext(ctx); err != nil {
			return err
		}
	}
	return nil
}

// Session exposes the driver session, for tests that count rows.
func (s *Store) Session() *gocql.Session { return s.sess }

// CatalogueShard is the catalogue partition (of 64) of a series.
func CatalogueShard(series string) int { return catalogueShard(series) }

// SetSeriesPage makes EachSeries read n catalogue rows per request, so that
// a test crosses pages with a few series.
func (s *Store) SetSeriesPage(n int) { s.seriesPage = n }

// SetLeafBucket makes a bucket of audit_leaf_buckets hold n chunks, so that
// a test crosses buckets with a few chunks.
func (s *Store) SetLeafBucket(n int) { s.leafBucket = n }
