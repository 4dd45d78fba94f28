package canon

import (
	"strings"
	"testing"
)

// plainLenBytewise is plainLen one byte at a time: what it must equal.
func plainLenBytewise(s string) int {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c >= 0x80 || c == '"' || c == '\\' {
			return i
		}
	}
	return len(s)
}

// Every byte value at every position of strings up to three words long,
// in a plain background and beside a second byte that is not plain.
func TestPlainLen(t *testing.T) {
	background := strings.Repeat("a~ Z0\x7f!]", 4)
	for n := 0; n <= 24; n++ {
		for pos := range n {
			for c := range 256 {
				b := []byte(background[:n])
				b[pos] = byte(c)
				if got, want := plainLen(string(b)), plainLenBytewise(string(b)); got != want {
					t.Fatalf("plainLen(%q) = %d, want %d", b, got, want)
				}
				if got, want := plainLen(b), plainLenBytewise(string(b)); got != want {
					t.Fatalf("plainLen([]byte %q) = %d, want %d", b, got, want)
				}
				if pos+1 < n {
					b[pos+1] = '\\'
					if got, want := plainLen(b), plainLenBytewise(string(b)); got != want {
						t.Fatalf("plainLen(%q) = %d, want %d", b, got, want)
					}
				}
			}
		}
	}
}

func BenchmarkPlainASCII(b *testing.B) {
	s := "2026-11-28T12:00:00.000Z user-000123 admin.example.com/api/v1/users"
	for b.Loop() {
		if !plainASCII(s) {
			b.Fatal("not plain")
		}
	}
}
