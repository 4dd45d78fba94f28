// Package render turns read-API results into text tables, CSV and JSON for
// the query CLI.
//
// It is pure: it writes only to the io.Writer it is given, never reads the
// clock or the environment, and never decides where a line goes (stdout or
// stderr). That policy belongs to the caller.
//
// Timestamps are written as RFC 3339, UTC, with milliseconds, exactly as the
// read API writes them. The JSON writers reproduce the read API's response
// objects, so `query … --format json` output can be fed to anything that
// reads the API.
package render

import (
	"encoding/csv"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/sluicehq/sluice/internal/model"
)

// TimeFormat is how timestamps are written: RFC 3339, UTC, milliseconds.
const TimeFormat = "2006-01-02T15:04:05.000Z07:00"

// Time formats a timestamp in milliseconds since the Unix epoch.
func Time(ms int64) string { return time.UnixMilli(ms).UTC().Format(TimeFormat) }

// Column describes one column of a Table.
type Column struct {
	// Name heads the column in CSV: a machine-friendly name such as "ts".
	Name string
	// Title heads the column in a text table; empty means Name in upper case.
	Title string
	// Right aligns the column's cells to the right in a text table (numbers).
	Right bool
	// TextOnly keeps the column out of CSV (e.g. a human-readable size next
	// to the exact byte count).
	TextOnly bool
}

func (c Column) title() string {
	if c.Title != "" {
		return c.Title
	}
	return strings.ToUpper(c.Name)
}

// Table is rows of cells under columns. Every row has one cell per column.
type Table struct {
	Columns []Column
	Rows    [][]string
}

// WriteText writes t as an aligned text table: a header line, then one line
// per row, columns separated by two spaces, no trailing blanks. Control
// characters in cells are escaped so that one row is always one line.
func (t Table) WriteText(w io.Writer) error {
	header := make([]string, len(t.Columns))
	for i, c := range t.Columns {
		header[i] = c.title()
	}
	rows := make([][]string, 0, len(t.Rows)+1)
	rows = append(rows, header)
	for _, r := range t.Rows {
		cells := make([]string, len(r))
		for i, c := range r {
			cells[i] = escape(c)
		}
		rows = append(rows, cells)
	}
	width := make([]int, len(t.Columns))
	for _, r := range rows {
		for i, c := range r {
			width[i] = max(width[i], utf8.RuneCountInString(c))
		}
	}
	var b strings.Builder
	for _, r := range rows {
		b.Reset()
		for i, c := range r {
			pad := width[i] - utf8.RuneCountInString(c)
			last := i == len(r)-1
			switch {
			case t.Columns[i].Right:
				b.WriteString(strings.Repeat(" ", pad))
				b.WriteString(c)
			case last:
				b.WriteString(c)
			default:
				b.WriteString(c)
				b.WriteString(strings.Repeat(" ", pad))
			}
			if !last {
				b.WriteString("  ")
			}
		}
		line := strings.TrimRight(b.String(), " ") + "\n"
		if _, err := io.WriteString(w, line); err != nil {
			return err
		}
	}
	return nil
}

// WriteCSV writes t as RFC 4180 CSV: a header of column names, then the rows.
// Columns marked TextOnly are left out.
func (t Table) WriteCSV(w io.Writer) error {
	keep := make([]int, 0, len(t.Columns))
	header := make([]string, 0, len(t.Columns))
	for i, c := range t.Columns {
		if !c.TextOnly {
			keep = append(keep, i)
			header = append(header, c.Name)
		}
	}
	cw := csv.NewWriter(w)
	if err := cw.Write(header); err != nil {
		return err
	}
	rec := make([]string, len(keep))
	for _, r := range t.Rows {
		for j, i := range keep {
			rec[j] = r[i]
		}
		if err := cw.Write(rec); err != nil {
			return err
		}
	}
	cw.Flush()
	return cw.Error()
}

// escape makes s safe for one line of a text table.
func escape(s string) string {
	if strings.IndexFunc(s, unicode.IsControl) < 0 {
		return s
	}
	q := strconv.Quote(s)
	return q[1 : len(q)-1]
}

// Float formats a metric value the way encoding/json does: the shortest
// representation that round-trips, with an exponent only for very large or
// very small magnitudes.
func Float(v float64) string {
	abs := v
	if abs < 0 {
		abs = -abs
	}
	if abs != 0 && (abs < 1e-6 || abs >= 1e21) {
		return strconv.FormatFloat(v, 'g', -1, 64)
	}
	return strconv.FormatFloat(v, 'f', -1, 64)
}

// Bytes formats a byte count for people, in powers of 1024: "512 B",
// "4.5 KiB", "1.2 MiB".
func Bytes(n int64) string {
	const unit = 1024
	if n < unit && n > -unit {
		return fmt.Sprintf("%d B", n)
	}
	v := float64(n)
	suffixes := []string{"KiB", "MiB", "GiB", "TiB", "PiB", "EiB"}
	i := -1
	for (v >= unit || v <= -unit) && i < len(suffixes)-1 {
		v /= unit
		i++
	}
	return fmt.Sprintf("%.1f %s", v, suffixes[i])
}

// Value formats a typed metric value for a table: a float as Float does,
// an int in decimal, a bool as true or false, and a string quoted, so that
// the string "21.5" does not pass for a number.
func Value(m model.Metric) string {
	switch m.Type {
	case model.TypeInt:
		return strconv.FormatInt(m.Int, 10)
	case model.TypeBool:
		return strconv.FormatBool(m.Bool())
	case model.TypeString:
		return strconv.Quote(m.Str)
	default:
		return Float(m.Value)
	}
}
