package buckets

import (
	"testing"

	"github.com/sluicehq/sluice/internal/model"
)

// With PerWriterSingle, two planners with different writer slots, fed the same catalogue, never
// add rows to one partition: each opens its own single partition, then its
// own splits, and fills only those.
func TestWritersOwnTheirPartitions(t *testing.T) {
	sd := model.SeriesDay{Kind: model.KindReadings, Tenant: "t", Series: "d", Day: 1}
	tests := []struct {
		name   string
		writer int
		loaded []model.PartitionInfo // catalogue at load time
		want   []uint32              // sub-buckets of 5 one-row assigns with MaxRows 2
	}{
		{"lone writer 0", 0, nil, []uint32{0, 0, SubID(0, 1), SubID(0, 1), SubID(0, 2)}},
		{"writer 3 alone", 3, nil, []uint32{SingleID(3), SingleID(3), SubID(3, 1), SubID(3, 1), SubID(3, 2)}},
		{
			"writer 3 beside writer 0's partitions", 3,
			[]model.PartitionInfo{
				{Key: sd.Partition(0), Rows: 1, State: StateSingle},
				{Key: sd.Partition(SubID(0, 1)), Rows: 1, State: StateSplit},
			},
			[]uint32{SingleID(3), SingleID(3), SubID(3, 1), SubID(3, 1), SubID(3, 2)},
		},
		{
			"writer 3 resumes its own open partition", 3,
			[]model.PartitionInfo{
				{Key: sd.Partition(0), Rows: 1, State: StateSingle},
				{Key: sd.Partition(SingleID(3)), Rows: 2, State: StateSingle, Closed: true},
				{Key: sd.Partition(SubID(3, 1)), Rows: 1, State: StateSplit},
			},
			[]uint32{SubID(3, 1), SubID(3, 2), SubID(3, 2), SubID(3, 3), SubID(3, 3)},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := New(Config{MaxRows: 2, MaxBytes: 1 << 20, Writer: tc.writer, MaxSeriesDays: 10, PerWriterSingle: true})
			p.Load(sd, tc.loaded)
			for i, want := range tc.want {
				pk, err := p.Assign(sd, sd.Day.Start()+int64(i), 1, 10)
				if err != nil {
					t.Fatal(err)
				}
				if pk.Sub != want {
					t.Fatalf("assign %d went to sub-bucket %#x, want %#x", i, pk.Sub, want)
				}
				if WriterOf(pk.Sub) != uint8(tc.writer) {
					t.Fatalf("assign %d went to writer %d's partition", i, WriterOf(pk.Sub))
				}
			}
		})
	}
}
