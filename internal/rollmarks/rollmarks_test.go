package rollmarks

import (
	"errors"
	"io"
	"log/slog"
	"math"
	"testing"

	"github.com/google/go-cmp/cmp"
)

type mark struct {
	Gen uint64
	M   Minute
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
	// Within a generation the order is the keys' (length-prefixed strings).
	want := []mark{{1, odd}, {1, Minute{"acme", "fan-3", 0}}, {2, Minute{"acme", "pump-1", -60_000}}, {2, Minute{"acme", "pump-1", 60_000}}}
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
