package render

import (
	"encoding/json"
	"io"
	"slices"
	"strconv"

	"github.com/sluicehq/sluice/internal/model"
	"github.com/sluicehq/sluice/internal/wire"
)

// ReadingsTable lays readings out with columns ts, one column per metric name
// seen in rs (sorted by name), and seq. A reading without a metric, or
// without a sequence number, leaves that cell empty.
func ReadingsTable(rs []model.Reading) Table {
	var names []string
	seen := make(map[string]bool)
	for _, r := range rs {
		for _, m := range r.Metrics {
			if !seen[m.Name] {
				seen[m.Name] = true
				names = append(names, m.Name)
			}
		}
	}
	slices.Sort(names)
	col := make(map[string]int, len(names))
	t := Table{Columns: make([]Column, 0, len(names)+2)}
	t.Columns = append(t.Columns, Column{Name: "ts"})
	for i, n := range names {
		col[n] = i + 1
		// Metric names are shown as they are, not upper-cased.
		t.Columns = append(t.Columns, Column{Name: n, Title: n, Right: true})
	}
	t.Columns = append(t.Columns, Column{Name: "seq", Right: true})

	t.Rows = make([][]string, len(rs))
	for i, r := range rs {
		row := make([]string, len(t.Columns))
		row[0] = Time(r.TS)
		for _, m := range r.Metrics {
			row[col[m.Name]] = Value(m)
		}
		if r.HasSeq {
			row[len(row)-1] = strconv.FormatInt(r.Seq, 10)
		}
		t.Rows[i] = row
	}
	return t
}

// ReadingsJSON writes the read API's readings object: {"readings": [...],
// "next_cursor": next}, the cursor left out when next is empty.
func ReadingsJSON(w io.Writer, rs []model.Reading, next string) error {
	out := wire.ReadingsPage{Readings: make([]wire.Reading, len(rs)), NextCursor: next}
	for i, r := range rs {
		out.Readings[i] = wire.ReadingOf(r)
	}
	return writeJSON(w, out)
}

// writeJSON writes v indented by two spaces, followed by a newline.
func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}
