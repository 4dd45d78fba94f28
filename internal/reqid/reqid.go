// Package reqid gives every HTTP request an id: the caller's X-Request-Id
// when it is short and made of safe characters, else a fresh random one. The
// id is echoed in the response header, carried in the request's context and
// added to every log line written with that context.
package reqid

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"log/slog"
	"net/http"
)

// Header is the request and response header that carries the id.
const Header = "X-Request-Id"

// MaxLen is the longest id taken from a request.
const MaxLen = 64

type ctxKey struct{}

// Valid reports whether s may be used as a request id as sent: 1 to MaxLen
// bytes of A-Z a-z 0-9 and . _ : -. Anything else (control characters,
// quotes, spaces, very long values) is replaced, so that a client cannot
// forge log lines or fill them.
func Valid(s string) bool {
	if len(s) == 0 || len(s) > MaxLen {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c == '.', c == '_', c == ':', c == '-':
		default:
			return false
		}
	}
	return true
}

// New returns a fresh random id (24 hex digits).
func New() string {
	var b [12]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails
	return hex.EncodeToString(b[:])
}

// With returns ctx carrying id.
func With(ctx context.Context, id string) context.Context {
	return context.WithValue(ctx, ctxKey{}, id)
}

// From returns the request id ctx carries, or "".
func From(ctx context.Context) string {
	id, _ := ctx.Value(ctxKey{}).(string)
	return id
}

// Middleware gives each request its id: the response header is set before
// next runs, so every response, error or not, carries it.
func Middleware(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id := r.Header.Get(Header)
		if !Valid(id) {
			id = New()
		}
		w.Header().Set(Header, id)
		next.ServeHTTP(w, r.WithContext(With(r.Context(), id)))
	})
}

// LogHandler adds request_id to every record logged with a context that
// carries one (logger.InfoContext(r.Context(), ...)).
type LogHandler struct{ slog.Handler }

// Handle implements slog.Handler.
func (h LogHandler) Handle(ctx context.Context, rec slog.Record) error {
	if id := From(ctx); id != "" {
		rec = rec.Clone()
		rec.AddAttrs(slog.String("request_id", id))
	}
	return h.Handler.Handle(ctx, rec)
}

// WithAttrs implements slog.Handler.
func (h LogHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	return LogHandler{h.Handler.WithAttrs(attrs)}
}

// WithGroup implements slog.Handler.
func (h LogHandler) WithGroup(name string) slog.Handler {
	return LogHandler{h.Handler.WithGroup(name)}
}
