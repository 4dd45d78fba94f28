package lineproto

import (
	"strconv"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/decode"
)

// The decode-level comparison of docs/benchmarks.md ("Line protocol versus
// NDJSON"): one body of 1,000 readings (devices dev-0..dev-9999, 5 or 6
// float metrics each, as e2e's BenchmarkFleet sends them), written as
// NDJSON for package decode and as line protocol for this package; the
// tags variant adds two tags to every line, which go into the metric
// names. Every variant yields 1,000 readings of the same devices,
// timestamps and values.
//
//	go test -run '^$' -bench . -benchmem ./internal/lineproto

var fleetNames = [6]string{"temp_c", "humidity", "rpm", "voltage", "rssi", "battery"}

const benchReadings = 1000

func benchTS(k int) int64 { return benchNowMs() - 3_600_000 + int64(k)*100 }

func benchNowMs() int64 { return testNow.UnixMilli() }

func benchValue(k, m int) float64 { return float64((k*7+m*13)%1000) / 10 }

func ndjsonBody() []byte {
	var b []byte
	for k := range benchReadings {
		b = append(b, `{"device_id":"dev-`...)
		b = strconv.AppendInt(b, int64(k*37%10000), 10)
		b = append(b, `","ts":`...)
		b = strconv.AppendInt(b, benchTS(k), 10)
		b = append(b, `,"metrics":{`...)
		for m := range 5 + k%2 {
			if m > 0 {
				b = append(b, ',')
			}
			b = append(b, '"')
			b = append(b, fleetNames[m]...)
			b = append(b, `":`...)
			b = strconv.AppendFloat(b, benchValue(k, m), 'g', -1, 64)
		}
		b = append(b, "}}\n"...)
	}
	return b
}

func lineProtocolBody(tags string) []byte {
	var b []byte
	for k := range benchReadings {
		b = append(b, "fleet,device=dev-"...)
		b = strconv.AppendInt(b, int64(k*37%10000), 10)
		b = append(b, tags...)
		b = append(b, ' ')
		for m := range 5 + k%2 {
			if m > 0 {
				b = append(b, ',')
			}
			b = append(b, fleetNames[m]...)
			b = append(b, '=')
			b = strconv.AppendFloat(b, benchValue(k, m), 'g', -1, 64)
		}
		b = append(b, ' ')
		b = strconv.AppendInt(b, benchTS(k), 10)
		b = append(b, '\n')
	}
	return b
}

func BenchmarkReadings(b *testing.B) {
	lim := decode.DefaultLimits()
	lim.MaxFuture = time.Hour
	report := func(b *testing.B, body []byte) {
		b.SetBytes(int64(len(body)))
		b.ReportMetric(float64(b.N)*benchReadings/b.Elapsed().Seconds(), "readings/s")
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/benchReadings, "ns/reading")
	}
	b.Run("ndjson", func(b *testing.B) {
		body := ndjsonBody()
		for b.Loop() {
			rs, err := decode.Readings(body, decode.FormatNDJSON, testNow, lim, decode.Options{})
			if err != nil || len(rs) != benchReadings {
				b.Fatal(len(rs), err)
			}
		}
		report(b, body)
	})
	for _, v := range []struct{ name, tags string }{{"lineprotocol", ""}, {"lineprotocol-2tags", ",site=north,rack=r12"}} {
		b.Run(v.name, func(b *testing.B) {
			body := lineProtocolBody(v.tags)
			for b.Loop() {
				rs, _, err := Readings(body, testNow, DefaultConfig(), lim, Options{Precision: time.Millisecond})
				if err != nil || len(rs) != benchReadings {
					b.Fatal(len(rs), err)
				}
			}
			report(b, body)
		})
	}
}
