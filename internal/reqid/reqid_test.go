package reqid

import (
	"bytes"
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

func TestValid(t *testing.T) {
	tests := []struct {
		id   string
		want bool
	}{
		{"", false},
		{"a", true},
		{"0f8fad5b-d9cb-469f-a165-70867728950e", true},
		{"trace:1.2_3", true},
		{strings.Repeat("a", MaxLen), true},
		{strings.Repeat("a", MaxLen+1), false},
		{"has space", false},
		{"new\nline", false},
		{`quote"`, false},
		{"é", false},
		{"a=b", false},
	}
	for _, tt := range tests {
		if got := Valid(tt.id); got != tt.want {
			t.Errorf("Valid(%q) = %v, want %v", tt.id, got, tt.want)
		}
	}
}

func TestMiddleware(t *testing.T) {
	tests := []struct {
		name, sent string
		keep       bool
	}{
		{"none sent", "", false},
		{"valid kept", "req-42", true},
		{"invalid replaced", "bad id\r\nx", false},
		{"too long replaced", strings.Repeat("x", 65), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var inCtx string
			h := Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				inCtx = From(r.Context())
			}))
			req := httptest.NewRequest("GET", "/", nil)
			if tt.sent != "" {
				req.Header.Set(Header, tt.sent)
			}
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, req)
			got := rec.Header().Get(Header)
			if got != inCtx || !Valid(got) {
				t.Fatalf("header %q, context %q", got, inCtx)
			}
			if (got == tt.sent) != tt.keep {
				t.Fatalf("sent %q, got %q, want kept=%v", tt.sent, got, tt.keep)
			}
		})
	}
}

func TestLogHandler(t *testing.T) {
	var buf bytes.Buffer
	logger := slog.New(LogHandler{slog.NewJSONHandler(&buf, nil)}).With("component", "x")
	logger.InfoContext(With(context.Background(), "abc"), "with id")
	logger.Info("without id")
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 2 || !strings.Contains(lines[0], `"request_id":"abc"`) || strings.Contains(lines[1], "request_id") {
		t.Fatalf("log:\n%s", buf.String())
	}
}

func FuzzValid(f *testing.F) {
	for _, s := range []string{"", "abc", "a b", "0f8fad5b-d9cb", "\x00"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if !Valid(s) {
			return
		}
		if len(s) > MaxLen || strings.ContainsAny(s, " \t\r\n\"\\=") {
			t.Fatalf("Valid(%q) accepted an unsafe id", s)
		}
	})
}
