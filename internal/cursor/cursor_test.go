package cursor_test

import (
	"encoding/base64"
	"errors"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/internal/cursor"
	"github.com/sluicehq/sluice/internal/model"
)

func keys(t testing.TB, seed byte) *cursor.Keys {
	t.Helper()
	k, err := cursor.New([]byte(strings.Repeat(string(rune('a'+seed)), cursor.KeySize)))
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func TestSealOpen(t *testing.T) {
	k := keys(t, 0)
	scope := cursor.Scope{Tenant: "acme", Kind: "readings", Series: "pump-17"}
	tok := cursor.Token{From: 1000, To: 2000, Pos: []byte("opaque \xff position")}
	c := k.Seal(scope, tok)
	got, err := k.Open(scope, c)
	if err != nil || got.From != tok.From || got.To != tok.To || string(got.Pos) != string(tok.Pos) {
		t.Fatalf("Open(Seal(t)) = %+v, %v; want %+v", got, err, tok)
	}

	flip := func(c string, i int) string {
		b, _ := base64.RawURLEncoding.DecodeString(c)
		b[i] ^= 1
		return base64.RawURLEncoding.EncodeToString(b)
	}
	raw, _ := base64.RawURLEncoding.DecodeString(c)
	tests := []struct {
		name  string
		keys  *cursor.Keys
		scope cursor.Scope
		c     string
	}{
		{"other tenant", k, cursor.Scope{Tenant: "other", Kind: "readings", Series: "pump-17"}, c},
		{"other kind", k, cursor.Scope{Tenant: "acme", Kind: "audit", Series: "pump-17"}, c},
		{"other series", k, cursor.Scope{Tenant: "acme", Kind: "readings", Series: "pump-18"}, c},
		{"parts shifted", k, cursor.Scope{Tenant: "acmereadings", Kind: "", Series: "pump-17"}, c},
		{"other key", keys(t, 1), scope, c},
		{"edited version", k, scope, flip(c, 0)},
		{"edited range", k, scope, flip(c, 1)},
		{"edited position", k, scope, flip(c, len(raw)-33)},
		{"edited mac", k, scope, flip(c, len(raw)-1)},
		{"truncated", k, scope, c[:len(c)-4]},
		{"extended", k, scope, c + "AAAA"},
		{"empty", k, scope, ""},
		{"not base64", k, scope, "!!"},
		{"padded", k, scope, c + "=="},
		{"too long", k, scope, strings.Repeat("A", cursor.MaxLen+1)},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got, err := tc.keys.Open(tc.scope, tc.c); !errors.Is(err, cursor.ErrInvalid) {
				t.Errorf("Open = %+v, %v; want ErrInvalid", got, err)
			}
		})
	}
}

// A cursor sealed with a range outside the valid time range (a bug, or a
// key that leaked) is refused all the same.
func TestOpenChecksRange(t *testing.T) {
	k := keys(t, 0)
	scope := cursor.Scope{Tenant: "acme", Kind: "audit", Series: "s"}
	for _, tok := range []cursor.Token{
		{From: math.MinInt64, To: math.MaxInt64},
		{From: 0, To: int64(math.MaxInt32) * model.MillisPerDay},
		{From: model.MinTime - 1, To: 0},
		{From: 5, To: 5},
		{From: 6, To: 5},
	} {
		if _, err := k.Open(scope, k.Seal(scope, tok)); !errors.Is(err, cursor.ErrInvalid) {
			t.Errorf("Open(Seal(%+v)) error = %v, want ErrInvalid", tok, err)
		}
	}
	for _, tok := range []cursor.Token{{From: model.MinTime, To: model.MaxTime}, {From: -1, To: 0}} {
		if _, err := k.Open(scope, k.Seal(scope, tok)); err != nil {
			t.Errorf("Open(Seal(%+v)) error = %v, want none", tok, err)
		}
	}
}

func TestNewRefusesShortKey(t *testing.T) {
	if _, err := cursor.New(make([]byte, cursor.KeySize-1)); err == nil {
		t.Error("New accepted a 31-byte key")
	}
}

func TestLoadOrCreateKey(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "sub", "cursor.key")
	k1, err := cursor.LoadOrCreateKey(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(k1) < cursor.KeySize {
		t.Fatalf("generated key has %d bytes", len(k1))
	}
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm()&0o077 != 0 {
		t.Errorf("key file mode %v, want readable by the owner only", fi.Mode().Perm())
	}
	k2, err := cursor.LoadOrCreateKey(path) // a restart: the same key
	if err != nil || string(k2) != string(k1) {
		t.Fatalf("second load = %q, %v; want the first key", k2, err)
	}
	entries, _ := os.ReadDir(filepath.Dir(path))
	if len(entries) != 1 {
		t.Errorf("key directory holds %d entries, want only the key", len(entries))
	}
	short := filepath.Join(dir, "short.key")
	if err := os.WriteFile(short, []byte("too short\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := cursor.LoadOrCreateKey(short); err == nil {
		t.Error("a short key file was accepted")
	}
	if _, err := cursor.LoadKey(filepath.Join(dir, "missing")); err == nil {
		t.Error("LoadKey of a missing file succeeded")
	}
}

// LoadKeys and LoadOrCreateKeys give Keys for the file's key: a cursor
// sealed under one opens under the other, and a bad file is refused.
func TestLoadKeys(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "cursor.key")
	created, err := cursor.LoadOrCreateKeys(path)
	if err != nil {
		t.Fatal(err)
	}
	loaded, err := cursor.LoadKeys(path)
	if err != nil {
		t.Fatal(err)
	}
	scope := cursor.Scope{Tenant: "acme", Kind: "readings", Series: "d"}
	tok := cursor.Token{From: 1000, To: 2000, Pos: []byte("p")}
	if got, err := loaded.Open(scope, created.Seal(scope, tok)); err != nil || got.From != tok.From || got.To != tok.To || string(got.Pos) != string(tok.Pos) {
		t.Fatalf("Open = %+v, %v; want %+v", got, err, tok)
	}
	if _, err := cursor.LoadKeys(filepath.Join(dir, "missing")); err == nil {
		t.Error("LoadKeys of a missing file succeeded")
	}
	short := filepath.Join(dir, "short.key")
	if err := os.WriteFile(short, []byte("too short\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := cursor.LoadKeys(short); err == nil {
		t.Error("LoadKeys accepted a short key file")
	}
	if _, err := cursor.LoadOrCreateKeys(short); err == nil {
		t.Error("LoadOrCreateKeys accepted a short key file")
	}
}

func FuzzOpen(f *testing.F) {
	k := keys(f, 0)
	scope := cursor.Scope{Tenant: "acme", Kind: "readings", Series: "d"}
	f.Add(k.Seal(scope, cursor.Token{From: 0, To: 1, Pos: []byte("x")}))
	f.Add(k.Seal(scope, cursor.Token{From: model.MinTime, To: model.MaxTime}))
	f.Add("")
	f.Add("AQ")
	f.Fuzz(func(t *testing.T, c string) {
		tok, err := k.Open(scope, c)
		if err != nil {
			if !errors.Is(err, cursor.ErrInvalid) {
				t.Fatalf("Open(%q) error %v is not ErrInvalid", c, err)
			}
			return
		}
		if _, err := model.SpanDays(tok.From, tok.To); err != nil {
			t.Fatalf("Open(%q) = %+v, an invalid range: %v", c, tok, err)
		}
		if k.Seal(scope, tok) != c {
			t.Fatalf("Open(%q) accepted a cursor Seal does not make", c)
		}
	})
}
