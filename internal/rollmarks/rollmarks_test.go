package rollmarks

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"testing"

	"github.com/cockroachdb/pebble/v2"
	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

type mark struct {
	Gen uint64
	M   Minute
}

func markLess(a, b mark) bool {
	if a.Gen != b.Gen {
		return a.Gen < b.Gen
	}
	if a.M.Tenant != b.M.Tenant {
		return a.M.Tenant < b.M.Tenant
	}
	if a.M.Device != b.M.Device {
		return a.M.Device < b.M.Device
	}
	return a.M.Minute < b.M.Minute
}

func all(t *testing.T, s *Store) []mark {
	t.Helper()
	var out []mark
	if err := s.Each(func(gen uint64, m Minute) error {
		out = append(out, mark{gen, m})
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return out
}

// Marks survive a reopen, come back by generation, and Forget drops whole
// generations below its argument.
func TestAddEachForget(t *testing.T) {
	dir := t.TempDir()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	s, err := Open(dir, quiet)
	if err != nil {
		t.Fatal(err)
	}
	odd := Minute{Tenant: "t\x00x", Device: "", Minute: math.MinInt64}
	if err := s.Add(2, []Minute{{"acme", "pump-1", 60_000}, {"acme", "pump-1", -60_000}}); err != nil {
		t.Fatal(err)
	}
	if err := s.Add(1, []Minute{{"acme", "fan-3", 0}, odd}); err != nil {
		t.Fatal(err)
	}
	if err := s.Add(3, nil); err != nil {
		t.Fatal(err)
	}
	if err := s.SetVersion(1 << 62); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if s, err = Open(dir, quiet); err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	// Within a generation the order is the writes'.
	want := []mark{{1, Minute{"acme", "fan-3", 0}}, {1, odd}, {2, Minute{"acme", "pump-1", 60_000}}, {2, Minute{"acme", "pump-1", -60_000}}}
	if diff := cmp.Diff(want, all(t, s)); diff != "" {
		t.Errorf("marks after reopen (-want +got):\n%s", diff)
	}
	if v, err := s.Version(); err != nil || v != 1<<62 {
		t.Errorf("Version after reopen = %d, %v; want %d", v, err, uint64(1<<62))
	}
	if err := s.Forget(2); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want[2:], all(t, s)); diff != "" {
		t.Errorf("marks after Forget(2) (-want +got):\n%s", diff)
	}
	stop := errors.New("stop")
	if err := s.Each(func(uint64, Minute) error { return stop }); !errors.Is(err, stop) {
		t.Errorf("Each returned %v, want fn's error", err)
	}
}

// appendKey appends the key of one mark as Sluice wrote it before marks
// were packed (the value was empty).
func appendKey(b []byte, gen uint64, m Minute) []byte {
	b = binary.BigEndian.AppendUint64(b, gen)
	b = binary.AppendUvarint(b, uint64(len(m.Tenant)))
	b = append(b, m.Tenant...)
	b = binary.AppendUvarint(b, uint64(len(m.Device)))
	b = append(b, m.Device...)
	return binary.BigEndian.AppendUint64(b, uint64(m.Minute)^(1<<63))
}

func TestParseKeyRejectsCorrupt(t *testing.T) {
	good := appendKey(nil, 5, Minute{"acme", "pump-1", 120_000})
	if gen, m, err := parseKey(good); err != nil || gen != 5 || m != (Minute{"acme", "pump-1", 120_000}) {
		t.Fatalf("parseKey(good) = %d, %+v, %v", gen, m, err)
	}
	for _, k := range [][]byte{nil, good[:10], good[:len(good)-1], append(append([]byte{}, good...), 0)} {
		if _, _, err := parseKey(k); !errors.Is(err, ErrCorrupt) {
			t.Errorf("parseKey(%x) = %v, want ErrCorrupt", k, err)
		}
	}
}

// TestReadsUnpackedMarks: a store written before marks were packed (a key
// per mark, empty values) is read whole beside packed marks, in and out
// of one generation, and Forget drops both.
func TestReadsUnpackedMarks(t *testing.T) {
	db, s := openShared(t, t.TempDir())
	defer db.Close()
	old := []mark{{3, Minute{"acme", "pump-1", 60_000}}, {5, Minute{"acme", "fan", -60_000}}}
	for _, m := range old {
		if err := db.Set(appendKey([]byte{'m'}, m.Gen, m.M), nil, pebble.Sync); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Add(3, []Minute{{"beta", "valve", 0}}); err != nil {
		t.Fatal(err)
	}
	if err := s.Add(4, []Minute{{"acme", "pump-1", 120_000}}); err != nil {
		t.Fatal(err)
	}
	// Within a generation the two forms' keys sort by how they begin
	// (a packed key's seq, an old key's tenant length): compare as sets.
	want := []mark{old[0], {3, Minute{"beta", "valve", 0}}, {4, Minute{"acme", "pump-1", 120_000}}, old[1]}
	if diff := cmp.Diff(want, all(t, s), cmpopts.SortSlices(markLess)); diff != "" {
		t.Errorf("marks (-want +got):\n%s", diff)
	}
	if err := s.Forget(5); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want[3:], all(t, s)); diff != "" {
		t.Errorf("marks after Forget(5) (-want +got):\n%s", diff)
	}
}

// TestStagePacks: a write's marks take one key per maxPacked, and come
// back in the order written; a tenant or device repeated in a key is
// stored, and read, once per mark.
func TestStagePacks(t *testing.T) {
	db, s := openShared(t, t.TempDir())
	defer db.Close()
	for _, n := range []int{1, maxPacked - 1, maxPacked, maxPacked + 1, 2*maxPacked + 3} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			ms := make([]Minute, n)
			want := make([]mark, n)
			for i := range ms {
				ms[i] = Minute{"acme", fmt.Sprintf("dev-%d", i/3), int64(i%3-1) * 60_000}
				want[i] = mark{9, ms[i]}
			}
			if err := s.Add(9, ms); err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(want, all(t, s)); diff != "" {
				t.Errorf("marks (-want +got):\n%s", diff)
			}
			if keys, wantKeys := markKeys(t, db), (n+maxPacked-1)/maxPacked; keys != wantKeys {
				t.Errorf("%d keys for %d marks, want %d", keys, n, wantKeys)
			}
			if err := s.Forget(10); err != nil {
				t.Fatal(err)
			}
			s.forgot = 0 // the next case writes generation 9 again
		})
	}
}

