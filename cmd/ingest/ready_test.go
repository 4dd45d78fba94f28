package main

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/config"
	"github.com/sluicehq/sluice/internal/readiness"
)

type fakeSat time.Duration

func (f fakeSat) Saturated(time.Time) time.Duration { return time.Duration(f) }

type fakeStore struct{ err error }

func (f fakeStore) Probe(context.Context) error { return f.err }

func TestReadyChecks(t *testing.T) {
	tests := []struct {
		name  string
		limit time.Duration
		sat   time.Duration
		store any
		mqtt  func() error
		want  string // "" for ready
	}{
		{"all well", 30 * time.Second, 0, fakeStore{}, nil, ""},
		{"saturated briefly", 30 * time.Second, 29 * time.Second, fakeStore{}, nil, ""},
		{"saturated too long", 30 * time.Second, 31 * time.Second, fakeStore{}, nil, "pipeline: refusing writes for 31s (sink.queue_rows full; http.ready_saturation 30s)"},
		{"saturation check off", 0, time.Hour, fakeStore{}, nil, ""},
		{"store down", 30 * time.Second, 0, fakeStore{errors.New("disk gone")}, nil, "store: disk gone"},
		{"store without probe", 30 * time.Second, 0, struct{}{}, nil, ""},
		{"broker away", 30 * time.Second, 0, fakeStore{}, func() error { return errors.New("not connected") }, "mqtt: not connected"},
		{"everything wrong", 30 * time.Second, time.Minute, fakeStore{errors.New("disk gone")}, func() error { return errors.New("not connected") },
			"store: disk gone; mqtt: not connected; pipeline: refusing writes for 1m0s"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := config.Default()
			cfg.HTTP.ReadySaturation = tt.limit
			err := readiness.New(readyChecks(cfg, tt.store, fakeSat(tt.sat), tt.mqtt)...).Ready()
			switch {
			case tt.want == "" && err != nil:
				t.Fatalf("Ready() = %v, want nil", err)
			case tt.want != "" && (err == nil || !strings.HasPrefix(err.Error(), tt.want)):
				t.Fatalf("Ready() = %v, want %q", err, tt.want)
			}
		})
	}
}
