package retention_test

import (
	"testing"

	"github.com/sluicehq/sluice/internal/store/pebblestore"
)

func openPebble(t *testing.T) (backend, backend) {
	st, err := pebblestore.Open(t.TempDir(), pebblestore.Options{NoSync: true}, discard)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := st.Close(); err != nil {
			t.Error(err)
		}
	})
	return st, st
}

func TestPebble(t *testing.T) { runSuite(t, openPebble) }
