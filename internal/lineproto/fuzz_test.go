package lineproto

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/sluicehq/sluice/internal/decode"
	"github.com/sluicehq/sluice/internal/model"
)

// FuzzReadings checks, on any body, that Readings either fails with one of
// the documented errors or returns readings within the limits whose metric
// names are valid ids that ParseName reads back.
func FuzzReadings(f *testing.F) {
	for _, s := range []string{
		"cpu,host=h1,cpu=cpu0 usage_idle=5,n=3i,u=4u,b=t,s=\"x\" 1764244740000000000",
		"m v=1\nm,device=d w=2 1764244740000",
		"# c\n\nm,host=h s=\"a\nb\",v=1\r\n",
		"a\\ b,t\\,k=v\\=1,host=h f\\ x=1e3 1",
		"m,host=h v=18446744073709551615u",
		"m,host=h,host=g v=1",
	} {
		f.Add([]byte(s), uint8(0), false)
	}
	lim := decode.Limits{MaxRows: 8, MaxMetrics: 6, MaxIDLength: 48, MaxTextLength: 24, MaxStringValue: 12,
		MaxAttributesBytes: 96, MaxFuture: 5 * time.Minute, Oldest: testNow.Add(-100 * 365 * 24 * time.Hour)}
	precisions := []time.Duration{time.Nanosecond, time.Microsecond, time.Millisecond, time.Second, time.Minute, time.Hour}
	f.Fuzz(func(t *testing.T, body []byte, prec uint8, topic bool) {
		opt := Options{Precision: precisions[int(prec)%len(precisions)]}
		if topic {
			opt.Device = "h"
		}
		rs, _, err := Readings(body, testNow, Config{DeviceTags: []string{"device", "host"}}, lim, opt)
		if err != nil {
			var le *LineError
			var tm *decode.TooManyRowsError
			switch {
			case errors.As(err, &tm):
			case errors.As(err, &le):
				if le.Reason == "" || le.Line < 0 || le.Line > slices.Index(append(body, '\n'), 0)+len(body)+2 {
					t.Fatalf("bad LineError %#v", *le)
				}
			default:
				t.Fatalf("error %T %v", err, err)
			}
			return
		}
		if len(rs) == 0 || len(rs) > lim.MaxRows {
			t.Fatalf("%d readings", len(rs))
		}
		for _, r := range rs {
			if decode.CheckID([]byte(r.DeviceID), lim.MaxIDLength) != "" || r.TS < lim.Oldest.UnixMilli() || r.TS > testNow.Add(lim.MaxFuture).UnixMilli() {
				t.Fatalf("bad reading %+v", r)
			}
			if len(r.Metrics) == 0 || len(r.Metrics) > lim.MaxMetrics {
				t.Fatalf("%d metrics", len(r.Metrics))
			}
			for i, m := range r.Metrics {
				if i > 0 && r.Metrics[i-1].Name >= m.Name {
					t.Fatalf("metrics not sorted and unique: %+v", r.Metrics)
				}
				if reason := decode.CheckID([]byte(m.Name), lim.MaxIDLength); reason != "" {
					t.Fatalf("metric name %q %s", m.Name, reason)
				}
				n, err := ParseName(m.Name)
				if err != nil {
					t.Fatal(err)
				}
				if n.String() != m.Name {
					t.Fatalf("ParseName(%q).String() = %q", m.Name, n.String())
				}
				if m.Type == model.TypeString && model.CheckStringValue([]byte(m.Str), lim.MaxStringValue) != "" {
					t.Fatalf("string value %q", m.Str)
				}
			}
		}
	})
}

// FuzzName checks that any measurement, field and tags make a valid id that
// ParseName splits back into them.
func FuzzName(f *testing.F) {
	f.Add("cpu", "usage_idle", "cpu", "cpu-total")
	f.Add("a.b", "c:d", "-1f", "/x.y")
	f.Fuzz(func(t *testing.T, meas, field, key, value string) {
		if meas == "" || field == "" || key == "" || value == "" {
			return
		}
		n := Name{Measurement: meas, Field: field, Tags: []Tag{{key, value}}}
		s := n.String()
		if reason := decode.CheckID([]byte(s), 1<<20); reason != "" {
			t.Fatalf("%q %s", s, reason)
		}
		if got := segmentLen([]byte(meas), true); got != len(appendSegment(nil, []byte(meas), true)) {
			t.Fatalf("segmentLen(%q) = %d", meas, got)
		}
		got, err := ParseName(s)
		if err != nil {
			t.Fatal(err)
		}
		if d := cmp.Diff(n, got); d != "" {
			t.Fatalf("ParseName(%q) (-want +got):\n%s", s, d)
		}
	})
}
