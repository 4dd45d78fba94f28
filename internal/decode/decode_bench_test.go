// Benchmarks that chose the decoder. The three ReadingsNDJSON variants decode
// the same NDJSON body of 1000 readings (149 KB; device ids drawn from 10,000
// like "dev-000123", 2-4 of 6 metric names each in random order, RFC 3339
// timestamps, a seq) into []model.Reading with the same validation.
//
// Wall time, 10 interleaved runs (minimum of 10; the 2-core machine was
// shared with other builds, load average 15-20, so medians were 1.5-3x
// higher):
//
//	go test -c -o /tmp/decode.test ./internal/decode && cd internal/decode &&
//	for i in $(seq 10); do /tmp/decode.test -test.run='^$' -test.bench=. -test.benchmem; done
//
// CPU time (user+sys of the test process, GC included) per op, median of 5
// runs of e.g. /usr/bin/time /tmp/decode.test -test.run='^$'
// -test.bench='ReadingsNDJSON/scanner$' -test.benchtime=3000x; steadier under
// load:
//
//	go1.26.8 linux/amd64     wall µs/op (min)  MB/s   CPU µs/op  B/op     allocs/op
//	ReadingsNDJSON/stdlib              3954     38      5300     1051893  24986
//	ReadingsNDJSON/fastjson             962    155      1073      163853      2
//	ReadingsNDJSON/scanner              612    244       600      155750      3
//	ReadingsNDJSON/scanner-cold         581    257       690      164112   1004
//	ReadingsFixedSchema                 295    357       357      114736      3
//	ReadingsJSONArray                   453    331       547      155665      3
//	AuditNDJSON (1000 events)           755    353       950      273590   4001
//
// stdlib is encoding/json into a struct; fastjson is github.com/valyala/fastjson
// with a ParserPool and the same intern table; scanner is this package's
// hand-written scanner, the production path: 1.6-1.8x fastjson and 6-9x
// encoding/json. scanner-cold rotates through 10 bodies that together hold
// all 10,000 ids, so device ids mostly miss the intern table, as with many
// devices (one string allocation per reading). FixedSchema is the body of
// cmd/ingest's BenchmarkHTTPIngest (two fixed metrics). The 3 allocations of
// the warm case are the result slice and the metrics arena; Audit allocates
// event_id, actor, resource and the attributes copy per event.
package decode

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/valyala/fastjson"

	"github.com/sluicehq/sluice/internal/model"
)

var benchNow = time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC)

// benchBody returns an NDJSON body of n readings; seed picks the devices.
func benchBody(n int, seed uint64, ids []int) []byte {
	rng := rand.New(rand.NewPCG(seed, 7))
	names := []string{"temp_c", "rpm", "pressure_kpa", "vibration_mm_s", "humidity_pct", "voltage_v"}
	var b bytes.Buffer
	base := benchNow.Add(-time.Hour)
	for i := range n {
		id := rng.IntN(10000)
		if ids != nil {
			id = ids[i]
		}
		fmt.Fprintf(&b, `{"device_id":"dev-%06d","ts":"%s","metrics":{`, id,
			base.Add(time.Duration(i)*1250*time.Microsecond).Format("2006-01-02T15:04:05.000Z07:00"))
		k := 2 + rng.IntN(3)
		for j, p := range rng.Perm(len(names))[:k] {
			if j > 0 {
				b.WriteByte(',')
			}
			fmt.Fprintf(&b, `"%s":%.2f`, names[p], rng.Float64()*2000-500)
		}
		fmt.Fprintf(&b, `},"seq":%d}`+"\n", rng.IntN(1<<40))
	}
	return b.Bytes()
}

