package rollup

import (
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/model"
)

// BenchmarkCompute recomputes ten minutes of a device that reports five
// float metrics a second: the rollup path's own CPU per reading.
func BenchmarkCompute(b *testing.B) {
	names := []string{"power", "temp", "rpm", "flow", "pressure"}
	var readings []model.Reading
	for i := range 600 {
		r := model.Reading{TS: ms(time.Duration(i) * time.Second)}
		for j, n := range names {
			r.Metrics = append(r.Metrics, model.Metric{Name: n, Value: float64(i*j) / 3})
		}
		readings = append(readings, r)
	}
	b.ReportAllocs()
	for b.Loop() {
		Compute("acme", "pump-1", readings, 1)
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(readings)*len(names)), "ns/value")
}