func TestEachPackedRejectsCorrupt(t *testing.T) {
	good := appendPacked(nil, []Minute{{"acme", "pump-1", 60_000}, {"acme", "fan", 0}})
	// As many well-formed marks as it says, one more than a value holds.
	huge := append([]byte{packedVersion}, binary.AppendUvarint(nil, maxPacked+1)...)
	for range maxPacked + 1 {
		huge = append(huge, 1, 'a', 1, 'b', 0)
	}
	for name, v := range map[string][]byte{
		"empty":                nil,
		"version":              append([]byte{packedVersion + 1}, good[1:]...),
		"truncated":            good[:len(good)-1],
		"trailing bytes":       append(append([]byte{}, good...), 0),
		"count too high":       append([]byte{packedVersion, 3}, good[2:]...),
		"count past the bound": huge,
		// Four marks cannot fit in seven bytes, though each byte could
		// start one.
		"count over the bytes": {packedVersion, 4, 1, 'a', 1, 'b', 0, 0, 0},
		"string past the end":  {packedVersion, 1, 9, 'a', 1, 'b', 0},
		"minute missing":       {packedVersion, 1, 1, 'a', 1, 'b'},
	} {
		if err := eachPacked(v, func(Minute) error { return nil }); !errors.Is(err, ErrCorrupt) {
			t.Errorf("%s: eachPacked = %v, want ErrCorrupt", name, err)
		}
	}
	var got []Minute
	if err := eachPacked(good, func(m Minute) error { got = append(got, m); return nil }); err != nil || len(got) != 2 {
		t.Errorf("eachPacked(good) = %v, %v", got, err)
	}
}

// FuzzEachPacked: any value either is rejected or lists marks that encode
// to a value read back as the same marks.
func FuzzEachPacked(f *testing.F) {
	f.Add(appendPacked(nil, []Minute{{"acme", "pump-1", 60_000}, {"acme", "pump-1", -1}}))
	f.Add([]byte{packedVersion, 0})
	f.Fuzz(func(t *testing.T, v []byte) {
		var ms []Minute
		if err := eachPacked(v, func(m Minute) error { ms = append(ms, m); return nil }); err != nil {
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("error %v is not ErrCorrupt", err)
			}
			return
		}
		var again []Minute
		if err := eachPacked(appendPacked(nil, ms), func(m Minute) error { again = append(again, m); return nil }); err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(ms, again); diff != "" {
			t.Fatalf("re-encoded (-first +again):\n%s", diff)
		}
	})
}
