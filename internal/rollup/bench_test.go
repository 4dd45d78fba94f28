package rollup

import (
	"fmt"
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
