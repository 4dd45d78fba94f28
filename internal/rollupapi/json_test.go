package rollupapi

import (
	"encoding/json"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/model"
	"github.com/sluicehq/sluice/internal/rollup"
)

// The JSON of a bucket holds each type's aggregates only when present, an
// int sum past int64 as an exact integer, and no NaN (a bucket of strings
// has no mean).
func TestBucketJSON(t *testing.T) {
	t0 := time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC).UnixMilli()
	rows := rollup.Compute("acme", "d", []model.Reading{
		{TS: t0, Metrics: []model.Metric{model.BoolMetric("b", true), model.IntMetric("n", math.MaxInt64), model.StringMetric("s", "a")}},
		{TS: t0 + 1000, Metrics: []model.Metric{model.BoolMetric("b", false), model.IntMetric("n", math.MaxInt64), model.StringMetric("s", "b")}},
	}, 1)
	tests := map[string]string{
		"n": `{"start":"2026-11-22T10:00:00.000Z","count":2,"mean":9223372036854776000,"first":9223372036854775807,"first_ts":"2026-11-22T10:00:00.000Z",` +
			`"last":9223372036854775807,"last_ts":"2026-11-22T10:00:01.000Z","int_count":2,"int_sum":18446744073709551614,` +
			`"int_min":9223372036854775807,"int_max":9223372036854775807,"int_first":9223372036854775807,"int_first_ts":"2026-11-22T10:00:00.000Z",` +
			`"int_last":9223372036854775807,"int_last_ts":"2026-11-22T10:00:01.000Z"}`,
		"s": `{"start":"2026-11-22T10:00:00.000Z","count":2,"first":"a","first_ts":"2026-11-22T10:00:00.000Z","last":"b","last_ts":"2026-11-22T10:00:01.000Z",` +
			`"str_count":2,"str_first":"a","str_first_ts":"2026-11-22T10:00:00.000Z","str_last":"b","str_last_ts":"2026-11-22T10:00:01.000Z"}`,
	}
	// A top list's entry carries each type's own figures: the exact int
	// sum, the true count, the last value.
	ranks := map[string][]string{
		"b": {`"count":2`, `"true_count":1`, `"last":false`},
		"n": {`"count":2`, `"int_sum":18446744073709551614`, `"last":9223372036854775807`},
		"s": {`"count":2`, `"last":"b"`},
	}
	for _, r := range rows {
		var b rollup.Bucket
		b.Merge(r)
		b.Start = r.Minute
		got, err := json.Marshal(BucketOf(b))
		if err != nil {
			t.Fatal(err)
		}
		if want, ok := tests[r.Metric]; ok && string(got) != want {
			t.Errorf("%s:\n got %s\nwant %s", r.Metric, got, want)
		}
		rank, err := json.Marshal(RankOf(rollup.RankOf("d", b, rollup.ByCount)))
		if err != nil {
			t.Errorf("rank of %s: %v", r.Metric, err)
		}
		for _, want := range ranks[r.Metric] {
			if !strings.Contains(string(rank), want) {
				t.Errorf("rank of %s: %s lacks %s", r.Metric, rank, want)
			}
		}
	}
}
