package render

import (
	"encoding/json"
	"io"
	"slices"
	"strconv"

	"github.com/sluicehq/sluice/internal/model"
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
			row[col[m.Name]] = Float(m.Value)
		}
		if r.HasSeq {
			row[len(row)-1] = strconv.FormatInt(r.Seq, 10)
		}
		t.Rows[i] = row
	}
	return t
}

// readingJSON is a reading as the read API writes it.
type readingJSON struct {
	DeviceID string             `json:"device_id"`
	TS       string             `json:"ts"`
	Seq      *int64             `json:"seq,omitempty"`
	Metrics  map[string]float64 `json:"metrics"`
}

type readingsJSON struct {
	Readings   []readingJSON `json:"readings"`
	NextCursor string        `json:"next_cursor,omitempty"`
}

// ReadingsJSON writes the read API's readings object: {"readings": [...],
// "next_cursor": next}, the cursor left out when next is empty.
func ReadingsJSON(w io.Writer, rs []model.Reading, next string) error {
	out := readingsJSON{Readings: make([]readingJSON, len(rs)), NextCursor: next}
	for i, r := range rs {
		j := readingJSON{DeviceID: r.DeviceID, TS: Time(r.TS), Metrics: make(map[string]float64, len(r.Metrics))}
		if r.HasSeq {
			j.Seq = &r.Seq
		}
		for _, m := range r.Metrics {
			j.Metrics[m.Name] = m.Value
		}
		out.Readings[i] = j
	}
	return writeJSON(w, out)
}

// writeJSON writes v indented by two spaces, followed by a newline.
func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}
