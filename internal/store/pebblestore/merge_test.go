package pebblestore

import (
	"context"
	"log/slog"
	"testing"

	"github.com/sluicehq/sluice/internal/model"
	"github.com/sluicehq/sluice/internal/store"
)

// Catalogue entries of a later version win whatever order their commits
// land in, also across a reopen (when Pebble merges them from disk).
func TestCatalogueLatestVersionWins(t *testing.T) {
	dir := t.TempDir()
	st, err := Open(dir, Options{}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	sd := model.SeriesDay{Kind: model.KindReadings, Tenant: "acme", Series: "d1", Day: 20000}
	entry := func(rows int64) model.PartitionInfo {
		return model.PartitionInfo{Key: sd.Partition(0), Rows: rows, Bytes: rows * 10, MinTS: 1, MaxTS: rows, State: "single"}
	}
	v1, v2, v3 := st.Version(), st.Version(), st.Version()
	if !(v1 < v2 && v2 < v3) {
		t.Fatalf("versions not increasing: %d %d %d", v1, v2, v3)
	}
	// Planned in order v1 < v2 < v3, landing v3, v1, v2.
	for _, c := range []struct {
		v    int64
		rows int64
	}{{v3, 300}, {v1, 100}, {v2, 200}} {
		if err := st.Commit(ctx, &store.Batch{Version: c.v, Catalogue: []model.PartitionInfo{entry(c.rows)}}); err != nil {
			t.Fatal(err)
		}
	}
	check := func(when string) {
		t.Helper()
		parts, err := st.Catalogue(ctx, sd)
		if err != nil {
			t.Fatal(err)
		}
		if len(parts) != 1 || parts[0].Rows != 300 || parts[0].MaxTS != 300 {
			t.Fatalf("%s: catalogue %+v, want the v3 entry with 300 rows", when, parts)
		}
	}
	check("before reopen")
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	if st, err = Open(dir, Options{}, slog.New(slog.DiscardHandler)); err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	check("after reopen")
	if v := st.Version(); v <= v3 {
		t.Errorf("version after reopen %d is not above %d", v, v3)
	}
}

// TestLatestVersionMergerRecycled merges one catalogue key's operands
// starting from each of them (older ones by MergeOlder, newer by
// MergeNewer), closing each merger after its value is read, so that the
// next merges may run on recycled ones (sync.Pool keeps them on a best
// effort): each keeps the highest version, and a merger keeps nothing of
// an earlier use.
func TestLatestVersionMergerRecycled(t *testing.T) {
	ops := [][]byte{ // oldest first, versions 1, 5, 3 (a commit may land late)
		versionedInfo(nil, 1, []byte("one")),
		versionedInfo(nil, 5, []byte("five, the longest value")),
		versionedInfo(nil, 3, []byte("three")),
	}
	want := ops[1]
	for round := range 3 {
		for first := range ops {
			vm, err := storeMerger.Merge([]byte{tabCatalogue}, ops[first])
			if err != nil {
				t.Fatal(err)
			}
			for i := first - 1; i >= 0; i-- {
				if err := vm.MergeOlder(ops[i]); err != nil {
					t.Fatal(err)
				}
			}
			for i := first + 1; i < len(ops); i++ {
				if err := vm.MergeNewer(ops[i]); err != nil {
					t.Fatal(err)
				}
			}
			got, closer, err := vm.Finish(true)
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != string(want) {
				t.Errorf("round %d, start %d: %q, want %q", round, first, got, want)
			}
			if closer != nil {
				if err := closer.Close(); err != nil {
					t.Fatal(err)
				}
			}
		}
		// A single operand, on a recycled merger: itself.
		vm, err := storeMerger.Merge([]byte{tabCatalogue}, ops[0])
		if err != nil {
			t.Fatal(err)
		}
		got, closer, err := vm.Finish(true)
		if err != nil || string(got) != string(ops[0]) {
			t.Errorf("round %d, one operand: %q, %v; want %q", round, got, err, ops[0])
		}
		if closer != nil {
			_ = closer.Close()
		}
	}
}

// versionedInfo prefixes an encoded catalogue entry with its version.
func versionedInfo(b []byte, version int64, info []byte) []byte {
	return append(appendVersion(b, version), info...)
}
