// Package cursor makes the read API's continuation cursors opaque and
// authenticated. A cursor carries the range of the query that made it and
// the reader's position in it, and ends with an HMAC-SHA256 over them and
// over what the cursor may continue: the tenant, the kind of read and the
// series. A cursor that was edited, made by another gateway key, or handed
// to another tenant, kind or series does not verify and is refused before
// anything in it is used.
package cursor

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"hash"

	"github.com/sluicehq/sluice/internal/model"
)

// MaxLen bounds the length of a cursor as sent, so that a huge parameter is
// refused before it is decoded.
const MaxLen = 4096

// KeySize is the least number of key bytes.
const KeySize = 32

const (
	version = 1
	macSize = sha256.Size
)

// ErrInvalid is returned for a cursor that is not a valid one for the query.
var ErrInvalid = errors.New("invalid cursor")

// Scope is what a cursor may continue. It is authenticated but not carried:
// the reader states it from the request.
type Scope struct {
	Tenant string
	Kind   string // e.g. "readings", "audit", "deadletters"
	Series string // device or stream; empty for reads without one
}

// Token is what a cursor carries: the range [From, To) of the query that
// made it and the reader's position, opaque to this package.
type Token struct {
	From, To int64
	Pos      []byte
}

// Keys seals and opens cursors under one per-deployment key.
type Keys struct{ key []byte }

// New returns Keys for key, which must be at least KeySize bytes.
func New(key []byte) (*Keys, error) {
	if len(key) < KeySize {
		return nil, fmt.Errorf("cursor key: want at least %d bytes, got %d", KeySize, len(key))
	}
	return &Keys{key: append([]byte(nil), key...)}, nil
}

// Seal returns the cursor for t under scope s.
func (k *Keys) Seal(s Scope, t Token) string {
	b := make([]byte, 0, 1+2*binary.MaxVarintLen64+len(t.Pos)+macSize)
	b = append(b, version)
	b = binary.AppendVarint(b, t.From)
	b = binary.AppendVarint(b, t.To)
	b = append(b, t.Pos...)
	b = k.mac(s, b).Sum(b)
	return base64.RawURLEncoding.EncodeToString(b)
}

// Open verifies a cursor made by Seal under scope s and returns what it
// carries. Its range is checked to lie within the valid time range.
func (k *Keys) Open(s Scope, c string) (Token, error) {
	if len(c) > MaxLen {
		return Token{}, fmt.Errorf("%w: longer than %d characters", ErrInvalid, MaxLen)
	}
	// The decoder skips line breaks: refuse anything outside the alphabet;
	// and Strict refuses a last character whose unused bits are not zero.
	// So one cursor has one spelling.
	for i := range len(c) {
		if ch := c[i]; !(ch >= 'A' && ch <= 'Z' || ch >= 'a' && ch <= 'z' || ch >= '0' && ch <= '9' || ch == '-' || ch == '_') {
			return Token{}, fmt.Errorf("%w: not base64url", ErrInvalid)
		}
	}
	b, err := base64.RawURLEncoding.Strict().DecodeString(c)
	if err != nil {
		return Token{}, fmt.Errorf("%w: not base64url", ErrInvalid)
	}
	if len(b) < 1+macSize || b[0] != version {
		return Token{}, fmt.Errorf("%w: unknown format", ErrInvalid)
	}
	body, sum := b[:len(b)-macSize], b[len(b)-macSize:]
	if !hmac.Equal(k.mac(s, body).Sum(nil), sum) {
		return Token{}, fmt.Errorf("%w: not issued by this gateway for this %s read (edited, or for another tenant, series or key)", ErrInvalid, s.Kind)
	}
	// Authentic: what follows was written by Seal, checked all the same.
	rest := body[1:]
	from, n := binary.Varint(rest)
	if n <= 0 {
		return Token{}, fmt.Errorf("%w: unknown format", ErrInvalid)
	}
	rest = rest[n:]
	to, n := binary.Varint(rest)
	if n <= 0 {
		return Token{}, fmt.Errorf("%w: unknown format", ErrInvalid)
	}
	t := Token{From: from, To: to, Pos: rest[n:]}
	if _, err := model.SpanDays(t.From, t.To); err != nil {
		return Token{}, fmt.Errorf("%w: its range: %w", ErrInvalid, err)
	}
	return t, nil
}

// mac returns the HMAC over the scope, each part length-prefixed so that no
// two scopes share an encoding, with body written next.
func (k *Keys) mac(s Scope, body []byte) hash.Hash {
	m := hmac.New(sha256.New, k.key)
	var n [binary.MaxVarintLen64]byte
	for _, part := range []string{"sluice-cursor", s.Tenant, s.Kind, s.Series} {
		m.Write(n[:binary.PutUvarint(n[:], uint64(len(part)))])
		m.Write([]byte(part))
	}
	m.Write(body)
	return m
}
