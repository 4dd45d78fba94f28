package cqlstore

import (
	"context"
	"fmt"

	gocql "github.com/apache/cassandra-gocql-driver/v2"
)

// Probe checks, for readiness, that a node of the cluster answers this
// gateway's session now: one read of system.local at consistency ONE,
// bounded by ctx. It does not prove that write_consistency can be reached
// (a write that cannot is refused, and counted, by the commit itself).
func (s *Store) Probe(ctx context.Context) error {
	var v string
	err := s.sess.Query("SELECT release_version FROM system.local").Consistency(gocql.One).Idempotent(true).ScanContext(ctx, &v)
	if err != nil {
		return fmt.Errorf("cassandra does not answer: %w", err)
	}
	return nil
}
