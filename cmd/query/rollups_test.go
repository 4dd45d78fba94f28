package main

import (
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/wire"
)

// rollupServer answers verify with v and rebuild with one progress line
// and res.
func rollupServer(t *testing.T, v wire.Verification, res wire.RebuildResult) string {
	t.Helper()
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/rollups/verify", func(w http.ResponseWriter, r *http.Request) {
		v.Day = r.URL.Query().Get("day")
		_ = json.NewEncoder(w).Encode(v)
	})
	mux.HandleFunc("POST /v1/rollups/rebuild", func(w http.ResponseWriter, _ *http.Request) {
		enc := json.NewEncoder(w)
		_ = enc.Encode(wire.RebuildProgress{Done: 1, Total: 1, Device: "pump-17", Day: "2026-11-21"})
		_ = enc.Encode(wire.RebuildProgress{Result: &res})
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv.URL
}

func TestRollupsVerifyAndRebuildFormats(t *testing.T) {
	ok := rollupServer(t, wire.Verification{Devices: 2, Metrics: 3, RawRows: 60, RollupRows: 60},
		wire.RebuildResult{DeviceDays: 2, Readings: 60, Written: 9, Retracted: 3})
	bad := rollupServer(t, wire.Verification{Devices: 1, Metrics: 1, RawRows: 10, RollupRows: 12,
		Mismatches: []wire.Mismatch{{Device: "pump-17", Metric: "temp", Raw: 10, Rollup: 12}}}, wire.RebuildResult{})
	typed := rollupServer(t, wire.Verification{Devices: 1, Metrics: 1, RawRows: 10, RollupRows: 10,
		Mismatches: []wire.Mismatch{{Device: "pump-17", Metric: "n", Raw: 10, Rollup: 10, Diffs: []string{"int_sum: raw 12, rollup 9", "true_count: raw 3, rollup 2"}}}}, wire.RebuildResult{})
	now := time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC)
	verify := []string{"rollups", "verify", "--day", "2026-11-21"}
	rebuild := []string{"rollups", "rebuild", "--from", "2026-11-20", "--to", "2026-11-22"}
	for _, tc := range []struct {
		name       string
		url        string
		args       []string
		wantOut    string
		wantStderr string // the progress bar is left out of the comparison when empty
		mismatch   bool
	}{
		{name: "verify table", url: ok, args: verify,
			wantOut: "2026-11-21: 2 devices, 3 device-metrics, 60 raw readings, 60 counted by rollups\nrollups match the raw store\n"},
		{name: "verify csv", url: ok, args: append(verify, "--format", "csv"),
			wantOut:    "device,metric,raw,rollup,diff\n",
			wantStderr: "2026-11-21: 2 devices, 3 device-metrics, 60 raw readings, 60 counted by rollups\n"},
		{name: "verify json", url: ok, args: append(verify, "--format", "json"),
			wantOut: `{
  "day": "2026-11-21",
  "devices": 2,
  "metrics": 3,
  "raw_rows": 60,
  "rollup_rows": 60,
  "mismatches": []
}
`},
		{name: "verify mismatch table", url: bad, args: verify, mismatch: true,
			wantOut: "2026-11-21: 1 devices, 1 device-metrics, 10 raw readings, 12 counted by rollups\n" +
				"DEVICE   METRIC  RAW  ROLLUP  DIFF\npump-17  temp     10      12    +2\n"},
		{name: "verify typed mismatch table", url: typed, args: verify, mismatch: true,
			wantOut: "2026-11-21: 1 devices, 1 device-metrics, 10 raw readings, 10 counted by rollups\n" +
				"DEVICE   METRIC  RAW  ROLLUP  DIFF  DIFFERS\npump-17  n        10      10    +0  int_sum: raw 12, rollup 9; true_count: raw 3, rollup 2\n"},
		{name: "verify mismatch csv", url: bad, args: append(verify, "--format", "csv"), mismatch: true,
			wantOut:    "device,metric,raw,rollup,diff\npump-17,temp,10,12,+2\n",
			wantStderr: "2026-11-21: 1 devices, 1 device-metrics, 10 raw readings, 12 counted by rollups\n"},
		{name: "verify mismatch json", url: bad, args: append(verify, "--format", "json"), mismatch: true,
			wantOut: `{
  "day": "2026-11-21",
  "devices": 1,
  "metrics": 1,
  "raw_rows": 10,
  "rollup_rows": 12,
  "mismatches": [
    {
      "device": "pump-17",
      "metric": "temp",
      "raw": 10,
      "rollup": 12
    }
  ]
}
`},
		{name: "rebuild table", url: ok, args: rebuild,
			wantOut: "rebuilt 2 device-days from 60 raw readings: 6 rollup rows written, 3 replaced rows retracted\n"},
		{name: "rebuild csv", url: ok, args: append(rebuild, "--format", "csv"),
			wantOut: "device_days,readings,rows_written,rows_retracted\n2,60,9,3\n"},
		{name: "rebuild json", url: ok, args: append(rebuild, "--format", "json"),
			wantOut: "{\n  \"device_days\": 2,\n  \"readings\": 60,\n  \"rows_written\": 9,\n  \"rows_retracted\": 3\n}\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			stdout, stderr, err := queryEnv(t, now, append(tc.args, "--url", tc.url, "--token", token)...)
			switch {
			case tc.mismatch && !errors.Is(err, errMismatch):
				t.Errorf("error = %v, want a mismatch (exit 1)", err)
			case !tc.mismatch && err != nil:
				t.Errorf("error = %v, want none", err)
			}
			if stdout != tc.wantOut {
				t.Errorf("stdout:\n%s\nwant:\n%s", stdout, tc.wantOut)
			}
			if tc.wantStderr != "" && stderr != tc.wantStderr {
				t.Errorf("stderr = %q, want %q", stderr, tc.wantStderr)
			}
		})
	}
}
