package render

import (
	"fmt"
	"io"
	"strconv"

	"github.com/sluicehq/sluice/internal/model"
	"github.com/sluicehq/sluice/internal/wire"
)

// PartitionsTable lays catalogue entries out with columns sub_bucket, state,
// closed, rows, bytes, size (bytes for people; text only), min_ts and max_ts.
// Kind, series and day are left out: every query names exactly one of each.
func PartitionsTable(ps []model.PartitionInfo) Table {
	t := Table{Columns: []Column{
		{Name: "sub_bucket", Right: true}, {Name: "state"}, {Name: "closed"},
		{Name: "rows", Right: true}, {Name: "bytes", Right: true}, {Name: "size", Right: true, TextOnly: true},
		{Name: "min_ts"}, {Name: "max_ts"},
	}}
	t.Rows = make([][]string, len(ps))
	for i, p := range ps {
		t.Rows[i] = []string{
			strconv.FormatUint(uint64(p.Key.Sub), 10), p.State, strconv.FormatBool(p.Closed),
			strconv.FormatInt(p.Rows, 10), strconv.FormatInt(p.Bytes, 10), Bytes(p.Bytes),
			Time(p.MinTS), Time(p.MaxTS),
		}
	}
	return t
}

// PartitionsTotal writes one line summing ps, for under a partitions table:
// "total: 2 partitions, 1 open, 123 rows, 4567 bytes (4.5 KiB)".
func PartitionsTotal(w io.Writer, ps []model.PartitionInfo) error {
	var rows, bytes int64
	open := 0
	for _, p := range ps {
		rows += p.Rows
		bytes += p.Bytes
		if !p.Closed {
			open++
		}
	}
	noun := "partitions"
	if len(ps) == 1 {
		noun = "partition"
	}
	_, err := fmt.Fprintf(w, "total: %d %s, %d open, %d rows, %d bytes (%s)\n", len(ps), noun, open, rows, bytes, Bytes(bytes))
	return err
}

// PartitionsJSON writes the read API's partitions object: {"partitions":
// [...]}, with "unsettled": true when the gateway said so.
func PartitionsJSON(w io.Writer, ps []model.PartitionInfo, unsettled bool) error {
	out := wire.PartitionsPage{Partitions: make([]wire.Partition, len(ps)), Unsettled: unsettled}
	for i, p := range ps {
		out.Partitions[i] = wire.PartitionOf(p)
	}
	return writeJSON(w, out)
}

// TopPartitionsTable lays a ranking out: series, sub_bucket, state,
// closed, rows, bytes, size (text only), min_ts, max_ts, and with rates
// (one per partition) rows_per_second.
func TopPartitionsTable(ps []model.PartitionInfo, rates []float64) Table {
	t := Table{Columns: []Column{
		{Name: "series"}, {Name: "sub_bucket", Right: true}, {Name: "state"}, {Name: "closed"},
		{Name: "rows", Right: true}, {Name: "bytes", Right: true}, {Name: "size", Right: true, TextOnly: true},
		{Name: "min_ts"}, {Name: "max_ts"},
	}}
	if rates != nil {
		t.Columns = append(t.Columns, Column{Name: "rows_per_second", Right: true})
	}
	t.Rows = make([][]string, len(ps))
	for i, p := range ps {
		t.Rows[i] = []string{
			p.Key.Series, strconv.FormatUint(uint64(p.Key.Sub), 10), p.State, strconv.FormatBool(p.Closed),
			strconv.FormatInt(p.Rows, 10), strconv.FormatInt(p.Bytes, 10), Bytes(p.Bytes),
			Time(p.MinTS), Time(p.MaxTS),
		}
		if rates != nil {
			t.Rows[i] = append(t.Rows[i], strconv.FormatFloat(rates[i], 'f', 2, 64))
		}
	}
	return t
}

// TopPartitionsJSON writes the read API's ranking object (see
// wire.TopPartitionsPage); rates may be nil.
func TopPartitionsJSON(w io.Writer, kind model.Kind, day model.Day, by string, ps []model.PartitionInfo, rates []float64, unsettled bool) error {
	out := wire.TopPartitionsPage{Kind: kind.String(), Day: day.String(), By: by, Partitions: make([]wire.RankedPartition, len(ps)), Unsettled: unsettled}
	for i, p := range ps {
		out.Partitions[i].Partition = wire.PartitionOf(p)
		if rates != nil {
			out.Partitions[i].RowsPerSecond = rates[i]
		}
	}
	return writeJSON(w, out)
}
