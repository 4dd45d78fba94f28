package lineproto

import (
	"errors"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/sluicehq/sluice/internal/decode"
	"github.com/sluicehq/sluice/internal/model"
)

var testNow = time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)

// ns is testNow minus a minute, in nanoseconds, as text.
const tsNs = "1764244740000000000"
const tsMs = int64(1764244740000)

func TestReadings(t *testing.T) {
	cases := []struct {
		name string
		body string
		cfg  Config
		opt  Options
		want []model.Reading
	}{{
		name: "plain",
		body: "weather,device=d1 temp=21.5,rh=40i " + tsNs,
		want: []model.Reading{{DeviceID: "d1", TS: tsMs, Metrics: []model.Metric{
			model.IntMetric("weather.rh", 40), {Name: "weather.temp", Value: 21.5}}}},
	}, {
		name: "host is the device when there is no device tag; other tags are in the name",
		body: "cpu,cpu=cpu-total,host=h1 usage_idle=97.5 " + tsNs,
		want: []model.Reading{{DeviceID: "h1", TS: tsMs, Metrics: []model.Metric{
			{Name: "cpu.usage_idle:cpu.cpu-total", Value: 97.5}}}},
	}, {
		name: "device wins over host, which stays in the name",
		body: "m,host=h1,device=d1 v=1 " + tsNs,
		want: []model.Reading{{DeviceID: "d1", TS: tsMs, Metrics: []model.Metric{
			{Name: "m.v:host.h1", Value: 1}}}},
	}, {
		name: "a metric twice in a reading: the later line wins",
		body: "m,host=h v=1,v=2,w=1 " + tsNs + "\nn,host=h x=1 " + tsNs + "\nm,host=h v=3i " + tsNs[:len(tsNs)-3] + "999",
		want: []model.Reading{{DeviceID: "h", TS: tsMs, Metrics: []model.Metric{
			model.IntMetric("m.v", 3), {Name: "m.w", Value: 1}, {Name: "n.x", Value: 1}}}},
	}, {
		name: "tags sorted and escaped",
		body: `disk,path=/boot/efi,host=h1,fstype=vfat,mode=rw used_percent=3.25 ` + tsNs,
		want: []model.Reading{{DeviceID: "h1", TS: tsMs, Metrics: []model.Metric{
			{Name: "disk.used_percent:fstype.vfat:mode.rw:path.-2fboot-2fefi", Value: 3.25}}}},
	}, {
		name: "dots and colons",
		body: `a.b,x.y=1.2:3,host=h c.d=1 ` + tsNs,
		want: []model.Reading{{DeviceID: "h", TS: tsMs, Metrics: []model.Metric{
			{Name: "a-2eb.c.d:x-2ey.1.2-3a3", Value: 1}}}},
	}, {
		name: "typed values",
		body: `m,host=h f=1.5,i=-3i,u=7u,t=t,T=TRUE,F=False,s="a \"q\" b" ` + tsNs,
		want: []model.Reading{{DeviceID: "h", TS: tsMs, Metrics: []model.Metric{
			model.BoolMetric("m.F", false), model.BoolMetric("m.T", true), {Name: "m.f", Value: 1.5},
			model.IntMetric("m.i", -3), model.StringMetric("m.s", `a "q" b`), model.BoolMetric("m.t", true),
			model.IntMetric("m.u", 7)}}},
	}, {
		name: "lines of one device and millisecond merge; blank lines and comments skipped",
		body: "# header\n\ncpu,host=h a=1 " + tsNs + "\r\nmem,host=h b=2 1764244740000999999\n  \nmem,host=g b=3 " + tsNs + "\n",
		want: []model.Reading{
			{DeviceID: "h", TS: tsMs, Metrics: []model.Metric{{Name: "cpu.a", Value: 1}, {Name: "mem.b", Value: 2}}},
			{DeviceID: "g", TS: tsMs, Metrics: []model.Metric{{Name: "mem.b", Value: 3}}}},
	}, {
		name: "interleaved devices regroup",
		body: "a,host=h x=1 " + tsNs + "\na,host=g x=2 " + tsNs + "\nb,host=h y=3 " + tsNs + "\nb,host=g y=4 " + tsNs,
		want: []model.Reading{
			{DeviceID: "h", TS: tsMs, Metrics: []model.Metric{{Name: "a.x", Value: 1}, {Name: "b.y", Value: 3}}},
			{DeviceID: "g", TS: tsMs, Metrics: []model.Metric{{Name: "a.x", Value: 2}, {Name: "b.y", Value: 4}}}},
	}, {
		name: "lines of one shape with other fields reuse no wrong name",
		body: "m,host=h a=1,b=2 1000000000\nm,host=h b=3,a=4 2000000000\nm,host=h a=5 3000000000\n" +
			"m,host=h a=6,b=7,c=8 4000000000\nm,host=h,x=1 a=9 5000000000\nn,host=h a=10 6000000000",
		want: []model.Reading{
			{DeviceID: "h", TS: 1000, Metrics: []model.Metric{{Name: "m.a", Value: 1}, {Name: "m.b", Value: 2}}},
			{DeviceID: "h", TS: 2000, Metrics: []model.Metric{{Name: "m.a", Value: 4}, {Name: "m.b", Value: 3}}},
			{DeviceID: "h", TS: 3000, Metrics: []model.Metric{{Name: "m.a", Value: 5}}},
			{DeviceID: "h", TS: 4000, Metrics: []model.Metric{{Name: "m.a", Value: 6}, {Name: "m.b", Value: 7}, {Name: "m.c", Value: 8}}},
			{DeviceID: "h", TS: 5000, Metrics: []model.Metric{{Name: "m.a:x.1", Value: 9}}},
			{DeviceID: "h", TS: 6000, Metrics: []model.Metric{{Name: "n.a", Value: 10}}}},
	}, {
		name: "no timestamp takes now",
		body: "m,host=h v=1",
		want: []model.Reading{{DeviceID: "h", TS: testNow.UnixMilli(), Metrics: []model.Metric{{Name: "m.v", Value: 1}}}},
	}, {
		name: "precision s",
		body: "m,host=h v=1 1764244740",
		opt:  Options{Precision: time.Second},
		want: []model.Reading{{DeviceID: "h", TS: tsMs, Metrics: []model.Metric{{Name: "m.v", Value: 1}}}},
	}, {
		name: "precision us rounds down",
		body: "m,host=h v=1 1764244740000999",
		opt:  Options{Precision: time.Microsecond},
		want: []model.Reading{{DeviceID: "h", TS: tsMs, Metrics: []model.Metric{{Name: "m.v", Value: 1}}}},
	}, {
		name: "default device",
		body: "m v=1 " + tsNs,
		cfg:  Config{DeviceTags: []string{"device"}, DefaultDevice: "gw"},
		want: []model.Reading{{DeviceID: "gw", TS: tsMs, Metrics: []model.Metric{{Name: "m.v", Value: 1}}}},
	}, {
		name: "device from the topic",
		body: "m v=1 " + tsNs + "\nm,device=t1 w=2 " + tsNs,
		opt:  Options{Device: "t1"},
		want: []model.Reading{{DeviceID: "t1", TS: tsMs, Metrics: []model.Metric{{Name: "m.v", Value: 1}, {Name: "m.w", Value: 2}}}},
	}, {
		name: "unicode and hex-like dashes",
		body: "m,host=h,city=Zürich,d=a-1f v=1 " + tsNs,
		want: []model.Reading{{DeviceID: "h", TS: tsMs, Metrics: []model.Metric{
			{Name: "m.v:city.Z-c3-bcrich:d.a-2d1f", Value: 1}}}},
	}}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cfg := tc.cfg
			if cfg.DeviceTags == nil {
				cfg = DefaultConfig()
			}
			got, _, err := Readings([]byte(tc.body), testNow, cfg, decode.DefaultLimits(), tc.opt)
			if err != nil {
				t.Fatal(err)
			}
			if d := cmp.Diff(tc.want, got); d != "" {
				t.Fatalf("readings (-want +got):\n%s", d)
			}
			for _, r := range got {
				for _, m := range r.Metrics {
					if reason := decode.CheckID([]byte(m.Name), 128); reason != "" {
						t.Errorf("metric name %q %s", m.Name, reason)
					}
				}
			}
		})
	}
}