func BenchmarkReadingsNDJSON(b *testing.B) {
	body := benchBody(1000, 1, nil)
	lim := DefaultLimits()
	want, err := Readings(body, FormatNDJSON, benchNow, lim, Options{})
	if err != nil {
		b.Fatal(err)
	}
	check := func(b *testing.B, got []model.Reading, err error) {
		if err != nil {
			b.Fatal(err)
		}
		if len(got) != len(want) {
			b.Fatalf("got %d readings, want %d", len(got), len(want))
		}
	}
	b.Run("stdlib", func(b *testing.B) {
		got, err := stdlibReadings(body, benchNow, lim)
		check(b, got, err)
		if !readingsEqual(got, want) {
			b.Fatal("stdlib decodes differently")
		}
		b.SetBytes(int64(len(body)))
		b.ReportAllocs()
		for b.Loop() {
			_, _ = stdlibReadings(body, benchNow, lim)
		}
	})
	b.Run("fastjson", func(b *testing.B) {
		fd := newFastjsonDecoder()
		got, err := fd.readings(body, benchNow, lim)
		check(b, got, err)
		if !readingsEqual(got, want) {
			b.Fatal("fastjson decodes differently")
		}
		b.SetBytes(int64(len(body)))
		b.ReportAllocs()
		for b.Loop() {
			_, _ = fd.readings(body, benchNow, lim)
		}
	})
	b.Run("scanner", func(b *testing.B) {
		b.SetBytes(int64(len(body)))
		b.ReportAllocs()
		for b.Loop() {
			got, err := Readings(body, FormatNDJSON, benchNow, lim, Options{})
			check(b, got, err)
		}
	})
	b.Run("scanner-cold", func(b *testing.B) {
		perm := rand.New(rand.NewPCG(2, 7)).Perm(10000)
		var bodies [][]byte
		size := 0
		for i := range 10 {
			bodies = append(bodies, benchBody(1000, uint64(i), perm[i*1000:(i+1)*1000]))
			size += len(bodies[i])
		}
		b.SetBytes(int64(size / len(bodies)))
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			_, err := Readings(bodies[i%len(bodies)], FormatNDJSON, benchNow, lim, Options{})
			if err != nil {
				b.Fatal(err)
			}
			i++
		}
	})
}

