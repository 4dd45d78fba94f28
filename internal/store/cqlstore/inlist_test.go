package cqlstore

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
)

// inListOps asks each partition for its distinct keys, at most inListMax
// per request, and maps every key back to all the items that share it.
func TestInListOps(t *testing.T) {
	tests := []struct {
		name     string
		parts    int // items go to partition i % parts
		items    int
		distinct int // item i has key i % distinct
		wantOps  int
	}{
		{"nothing", 1, 0, 1, 0},
		{"one partition, one request", 1, 100, 1000, 1},
		{"one partition, two requests", 1, 101, 1000, 2},
		{"repeated keys", 1, 300, 7, 3},
		{"three partitions", 3, 250, 1000, 3},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var mu sync.Mutex
			got := map[int][]int{} // item -> partitions that answered it
			ops := inListOps(tc.items,
				func(i int) int { return i % tc.parts },
				func(i int) string { return fmt.Sprint("k", i%tc.distinct) },
				func(_ context.Context, p int, list []string, want map[string][]int) error {
					if len(list) > inListMax || len(list) != len(want) {
						t.Errorf("partition %d: %d keys in the list, %d wanted, at most %d", p, len(list), len(want), inListMax)
					}
					mu.Lock()
					defer mu.Unlock()
					for _, k := range list {
						for _, i := range want[k] {
							if fmt.Sprint("k", i%tc.distinct) != k || i%tc.parts != p {
								t.Errorf("item %d answered by key %s of partition %d", i, k, p)
							}
							got[i] = append(got[i], p)
						}
					}
					return nil
				})
			if len(ops) != tc.wantOps {
				t.Errorf("%d requests, want %d", len(ops), tc.wantOps)
			}
			for _, op := range ops {
				if err := op(context.Background()); err != nil {
					t.Fatal(err)
				}
			}
			for i := range tc.items {
				if !slices.Equal(got[i], []int{i % tc.parts}) {
					t.Errorf("item %d answered by partitions %v, want once by %d", i, got[i], i%tc.parts)
				}
			}
		})
	}
}
