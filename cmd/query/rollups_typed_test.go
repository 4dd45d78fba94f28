package main

import (
	"encoding/json"
	"math"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/model"
	"github.com/sluicehq/sluice/internal/rollup"
	"github.com/sluicehq/sluice/internal/rollupapi"
	"github.com/sluicehq/sluice/internal/wire"
)

// typedServer answers /v1/rollups (hourly) and /v1/top from rollups
// computed from readings of every type, as the gateway would.
func typedServer(t *testing.T) string {
	t.Helper()
	base := time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC)
	at := func(d time.Duration, ms ...model.Metric) model.Reading {
		return model.Reading{TS: base.Add(d).UnixMilli(), Metrics: ms}
	}
	rows := rollup.Compute("acme", "pump-17", []model.Reading{
		at(0, model.IntMetric("m", math.MaxInt64), model.BoolMetric("on", true)),
		at(time.Second, model.IntMetric("m", math.MaxInt64), model.BoolMetric("on", false)),
		at(2*time.Second, model.StringMetric("m", "idle"), model.BoolMetric("on", true)),
		at(time.Hour, model.Metric{Name: "m", Value: 2.5}),
	}, 1)
	rows = append(rows, rollup.Compute("acme", "pump-18", []model.Reading{at(0, model.StringMetric("m", "run"))}, 1)...)
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/rollups", func(w http.ResponseWriter, r *http.Request) {
		metric := r.URL.Query().Get("metric")
		var mine []rollup.Row
		for _, x := range rows {
			if x.Device == "pump-17" && x.Metric == metric {
				mine = append(mine, x)
			}
		}
		s := wire.RollupSeries{Device: "pump-17", Metric: metric, Step: "1h", Buckets: []wire.Bucket{}}
		for _, b := range rollup.Combine(mine, rollup.StepHour) {
			s.Buckets = append(s.Buckets, rollupapi.BucketOf(b))
		}
		_ = json.NewEncoder(w).Encode(s)
	})
	mux.HandleFunc("GET /v1/top", func(w http.ResponseWriter, r *http.Request) {
		by := rollup.By(r.URL.Query().Get("by"))
		var mine []rollup.Row
		for _, x := range rows {
			if x.Metric == r.URL.Query().Get("metric") {
				mine = append(mine, x)
			}
		}
		l := wire.TopList{Metric: "m", By: string(by), Devices: []wire.Rank{}}
		for _, k := range rollup.Top(mine, by, 10) {
			l.Devices = append(l.Devices, rollupapi.RankOf(k))
		}
		_ = json.NewEncoder(w).Encode(l)
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv.URL
}

func TestTypedRollupsAndTopFormats(t *testing.T) {
	url := typedServer(t)
	now := time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC)
	series := []string{"rollups", "--device", "pump-17", "--metric", "m", "--from", "2026-11-22T10:00:00Z", "--to", "2026-11-22T12:00:00Z", "--step", "1h"}
	bools := []string{"rollups", "--device", "pump-17", "--metric", "on", "--from", "2026-11-22T10:00:00Z", "--to", "2026-11-22T12:00:00Z", "--step", "1h"}
	for _, tc := range []struct {
		name    string
		args    []string
		wantOut string
	}{
		{name: "mixed types table", args: series, wantOut: "" +
			"START                     COUNT  SUM  MIN  MAX               INT_SUM              INT_MIN              INT_MAX                     MEAN                FIRST  FIRST_TS                    LAST  LAST_TS\n" +
			"2026-11-22T10:00:00.000Z      3                 18446744073709551614  9223372036854775807  9223372036854775807  9223372036854775808.000  9223372036854775807  2026-11-22T10:00:00.000Z  \"idle\"  2026-11-22T10:00:02.000Z\n" +
			"2026-11-22T11:00:00.000Z      1  2.5  2.5  2.5                                                                                    2.500                  2.5  2026-11-22T11:00:00.000Z     2.5  2026-11-22T11:00:00.000Z\n"},
		{name: "mixed types csv", args: append(series, "--format", "csv"), wantOut: "" +
			"start,count,sum,min,max,int_sum,int_min,int_max,mean,first,first_ts,last,last_ts\n" +
			"2026-11-22T10:00:00.000Z,3,,,,18446744073709551614,9223372036854775807,9223372036854775807,9223372036854775808.000,9223372036854775807,2026-11-22T10:00:00.000Z,idle,2026-11-22T10:00:02.000Z\n" +
			"2026-11-22T11:00:00.000Z,1,2.5,2.5,2.5,,,,2.500,2.5,2026-11-22T11:00:00.000Z,2.5,2026-11-22T11:00:00.000Z\n"},
		{name: "bools csv", args: append(bools, "--format", "csv"), wantOut: "" +
			"start,count,true,first,first_ts,last,last_ts\n" +
			"2026-11-22T10:00:00.000Z,3,2,true,2026-11-22T10:00:00.000Z,true,2026-11-22T10:00:02.000Z\n"},
		{name: "bools json", args: append(bools, "--format", "json"), wantOut: `{
  "device": "pump-17",
  "metric": "on",
  "step": "1h",
  "buckets": [
    {
      "start": "2026-11-22T10:00:00.000Z",
      "count": 3,
      "first": true,
      "first_ts": "2026-11-22T10:00:00.000Z",
      "last": true,
      "last_ts": "2026-11-22T10:00:02.000Z",
      "bool_count": 3,
      "true_count": 2,
      "bool_first": true,
      "bool_first_ts": "2026-11-22T10:00:00.000Z",
      "bool_last": true,
      "bool_last_ts": "2026-11-22T10:00:02.000Z"
    }
  ]
}
`},
		{name: "top by count csv", args: []string{"top", "--metric", "m", "--by", "count", "--format", "csv"}, wantOut: "" +
			"rank,device,count,mean,max,int_sum,last\n" +
			"1,pump-17,4,6148914691236516864.000,9.22337203685e+18,18446744073709551614,2.5\n" +
			"2,pump-18,1,,,,run\n"},
		{name: "top by max leaves strings out", args: []string{"top", "--metric", "m", "--by", "max", "--format", "csv"}, wantOut: "" +
			"rank,device,count,mean,max,int_sum,last\n" +
			"1,pump-17,4,6148914691236516864.000,9.22337203685e+18,18446744073709551614,2.5\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			stdout, _, err := queryEnv(t, now, append(tc.args, "--url", url, "--token", token)...)
			if err != nil {
				t.Fatal(err)
			}
			if stdout != tc.wantOut {
				t.Errorf("stdout:\n%s\nwant:\n%s", stdout, tc.wantOut)
			}
		})
	}
}
