package retention_test

import (
	"testing"
)

// Two gateways: two sessions on one keyspace. The fixture writes partitions
// through both, so some are catalogued by the second gateway only.
func TestCassandra(t *testing.T) {
	runSuite(t, func(t *testing.T) (backend, backend) { return openCassandra(t), openCassandra(t) })
}
