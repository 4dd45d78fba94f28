package pebblelog

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
)

func TestLevelsAndComponent(t *testing.T) {
	var buf bytes.Buffer
	l := New(slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug})), "outbox")
	l.Infof("flushed %d", 3)
	l.Errorf("write failed: %s", "disk full")
	func() {
		defer func() {
			if r := recover(); r != "corrupt 7" {
				t.Errorf("Fatalf panicked with %v, want its message", r)
			}
		}()
		l.Fatalf("corrupt %d", 7)
	}()
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	want := []string{`level=DEBUG msg="flushed 3" component=outbox`, `level=ERROR msg="write failed: disk full" component=outbox`, `level=ERROR msg="corrupt 7" component=outbox`}
	if len(lines) != len(want) {
		t.Fatalf("logged %q, want %d lines", lines, len(want))
	}
	for i, w := range want {
		if !strings.HasSuffix(lines[i], w) {
			t.Errorf("line %d = %q, want it to end with %q", i, lines[i], w)
		}
	}
}
