package sink

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/sluicehq/sluice/internal/model"
	"github.com/sluicehq/sluice/internal/store"
)

// TestSaturated checks the readiness signal: not saturated until admission
// refuses, saturated (for as long as it stays full) after, and clear again
// once room is free.
func TestSaturated(t *testing.T) {
	g := newGate()
	defer g.open()
	hs := &hookStore{Store: tempStore(t), hook: func(int, *store.Batch) error { g.wait(); return nil }}
	cfg := testConfig()
	cfg.QueueRows, cfg.BatchRows, cfg.AdmissionTimeout = 10, 4, 0
	s := start(t, cfg, testBuckets(), hs)
	req := func(dev string, n int) *Request {
		var rs []model.Reading
		for i := range n {
			rs = append(rs, reading(dev, base+int64(i), "m"))
		}
		return &Request{Tenant: tenant, Readings: rs}
	}
	now := time.Now()
	if d := s.Saturated(now); d != 0 {
		t.Fatalf("idle sink saturated for %v", d)
	}
	var wg sync.WaitGroup
	wg.Go(func() { _ = s.Write(context.Background(), req("a", 8)) })
	waitFor(t, "request a admitted", func() bool { return testutil.ToFloat64(s.m.queued) == 8 })
	if d := s.Saturated(now); d != 0 {
		t.Fatalf("sink with room saturated for %v before any refusal", d)
	}
	var busy *BusyError
	if err := s.Write(context.Background(), req("b", 6)); !errors.As(err, &busy) {
		t.Fatalf("Write over the budget = %v, want a *BusyError", err)
	}
	if d := s.Saturated(time.Now().Add(time.Minute)); d < time.Minute {
		t.Fatalf("full sink saturated for %v a minute after the refusal, want at least a minute", d)
	}
	g.open()
	wg.Wait()
	if d := s.Saturated(time.Now()); d != 0 {
		t.Fatalf("drained sink still saturated for %v", d)
	}
}
