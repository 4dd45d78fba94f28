package canon

// Plain bytes are those appendString copies as they are: printable ASCII
// (0x20 to 0x7f) other than '"' and '\\'. Event fields are nearly always
// plain, so the canonical form and its check look for the first byte that
// is not eight bytes at a time.

const (
	ones  = 0x0101010101010101
	highs = 0x8080808080808080
)

// plainWord reports whether the eight bytes of w are all plain. Each term
// sets the high bit of some byte exactly when a byte of w is not plain:
// the lowest byte that is, at least (the borrow tricks can only mark a
// byte above a true one).
func plainWord(w uint64) bool {
	quote := w ^ '"'*ones
	backslash := w ^ '\\'*ones
	bad := w | // a byte of 0x80 or more
		(w - 0x20*ones) | // a byte below 0x20 (as w's high bits are clear, if not above)
		(quote-ones)&^quote | // a '"'
		(backslash-ones)&^backslash // a '\\'
	return bad&highs == 0
}

// plainLen returns the length of the longest plain prefix of s.
func plainLen[T string | []byte](s T) int {
	i := 0
	for ; i+8 <= len(s); i += 8 {
		w := uint64(s[i]) | uint64(s[i+1])<<8 | uint64(s[i+2])<<16 | uint64(s[i+3])<<24 |
			uint64(s[i+4])<<32 | uint64(s[i+5])<<40 | uint64(s[i+6])<<48 | uint64(s[i+7])<<56
		if !plainWord(w) {
			break
		}
	}
	for ; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c >= 0x80 || c == '"' || c == '\\' {
			break
		}
	}
	return i
}

// plainASCII reports whether every byte of s is plain.
func plainASCII(s string) bool { return plainLen(s) == len(s) }
