package pebblestore

import (
	"testing"

	"github.com/sluicehq/sluice/internal/store"
)

// ReadsAfter commits b to st (unless b is nil) and opens a read session
// on what st then holds, closed when the test ends (before st, when st's
// own close was registered first).
func ReadsAfter(t testing.TB, st *Store, b *store.Batch) *Reads {
	t.Helper()
	if b != nil {
		if err := st.Commit(t.Context(), b); err != nil {
			t.Fatal(err)
		}
	}
	rs, err := st.NewReads(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rs.Close() })
	return rs
}