func TestReadingsErrors(t *testing.T) {
	long := strings.Repeat("x", 60)
	cases := []struct {
		name      string
		body      string
		lim       func(*decode.Limits)
		opt       Options
		line      int
		field     string
		reason    string // a substring
		mismatch  bool
		syntax    bool
		tooMany   bool
		defDevice string
	}{
		{name: "no device", body: "m,host=h v=1\n\nm,x=y v=2", line: 3, reason: "has no device tag (influx.device_tags: device, host)"},
		{name: "syntax", body: "m,host=h v=1\nm,host=h v=\n", line: 2, syntax: true, reason: "malformed line protocol"},
		{name: "no fields", body: "m,host=h v=1\nm,host=h\n", line: 2, syntax: true},
		{name: "uint over int64", body: "m,host=h v=1\nm,host=h big=18446744073709551615u", line: 2, field: `field "big"`, reason: "above 9223372036854775807"},
		{name: "int out of range", body: "m,host=h big=9223372036854775808i", line: 1, syntax: true, reason: `"big"`},
		{name: "string too long", body: `m,host=h s="` + strings.Repeat("a", 257) + `"`, line: 1, field: `field "s"`, reason: "string is 257 bytes long"},
		{name: "bad device id", body: "m,host=a/b v=1", line: 1, field: `tag "host"`, reason: "invalid character"},
		{name: "duplicate tag", body: "m,host=h,a=1,a=2 v=1", line: 1, field: `tag "a"`, reason: "twice"},
		{name: "name too long", body: "m,host=h,t=" + long + ",u=" + long + " v=1", line: 1, field: `field "v"`, reason: "limits.max_id_length"},
		{name: "future", body: "m,host=h v=1 1864244740000000000", line: 1, field: "timestamp", reason: "in the future"},
		{name: "far future: the wait is said without overflow", body: "m,host=h v=1 200000000000", opt: Options{Precision: time.Second}, line: 1, field: "timestamp", reason: "is 55056727h in the future"},
		{name: "before 1970", body: "m,host=h v=1 -1", line: 1, field: "timestamp", reason: "before 1970"},
		{name: "after 9999", body: "m,host=h v=1 9223372036854775807", opt: Options{Precision: time.Hour}, line: 1, field: "timestamp", reason: "after year 9999"},
		{name: "horizon", body: "m,host=h v=1 1000000000", lim: func(l *decode.Limits) { l.Oldest = testNow.Add(-time.Hour) }, line: 1, field: "timestamp", reason: "retention horizon"},
		{name: "too many readings", body: "m,host=a v=1\nm,host=b v=1\nm,host=c v=1", lim: func(l *decode.Limits) { l.MaxRows = 2 }, tooMany: true},
		{name: "too many metrics", body: "m,host=a v=1,w=2\nn,host=a x=3", lim: func(l *decode.Limits) { l.MaxMetrics = 2 }, line: 2, reason: "more than 2 metrics"},
		{name: "topic mismatch", body: "m,device=other v=1", opt: Options{Device: "t1"}, line: 1, field: `tag "device"`, reason: "does not match", mismatch: true},
		{name: "empty", body: "\n# nothing\n", reason: "no lines", syntax: true},
		{name: "raw newline in a string keeps the line count", body: "m,host=h s=\"a\nb\" " + tsNs + "\nm,host=h v=\n", line: 3, syntax: true},
		{name: "error after a multi-line string", body: "m,host=h s=\"a\nb\" " + tsNs + "\nm,x=1 v=1\n", line: 3, reason: "no device tag"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			lim := decode.DefaultLimits()
			if tc.lim != nil {
				tc.lim(&lim)
			}
			_, _, err := Readings([]byte(tc.body), testNow, DefaultConfig(), lim, tc.opt)
			if tc.tooMany {
				var tm *decode.TooManyRowsError
				if !errors.As(err, &tm) {
					t.Fatalf("error %v, want *decode.TooManyRowsError", err)
				}
				return
			}
			var le *LineError
			if !errors.As(err, &le) {
				t.Fatalf("error %T %v, want *LineError", err, err)
			}
			if le.Line != tc.line || (tc.field != "" && le.Field != tc.field) || !strings.Contains(le.Reason, tc.reason) ||
				le.DeviceMismatch != tc.mismatch || le.Syntax != tc.syntax {
				t.Fatalf("error %#v (%v), want line %d field %q reason ~%q mismatch %v syntax %v",
					*le, le, tc.line, tc.field, tc.reason, tc.mismatch, tc.syntax)
			}
		})
	}
}

