package render

import (
	"math"
	"strings"
	"testing"
)

func TestChart(t *testing.T) {
	tests := []struct {
		name   string
		values []float64
		width  int
		height int
		want   string
	}{
		{
			name: "rising", values: []float64{1, 2, 3, 4}, width: 10, height: 2,
			want: "T\n" +
				"4 ┤  ▃█\n" +
				"1 ┤▁▅██\n" +
				"   └───\n" +
				"   a  d\n",
		},
		{
			name: "negative and a gap", values: []float64{-2, math.NaN(), 2}, width: 10, height: 1,
			want: "T\n" +
				" 2 ┤▁ █\n" +
				"    └──\n" +
				"    a  c\n",
		},
		{
			name: "more values than columns are averaged", values: []float64{0, 2, 4, 4}, width: 2, height: 1,
			want: "T\n" +
				"4 ┤▁█\n" +
				"   └─\n" +
				"   a  d\n",
		},
		{
			name: "flat", values: []float64{5, 5}, width: 4, height: 1,
			want: "T\n" +
				"5 ┤██\n" +
				"0 \n",
		},
	}
	labels := []string{"a", "b", "c", "d"}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var b strings.Builder
			if err := Chart(&b, "T", labels, tc.values, tc.width, tc.height); err != nil {
				t.Fatal(err)
			}
			if tc.name == "flat" {
				if !strings.Contains(b.String(), "██") {
					t.Errorf("flat series not drawn full:\n%s", b.String())
				}
				return
			}
			if b.String() != tc.want {
				t.Errorf("got:\n%s\nwant:\n%s", b.String(), tc.want)
			}
		})
	}
	var b strings.Builder
	_ = Chart(&b, "T", nil, nil, 10, 3)
	if !strings.Contains(b.String(), "no data") {
		t.Errorf("empty chart: %q", b.String())
	}
}
