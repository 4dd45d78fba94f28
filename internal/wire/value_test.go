package wire

import (
	"encoding/json"
	"math"
	"testing"

	"github.com/sluicehq/sluice/internal/model"
)

func TestValueJSON(t *testing.T) {
	cases := []struct {
		m    model.Metric
		json string
	}{
		{model.Metric{Value: 21.5}, `21.5`},
		{model.Metric{Value: 21}, `21.0`},
		{model.Metric{Value: -0.5}, `-0.5`},
		{model.Metric{Value: 1e21}, `1e+21`},
		{model.Metric{Value: 12345678901234567890}, `12345678901234567000.0`},
		{model.Metric{Value: 5e-324}, `5e-324`},
		{model.IntMetric("", 42), `42`},
		{model.IntMetric("", math.MinInt64), `-9223372036854775808`},
		{model.IntMetric("", math.MaxInt64), `9223372036854775807`},
		{model.BoolMetric("", true), `true`},
		{model.BoolMetric("", false), `false`},
		{model.StringMetric("", "idle"), `"idle"`},
		{model.StringMetric("", "21.5"), `"21.5"`},
		{model.StringMetric("", "a \"q\"\n"), `"a \"q\"\n"`},
	}
	for _, tc := range cases {
		got, err := json.Marshal(Value(tc.m))
		if err != nil || string(got) != tc.json {
			t.Errorf("marshal %#v = %s, %v; want %s", tc.m, got, err, tc.json)
			continue
		}
		var back Value
		if err := json.Unmarshal(got, &back); err != nil || model.Metric(back) != tc.m {
			t.Errorf("unmarshal %s = %#v, %v; want %#v", got, back, err, tc.m)
		}
	}
	for _, bad := range []string{`null`, `9223372036854775808`, `{}`} {
		var v Value
		if err := json.Unmarshal([]byte(bad), &v); err == nil {
			t.Errorf("unmarshal %s = %#v, want an error", bad, v)
		}
	}
	if _, err := json.Marshal(Value{Value: math.NaN()}); err == nil {
		t.Error("marshal NaN: no error")
	}
}