func TestParsePrecision(t *testing.T) {
	for _, tc := range []struct {
		s    string
		v1   bool
		want time.Duration
		bad  bool
	}{
		{s: "", want: time.Nanosecond}, {s: "ns", want: time.Nanosecond}, {s: "us", want: time.Microsecond},
		{s: "ms", want: time.Millisecond}, {s: "s", want: time.Second}, {s: "m", bad: true}, {s: "h", bad: true},
		{s: "n", v1: true, want: time.Nanosecond}, {s: "u", v1: true, want: time.Microsecond},
		{s: "m", v1: true, want: time.Minute}, {s: "h", v1: true, want: time.Hour}, {s: "d", v1: true, bad: true},
	} {
		got, err := ParsePrecision(tc.s, tc.v1)
		if (err != nil) != tc.bad || got != tc.want {
			t.Errorf("ParsePrecision(%q, %v) = %v, %v", tc.s, tc.v1, got, err)
		}
	}
}

func TestNameRoundTrip(t *testing.T) {
	for _, n := range []Name{
		{Measurement: "cpu", Field: "usage_idle", Tags: []Tag{{"cpu", "cpu-total"}}},
		{Measurement: "a.b", Field: "c.d", Tags: []Tag{{"k.e:y", "v.a:l/ue"}, {"z", "-ab-"}}},
		{Measurement: "-", Field: "-0f", Tags: []Tag{{"é", "日本"}}},
	} {
		s := n.String()
		if reason := decode.CheckID([]byte(s), 1000); reason != "" {
			t.Errorf("%q %s", s, reason)
		}
		got, err := ParseName(s)
		if err != nil {
			t.Fatal(err)
		}
		if d := cmp.Diff(n, got); d != "" {
			t.Errorf("ParseName(%q) (-want +got):\n%s", s, d)
		}
	}
}

