package buckets_test

import (
	"math"
	"slices"
	"testing"

	"github.com/sluicehq/sluice/internal/buckets"
	"github.com/sluicehq/sluice/internal/model"
)

// TestBefore: a partition's Before is the latest timestamp its series-day
// held when the round that placed in it began, whatever the round placed
// since, over every partition of the series-day (a split one and what Load
// read included).
func TestBefore(t *testing.T) {
	start := sdA.Day.Start()
	tests := []struct {
		name   string
		loaded []model.PartitionInfo
		rounds [][]int64 // timestamps placed, offsets from the day's start, a round each
		want   []int64   // Before of the last partition placed in each round
		split  []int     // the rounds that close a partition
	}{
		{name: "empty series-day", rounds: [][]int64{{5, 3}}, want: []int64{math.MinInt64}},
		{name: "rounds in time order", rounds: [][]int64{{5}, {9, 7}, {8}}, want: []int64{math.MinInt64, start + 5, start + 9}},
		{name: "a late row does not lower it", rounds: [][]int64{{50}, {10}, {20}}, want: []int64{math.MinInt64, start + 50, start + 50}},
		{
			name:   "loaded entries count, an empty one does not",
			loaded: []model.PartitionInfo{{Key: model.PartitionKey{Kind: sdA.Kind, Tenant: sdA.Tenant, Series: sdA.Series, Day: sdA.Day, Sub: buckets.SingleID(9)}, Rows: 4, MinTS: start + 1, MaxTS: start + 40}, {Key: model.PartitionKey{Kind: sdA.Kind, Tenant: sdA.Tenant, Series: sdA.Series, Day: sdA.Day, Sub: buckets.SingleID(8)}, MaxTS: start + 90}},
			rounds: [][]int64{{30}, {60}},
			want:   []int64{start + 40, start + 40},
		},
		{
			// testConfig closes a partition at 10 rows: the round's rows
			// go to a split partition, whose Before is the series-day's.
			name:   "split within the round",
			rounds: [][]int64{{1, 2, 3}, {4, 5, 6, 7, 8, 9, 10, 11, 12, 13}, {14}},
			want:   []int64{math.MinInt64, start + 3, start + 13},
			split:  []int{1},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := buckets.New(testConfig())
			s := p.Load(sdA, tt.loaded)
			for i, round := range tt.rounds {
				var pt *buckets.Partition
				for _, ts := range round {
					var err error
					if pt, err = p.Place(s, start+ts, 1, 10); err != nil {
						t.Fatal(err)
					}
				}
				got, whole := pt.Before()
				if got != tt.want[i] {
					t.Errorf("round %d: Before = %d, want %d", i, got, tt.want[i])
				}
				if wantWhole := !slices.Contains(tt.split, i); whole != wantWhole {
					t.Errorf("round %d: whole = %t, want %t", i, whole, wantWhole)
				}
				if pt.Series() != s {
					t.Errorf("round %d: Series is not the series-day's state", i)
				}
				p.TakeEntries(nil)
			}
		})
	}
}
