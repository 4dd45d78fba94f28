package cqlstore_test

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/sluicehq/sluice/internal/store/cqlstore"
)

func TestDefaultConfigIsValid(t *testing.T) {
	if err := cqlstore.DefaultConfig().Validate(); err != nil {
		t.Fatal(err)
	}
}

func TestValidate(t *testing.T) {
	tests := []struct {
		name string
		mod  func(*cqlstore.Config)
		want string // substring of the error
	}{
		{"no hosts", func(c *cqlstore.Config) { c.Hosts = nil }, "store.cassandra.hosts: at least one"},
		{"bad host", func(c *cqlstore.Config) { c.Hosts = []string{"a b"} }, `store.cassandra.hosts[0]: "a b"`},
		{"bad port", func(c *cqlstore.Config) { c.Hosts = []string{"h:"} }, `store.cassandra.hosts[0]: "h:"`},
		{"keyspace injection", func(c *cqlstore.Config) { c.Keyspace = "x; DROP" }, "store.cassandra.keyspace"},
		{"no dc", func(c *cqlstore.Config) { c.LocalDC = "" }, "store.cassandra.local_dc"},
		{"user without password", func(c *cqlstore.Config) { c.Username = "u" }, "store.cassandra.username/password"},
		{"bad consistency", func(c *cqlstore.Config) { c.WriteConsistency = "local_quorum" }, `store.cassandra.write_consistency: "local_quorum"`},
		{"write ANY", func(c *cqlstore.Config) { c.WriteConsistency = "ANY" }, "store.cassandra.write_consistency: ANY"},
		{"read ANY", func(c *cqlstore.Config) { c.ReadConsistency = "ANY" }, "store.cassandra.read_consistency: ANY"},
		{"zero timeout", func(c *cqlstore.Config) { c.Timeout = 0 }, "store.cassandra.timeout"},
		{"zero conns", func(c *cqlstore.Config) { c.NumConns = 0 }, "store.cassandra.num_conns: must be 1..64, got 0"},
		{"zero concurrency", func(c *cqlstore.Config) { c.MaxConcurrentRequests = 0 }, "store.cassandra.max_concurrent_requests"},
		{"huge batch", func(c *cqlstore.Config) { c.BatchRows = 100_000 }, "store.cassandra.batch_rows"},
		{"replication class", func(c *cqlstore.Config) { c.ReplicationClass = "LocalStrategy" }, "store.cassandra.replication_class"},
		{"replication factor", func(c *cqlstore.Config) { c.ReplicationFactor = 0 }, "store.cassandra.replication_factor"},
		{"tls files without tls", func(c *cqlstore.Config) { c.TLS.CAFile = "/ca.pem" }, "store.cassandra.tls.enabled"},
		{"cert without key", func(c *cqlstore.Config) { c.TLS.Enabled, c.TLS.CertFile = true, "/c.pem" }, "store.cassandra.tls.cert_file/tls.key_file"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := cqlstore.DefaultConfig()
			tc.mod(&c)
			err := c.Validate()
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Validate() = %v, want an error containing %q", err, tc.want)
			}
		})
	}
}

func TestSchemaRenders(t *testing.T) {
	c := cqlstore.DefaultConfig()
	c.Keyspace = "ks1"
	stmts, err := cqlstore.Schema(c)
	if err != nil {
		t.Fatal(err)
	}
	added := []string{
		"ALTER TABLE ks1.catalogue ADD ahead boolean",
		"ALTER TABLE ks1.readings ADD vtype tinyint",
		"ALTER TABLE ks1.readings ADD ivalue bigint",
		"ALTER TABLE ks1.readings ADD svalue text",
	}
	if len(stmts) != 1+len(cqlstore.Tables)+len(added) {
		t.Fatalf("schema has %d statements, want the keyspace, %d tables and %d columns added", len(stmts), len(cqlstore.Tables), len(added))
	}
	if diff := cmp.Diff(added, stmts[len(stmts)-len(added):]); diff != "" {
		t.Errorf("columns added (-want +got):\n%s", diff)
	}
	if !strings.Contains(stmts[0], "CREATE KEYSPACE IF NOT EXISTS ks1") || !strings.Contains(stmts[0], "'NetworkTopologyStrategy', 'replication_factor': 3") {
		t.Errorf("keyspace statement: %s", stmts[0])
	}
	for i, tb := range cqlstore.Tables {
		if !strings.HasPrefix(stmts[i+1], "CREATE TABLE IF NOT EXISTS ks1."+tb+" (") {
			t.Errorf("statement %d = %.60s..., want the table %s", i+1, stmts[i+1], tb)
		}
	}
}
