package e2e

import (
	"fmt"
	"strconv"
	"testing"
	"time"
)

// path is the endpoint l's requests go to.
func (l fleetLoad) path() string {
	if l.LineProtocol {
		return "/api/v2/write?bucket=fleet&precision=ms"
	}
	return "/v1/readings"
}

// encode appends request i's body to b: NDJSON (body) or the same readings
// as line protocol, one line per reading, the device as its device tag,
// under the measurement "fleet" (so metric temp_c is fleet.temp_c).
func (l fleetLoad) encode(b []byte, day time.Time, i int) []byte {
	if !l.LineProtocol {
		return l.body(b, day, i)
	}
	from, to := l.readings(i)
	for k := from; k < to; k++ {
		b = append(b, "fleet,device="...)
		b = append(b, l.device(k)...)
		b = append(b, ' ')
		for m := range metrics(k) {
			if m > 0 {
				b = append(b, ',')
			}
			b = append(b, fleetMetrics[m]...)
			b = append(b, '=')
			b = strconv.AppendFloat(b, metricValue(k, m), 'g', -1, 64)
		}
		b = append(b, ' ')
		b = strconv.AppendInt(b, l.ts(day, k), 10)
		b = append(b, '\n')
	}
	return b
}

// BenchmarkFleetLineProtocol is the fleet run of BenchmarkFleet (requests
// of 1,000 readings, 8 clients, rollups off) posted as NDJSON and as line
// protocol: the same readings, devices and values. Beside it,
// BenchmarkFleetLimit is the raw store's limit for the same readings.
func BenchmarkFleetLineProtocol(b *testing.B) {
	for _, devices := range fleetSizes(b) {
		for _, lp := range []bool{false, true} {
			format := "ndjson"
			if lp {
				format = "lineprotocol"
			}
			b.Run(fmt.Sprintf("devices=%d/%s", devices, format), func(b *testing.B) {
				_, env := rollupsEnv(false)
				l := fleetLoad{Devices: devices, Readings: fleetReadings(b, devices), Batch: 1000, Clients: 8, LineProtocol: lp}
				benchFleet(b, l, true, func() fleetResult { return runFleet(b, l, env) })
			})
		}
	}
}