func TestCellsBound(t *testing.T) {
	body := []byte("cpu,host=h a=1,b=2 1\nmem,host=h c=3\n")
	rs, _, err := Readings(body, testNow, DefaultConfig(), decode.DefaultLimits(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, r := range rs {
		n += len(r.Metrics)
	}
	if b := CellsBound(body, decode.DefaultLimits()); b < n {
		t.Fatalf("bound %d < %d cells", b, n)
	}
}

// A pooled parser whose intern table reached its bound starts the next
// call with an empty table, so that a body of many distinct names (a
// hostile or a misconfigured client) does not leave the names of later
// requests uninterned for the life of the parser.
func TestInternTableResetsAtItsBound(t *testing.T) {
	p := &parser{names: make(map[string]string), index: make(map[readingKey]int32)}
	p.start(testNow, DefaultConfig(), decode.DefaultLimits(), Options{})
	for i := range maxNames + 10 {
		p.intern([]byte("m" + strconv.Itoa(i)))
	}
	if len(p.names) != maxNames {
		t.Fatalf("intern table holds %d names, want its bound %d", len(p.names), maxNames)
	}
	p.start(testNow, DefaultConfig(), decode.DefaultLimits(), Options{})
	if len(p.names) != 0 {
		t.Errorf("intern table holds %d names at the start of the next call, want 0", len(p.names))
	}
}

// An error never echoes a client's key or line whole: the 400 body, the
// MQTT dead letter's error (stored beside a payload cut to
// mqtt.dead_letter_payload_bytes) and its log line stay short however long
// the tag keys, field keys or bad timestamps of a line are.
func TestErrorsBounded(t *testing.T) {
	huge := strings.Repeat("k", 100_000)
	var tags string
	for i := range 40 {
		tags += "," + strconv.Itoa(i) + huge[:2000] + "=v"
	}
	for name, body := range map[string]string{
		"duplicate tag":        "m,host=h," + huge + "=1," + huge + "=2 v=1",
		"name too long":        "m,host=h" + tags + " " + huge + "=1",
		"field value too long": "m,host=h " + huge + `="` + strings.Repeat("a", 300) + `"`,
		"uint over int64":      "m,host=h " + huge + "=18446744073709551615u",
		"bad field value":      "m,host=h " + huge + "=99999999999999999999i",
		"text after timestamp": "m,host=h v=1 1 " + huge,
		"bad timestamp":        "m,host=h v=1 1" + huge,
		"no equals":            "m,host=h " + huge,
	} {
		_, _, err := Readings([]byte(body), testNow, DefaultConfig(), decode.DefaultLimits(), Options{})
		if err == nil {
			t.Errorf("%s: no error", name)
			continue
		}
		if n := len(err.Error()); n > 1024 {
			t.Errorf("%s: error of %d bytes: %.200s…", name, n, err)
		}
	}
}

// limits.max_metrics is enforced while a body is read, not after: a line
// of a million fields, or thousands of lines of one device and
// millisecond, are refused without holding a cell per field (64 bytes for
// every 4 bytes of body: a GiB for a 64 MiB body). The memory of a call
// is bounded by limits.max_rows × limits.max_metrics, as JSON's is.
func TestMaxMetricsBoundsMemory(t *testing.T) {
	var wide strings.Builder
	wide.WriteString("m,host=h ")
	for i := range 1_000_000 {
		if i > 0 {
			wide.WriteByte(',')
		}
		wide.WriteString("f")
		wide.WriteString(strconv.Itoa(i))
		wide.WriteString("=1")
	}
	var tall strings.Builder
	fields := strings.TrimSuffix(strings.Repeat("a=1,", 200), ",")
	for range 20_000 {
		tall.WriteString("m,host=h " + fields + " " + tsNs + "\n")
	}
	for name, body := range map[string][]byte{"one wide line": []byte(wide.String()), "many lines of one reading": []byte(tall.String())} {
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		_, _, err := Readings(body, testNow, DefaultConfig(), decode.DefaultLimits(), Options{})
		runtime.ReadMemStats(&after)
		var le *LineError
		if !errors.As(err, &le) || le.Line != 1 && le.Line != 2 || !strings.Contains(le.Reason, "limits.max_metrics") {
			t.Errorf("%s: error %v, want a max_metrics LineError on line 1 or 2", name, err)
		}
		if n := after.TotalAlloc - before.TotalAlloc; n > 4<<20 {
			t.Errorf("%s: %d MiB allocated to refuse a body of %d MiB", name, n>>20, len(body)>>20)
		}
	}
}

// A measurement or tags too long for any metric name of the line to fit
// limits.max_id_length are refused before they are escaped into names (3
// bytes for each byte escaped) or held as tags (24 bytes a tag).
func TestLongLinePartsBoundMemory(t *testing.T) {
	var tags strings.Builder
	tags.WriteString("m,host=h")
	for i := range 500_000 {
		tags.WriteString(",t")
		tags.WriteString(strconv.Itoa(i))
		tags.WriteString("=v")
	}
	tags.WriteString(" v=1")
	for name, body := range map[string][]byte{
		"many tags":        []byte(tags.String()),
		"long measurement": []byte(strings.Repeat("/", 4<<20) + ",host=h v=1"),
	} {
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		_, _, err := Readings(body, testNow, DefaultConfig(), decode.DefaultLimits(), Options{})
		runtime.ReadMemStats(&after)
		var le *LineError
		if !errors.As(err, &le) || le.Line != 1 || !strings.Contains(le.Reason, "limits.max_id_length") {
			t.Errorf("%s: error %v, want a max_id_length LineError on line 1", name, err)
		}
		if n := after.TotalAlloc - before.TotalAlloc; n > uint64(len(body))+4<<20 {
			t.Errorf("%s: %d MiB allocated to refuse a body of %d MiB", name, n>>20, len(body)>>20)
		}
	}
}