// BenchmarkReadingsFixedSchema decodes the body of cmd/ingest's
// BenchmarkHTTPIngest: every reading has the same two metrics.
func BenchmarkReadingsFixedSchema(b *testing.B) {
	rng := rand.New(rand.NewPCG(7, 11))
	var buf bytes.Buffer
	base := benchNow.Add(-24 * time.Hour).UnixMilli()
	for j := range 1000 {
		ts := base + int64(rng.IntN(86_400_000))
		fmt.Fprintf(&buf, `{"device_id":"dev-%06d","ts":%q,"seq":%d,"metrics":{"rpm":%g,"temp_c":%g}}`+"\n",
			rng.IntN(10000), time.UnixMilli(ts).UTC().Format("2006-01-02T15:04:05.000Z"), j,
			float64(rng.IntN(3000)), float64(rng.IntN(1000))/10)
	}
	body := buf.Bytes()
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Readings(body, FormatNDJSON, benchNow, DefaultLimits(), Options{}); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkReadingsJSONArray(b *testing.B) {
	lines := bytes.Split(bytes.TrimSpace(benchBody(1000, 1, nil)), []byte("\n"))
	body := append(append([]byte("["), bytes.Join(lines, []byte(",\n"))...), ']')
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Readings(body, FormatJSON, benchNow, DefaultLimits(), Options{}); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkAuditNDJSON(b *testing.B) {
	rng := rand.New(rand.NewPCG(3, 7))
	var buf bytes.Buffer
	outcomes := []string{"success", "denied", "error"}
	for i := range 1000 {
		fmt.Fprintf(&buf, `{"event_id":"01JD%022d","stream":"billing-api","ts":"%s","actor":"user:%d","action":"invoice.refund","resource":"invoice:%d","outcome":%q,"attributes":{"amount_cents":%d,"currency":"EUR","reason":"duplicate charge"}}`+"\n",
			i, benchNow.Add(-time.Duration(i)*time.Second).Format(time.RFC3339Nano), rng.IntN(5000), rng.IntN(1e6), outcomes[rng.IntN(3)], rng.IntN(1e5))
	}
	body := buf.Bytes()
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Audit(body, FormatNDJSON, benchNow, DefaultLimits()); err != nil {
			b.Fatal(err)
		}
	}
}

func readingsEqual(a, b []model.Reading) bool {
	return slices.EqualFunc(a, b, func(x, y model.Reading) bool {
		return x.DeviceID == y.DeviceID && x.TS == y.TS && x.Seq == y.Seq && x.HasSeq == y.HasSeq &&
			slices.Equal(x.Metrics, y.Metrics)
	})
}

// benchLimits holds what the alternative decoders need of a request.
type benchLimits struct {
	lim          Limits
	nowMs, maxTS int64
}

func (l benchLimits) checkTS(ts int64) error {
	if ts < 0 || ts > l.maxTS || ts > maxEpochMillis {
		return errors.New(`field "ts": out of range`)
	}
	return nil
}

// stdlibReading is the struct encoding/json decodes a reading into.
type stdlibReading struct {
	DeviceID *string         `json:"device_id"`
	TS       json.RawMessage `json:"ts"`
	Metrics  map[string]any  `json:"metrics"`
	Seq      *json.Number    `json:"seq"`
}

// stdlibReadings decodes NDJSON with encoding/json, one Decoder over the
// body, and applies the same checks as the scanner. (encoding/json keeps the
// last of duplicate metric names instead of refusing them.)
func stdlibReadings(body []byte, now time.Time, lim Limits) ([]model.Reading, error) {
	l := benchLimits{lim: lim, nowMs: now.UnixMilli(), maxTS: now.UnixMilli() + lim.MaxFuture.Milliseconds()}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	dec.UseNumber()
	var out []model.Reading
	for row := 0; ; row++ {
		var sr stdlibReading
		if err := dec.Decode(&sr); err != nil {
			if errors.Is(err, io.EOF) {
				return out, nil
			}
			return nil, fmt.Errorf("row %d: %w", row, err)
		}
		if row == lim.MaxRows {
			return nil, &TooManyRowsError{Max: lim.MaxRows}
		}
		var r model.Reading
		if sr.DeviceID == nil {
			return nil, fmt.Errorf("row %d: device_id is required", row)
		}
		if reason := checkID([]byte(*sr.DeviceID), lim.MaxIDLength); reason != "" {
			return nil, fmt.Errorf("row %d: device_id %s", row, reason)
		}
		r.DeviceID = *sr.DeviceID
		if len(sr.TS) == 0 {
			return nil, fmt.Errorf("row %d: ts is required", row)
		}
		if sr.TS[0] == '"' {
			var s string
			if err := json.Unmarshal(sr.TS, &s); err != nil {
				return nil, err
			}
			ts, reason := parseRFC3339([]byte(s))
			if reason != "" {
				return nil, fmt.Errorf("row %d: ts %s", row, reason)
			}
			r.TS = ts
		} else {
			ts, reason := exactInt(sr.TS)
			if reason != "" {
				return nil, fmt.Errorf("row %d: ts %s", row, reason)
			}
			r.TS = ts
		}
		if err := l.checkTS(r.TS); err != nil {
			return nil, fmt.Errorf("row %d: %w", row, err)
		}
		if len(sr.Metrics) == 0 || len(sr.Metrics) > lim.MaxMetrics {
			return nil, fmt.Errorf("row %d: bad metrics count", row)
		}
		r.Metrics = make([]model.Metric, 0, len(sr.Metrics))
		for name, v := range sr.Metrics {
			if reason := checkID([]byte(name), lim.MaxIDLength); reason != "" {
				return nil, fmt.Errorf("row %d: metric %s", row, reason)
			}
			n, ok := v.(json.Number)
			if !ok {
				return nil, fmt.Errorf("row %d: metric %q must be a number", row, name)
			}
			f, err := n.Float64()
			if err != nil || math.IsInf(f, 0) {
				return nil, fmt.Errorf("row %d: metric %q out of range", row, name)
			}
			r.Metrics = append(r.Metrics, model.Metric{Name: name, Value: f})
		}
		sortMetrics(r.Metrics)
		if sr.Seq != nil {
			seq, err := sr.Seq.Int64()
			if err != nil {
				return nil, fmt.Errorf("row %d: seq: %w", row, err)
			}
			r.Seq, r.HasSeq = seq, true
		}
		out = append(out, r)
	}
}

// fastjsonDecoder decodes NDJSON with github.com/valyala/fastjson, copying
// what it keeps out of the parser's memory (interned like the scanner does)
// and applying the same checks.
type fastjsonDecoder struct {
	pool    fastjson.ParserPool
	intern  internTable
	metrics []model.Metric
}

func newFastjsonDecoder() *fastjsonDecoder {
	return &fastjsonDecoder{intern: newInternTable(internSlots)}
}

func (fd *fastjsonDecoder) readings(body []byte, now time.Time, lim Limits) ([]model.Reading, error) {
	l := benchLimits{lim: lim, nowMs: now.UnixMilli(), maxTS: now.UnixMilli() + lim.MaxFuture.Milliseconds()}
	p := fd.pool.Get()
	defer fd.pool.Put(p)
	out := make([]model.Reading, 0, min(bytes.Count(body, []byte("\n"))+1, lim.MaxRows))
	var arena []model.Metric
	row := 0
	for line := range bytes.SplitSeq(body, []byte("\n")) {
		if len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		if row == lim.MaxRows {
			return nil, &TooManyRowsError{Max: lim.MaxRows}
		}
		v, err := p.ParseBytes(line)
		if err != nil {
			return nil, fmt.Errorf("row %d: %w", row, err)
		}
		o, err := v.Object()
		if err != nil {
			return nil, fmt.Errorf("row %d: %w", row, err)
		}
		var r model.Reading
		var seen uint16
		var ferr error
		fail := func(field, reason string) {
			if ferr == nil {
				ferr = &FieldError{Row: row, Field: field, Reason: reason}
			}
		}
		o.Visit(func(k []byte, v *fastjson.Value) {
			if ferr != nil {
				return
			}
			switch string(k) {
			case "device_id":
				seen |= seenDevice
				b, err := v.StringBytes()
				if err != nil {
					fail("device_id", "must be a string")
					return
				}
				if reason := checkID(b, lim.MaxIDLength); reason != "" {
					fail("device_id", reason)
					return
				}
				r.DeviceID = fd.intern.get(b)
			case "ts":
				seen |= seenTS
				switch v.Type() {
				case fastjson.TypeString:
					ts, reason := parseRFC3339(v.GetStringBytes())
					if reason != "" {
						fail("ts", reason)
						return
					}
					r.TS = ts
				case fastjson.TypeNumber:
					ts, err := v.Int64()
					if err != nil {
						fail("ts", err.Error())
						return
					}
					r.TS = ts
				default:
					fail("ts", "must be RFC 3339 or integer epoch milliseconds")
					return
				}
				if err := l.checkTS(r.TS); err != nil {
					fail("ts", err.Error())
				}
			case "metrics":
				seen |= seenMetrics
				mo, err := v.Object()
				if err != nil {
					fail("metrics", "must be a JSON object")
					return
				}
				ms := fd.metrics[:0]
				mo.Visit(func(k []byte, v *fastjson.Value) {
					if reason := checkID(k, lim.MaxIDLength); reason != "" {
						fail("metrics", reason)
						return
					}
					f, err := v.Float64()
					if err != nil || math.IsInf(f, 0) {
						fail("metrics."+string(k), "must be a finite number")
						return
					}
					ms = append(ms, model.Metric{Name: fd.intern.get(k), Value: f})
				})
				fd.metrics = ms
				if len(ms) == 0 || len(ms) > lim.MaxMetrics {
					fail("metrics", "bad count")
					return
				}
				sortMetrics(ms)
				for i := 1; i < len(ms); i++ {
					if ms[i].Name == ms[i-1].Name {
						fail("metrics."+ms[i].Name, "duplicate metric")
						return
					}
				}
				if cap(arena)-len(arena) < len(ms) {
					arena = make([]model.Metric, 0, max(len(ms), 4*(cap(out)-len(out))))
				}
				start := len(arena)
				arena = append(arena, ms...)
				r.Metrics = arena[start:len(arena):len(arena)]
			case "seq":
				seq, err := v.Int64()
				if err != nil {
					fail("seq", err.Error())
					return
				}
				r.Seq, r.HasSeq = seq, true
			default:
				fail(strings.Clone(string(k)), "unknown field")
			}
		})
		if ferr != nil {
			return nil, ferr
		}
		if seen&(seenDevice|seenTS|seenMetrics) != seenDevice|seenTS|seenMetrics {
			return nil, &FieldError{Row: row, Reason: "missing field"}
		}
		out = append(out, r)
		row++
	}
	return out, nil
}
