package rollup

import (
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/model"
)

// liveStream is the gateway's "live" workload: devices each reporting every
// 10 s with two metrics, in time order, so a window gets 6 points and the
// devices of one second are a tenth of them.
type liveStream struct {
	devices []string
	rows    [][]model.ReadingRow // per device, reused
	start   time.Time
	sec     int
}

func newLiveStream(devices int) *liveStream {
	s := &liveStream{start: time.Date(2025, 3, 1, 0, 0, 0, 0, time.UTC)}
	for d := range devices {
		s.devices = append(s.devices, fmt.Sprintf("dev-%05d", d))
		s.rows = append(s.rows, make([]model.ReadingRow, 2))
	}
	return s
}

// second adds the readings of the next second (a tenth of the devices, one
// Add each, as the sink hands one partition per device) and advances the
// aggregator as the feed's flush tick does, 300 ms of processing delay later.
// It returns the rows emitted.
func (s *liveStream) second(a *Aggregator) int {
	ts := s.start.Add(time.Duration(s.sec) * time.Second)
	now := ts.Add(300 * time.Millisecond)
	for d := s.sec % 10; d < len(s.devices); d += 10 {
		r := s.rows[d]
		r[0] = model.ReadingRow{TS: ts.UnixMilli(), Metric: "power", Value: float64(s.sec % 11)}
		r[1] = model.ReadingRow{TS: ts.UnixMilli(), Metric: "temp", Value: float64(d%50) + float64(s.sec%60)/4}
		a.Add(now, "bench", s.devices[d], r)
	}
	s.sec++
	return len(a.Advance(now))
}

// BenchmarkAggregatorLive measures Add and Advance on the live workload at
// steady state (the defaults: allowed_lateness 1m, keep_closed 10m, so about
// 12 minutes of windows are held). One op is one second of the stream:
// 1,000 devices x 2 metrics added, one Advance.
func BenchmarkAggregatorLive(b *testing.B) {
	const devices = 10_000
	s := newLiveStream(devices)
	a := New(Config{AllowedLateness: time.Minute, KeepClosed: 10 * time.Minute, MaxWindows: 1_000_000}, s.start)
	for range 13 * 60 { // warm up to the steady state
		s.second(a)
	}
	emitted, rows := 0, 0
	for b.Loop() {
		emitted += s.second(a)
		rows += devices / 10 * 2
	}
	b.ReportMetric(float64(a.Len()), "windows")
	b.ReportMetric(float64(rows)/float64(max(emitted, 1)), "rows/emitted")
}

// BenchmarkAggregatorFleet is a large fleet's workload: every reading is a
// window of its own (devices report less than once a minute, or a backfill
// of yesterday), so windows close at the next tick and are kept for
// KeepClosed, and the bound on windows held is what bounds memory: eviction
// runs on every tick. One op is one second of the stream: 10,000 readings of
// 5 metrics from distinct devices, one Advance. It reports the heap held
// per window at the end.
func BenchmarkAggregatorFleet(b *testing.B) {
	const perSecond, metrics, maxWindows = 10_000, 5, 200_000
	start := time.Date(2025, 3, 1, 0, 0, 0, 0, time.UTC)
	a := New(Config{AllowedLateness: time.Minute, KeepClosed: 10 * time.Minute, MaxWindows: maxWindows}, start)
	devices := make([]string, 1_000_000)
	for d := range devices {
		devices[d] = fmt.Sprintf("dev-%07d", d)
	}
	rows := make([]model.ReadingRow, metrics)
	names := [metrics]string{"temp_c", "humidity", "rpm", "voltage", "rssi"}
	k := 0
	second := func() {
		now := start.Add(time.Duration(k/perSecond+1) * time.Second)
		for range perSecond {
			ts := start.Add(-24 * time.Hour).Add(time.Duration(k) * 86 * time.Millisecond).UnixMilli()
			for m := range rows {
				rows[m] = model.ReadingRow{TS: ts, Metric: names[m], Value: float64(k % 100)}
			}
			a.Add(now, "bench", devices[k%len(devices)], rows)
			k++
		}
		a.Advance(now)
	}
	for range 2 * maxWindows / (perSecond * metrics) { // fill to the bound
		second()
	}
	for b.Loop() {
		second()
	}
	b.StopTimer()
	var ms runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&ms)
	b.ReportMetric(float64(a.Len()), "windows")
	b.ReportMetric(float64(ms.HeapAlloc-uint64(len(devices))*32)/float64(a.Len()), "heap_B/window")
	runtime.KeepAlive(devices)
}
