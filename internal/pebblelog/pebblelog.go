// Package pebblelog routes a Pebble database's log lines to slog, tagged
// with the component that owns the database: its informational lines at
// debug level, its errors as errors. Every Pebble database of the gateway
// (the raw store, the rollup store, the outbox, the rollup marks) logs
// through it.
package pebblelog

import (
	"fmt"
	"log/slog"
)

// Logger is a pebble.Logger writing to l with component set.
type Logger struct {
	l         *slog.Logger
	component string
}

// New returns the Logger of a database owned by component.
func New(l *slog.Logger, component string) Logger { return Logger{l: l, component: component} }

// Infof logs at debug level: Pebble reports every flush and compaction.
func (p Logger) Infof(format string, args ...any) {
	p.l.Debug(fmt.Sprintf(format, args...), "component", p.component)
}

// Errorf logs an error.
func (p Logger) Errorf(format string, args ...any) {
	p.l.Error(fmt.Sprintf(format, args...), "component", p.component)
}

// Fatalf logs an error and panics, as Pebble expects of it.
func (p Logger) Fatalf(format string, args ...any) {
	p.l.Error(fmt.Sprintf(format, args...), "component", p.component)
	panic(fmt.Sprintf(format, args...))
}
