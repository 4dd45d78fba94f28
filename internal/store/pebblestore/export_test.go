package pebblestore

import (
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"

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

// StallForTest reports a write stall of d to the event listener the store
// gave Pebble, as Pebble would.
func (s *Store) StallForTest(info pebble.WriteStallBeginInfo, d time.Duration) {
	s.po.EventListener.WriteStallBegin(info)
	time.Sleep(d)
	s.po.EventListener.WriteStallEnd()
}
