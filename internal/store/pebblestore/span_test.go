package pebblestore

import (
	"log/slog"
	"slices"
	"testing"

	"github.com/cockroachdb/pebble/v2"
)

// A span keeps to [lower, upper) whether Pebble bounds its iterator (the
// store's) or the span checks the bounds itself (a session's, whose
// iterators have none): seeks before lower land on lower, iteration stops
// before upper, and a seek backwards works.
func TestSpanBounds(t *testing.T) {
	s, err := Open(t.TempDir(), Options{CacheBytes: 1 << 20}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for _, k := range []string{"c1", "c2", "r1", "r2", "r3", "r4", "r5"} {
		if err := s.db.Set([]byte(k), nil, pebble.Sync); err != nil {
			t.Fatal(err)
		}
	}
	rs, err := s.NewReads(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer rs.Close()
	walk := func(sp *span, first bool, seek string) []string {
		var got []string
		var ok bool
		if first {
			ok = sp.First()
		} else {
			ok = sp.SeekGE([]byte(seek))
		}
		for ; ok; ok = sp.Next() {
			got = append(got, string(sp.Key()))
		}
		return got
	}
	for _, src := range []struct {
		name string
		iterSource
	}{{"store", s}, {"session", rs}} {
		for _, c := range []struct {
			lower, upper string
			first        bool
			seek         string
			want         []string
		}{
			{"r2", "r4", true, "", []string{"r2", "r3"}},
			{"r2", "r4", false, "a", []string{"r2", "r3"}}, // before lower
			{"r2", "r4", false, "r3", []string{"r3"}},
			{"r4", "r9", true, "", []string{"r4", "r5"}},
			{"r1", "r3", false, "r1", []string{"r1", "r2"}}, // backwards after the one before
			{"c", "d", true, "", []string{"c1", "c2"}},      // the catalogue iterator
			{"r3", "r3\x00", true, "", []string{"r3"}},
			{"r6", "r9", true, "", nil},
		} {
			sp, release, err := src.iter(t.Context(), []byte(c.lower), []byte(c.upper))
			if err != nil {
				t.Fatal(err)
			}
			if got := walk(sp, c.first, c.seek); !slices.Equal(got, c.want) {
				t.Errorf("%s [%s, %s) from %q: %q, want %q", src.name, c.lower, c.upper, c.seek, got, c.want)
			}
			if err := release(); err != nil {
				t.Fatal(err)
			}
		}
	}
}
