package render

import (
	"fmt"
	"io"
	"math"
	"strings"
	"unicode/utf8"
)

// eighths are the block characters for 1/8 .. 8/8 of a cell's height.
var eighths = []rune{'▁', '▂', '▃', '▄', '▅', '▆', '▇', '█'}

// Chart draws values as vertical bars with unicode blocks: height rows,
// at most width columns (values are averaged in groups when there are more),
// the value scale on the left and the first and last label under the bars.
// NaN values leave their column empty. It needs no terminal support beyond
// UTF-8.
func Chart(w io.Writer, title string, labels []string, values []float64, width, height int) error {
	if len(values) == 0 {
		_, err := fmt.Fprintf(w, "%s\n(no data)\n", title)
		return err
	}
	width, height = max(width, 1), max(height, 1)
	cols, first, last := resample(values, labels, width)
	lo, hi := math.Inf(1), math.Inf(-1)
	for _, v := range cols {
		if !math.IsNaN(v) {
			lo, hi = min(lo, v), max(hi, v)
		}
	}
	if math.IsInf(lo, 1) { // every value is NaN
		lo, hi = 0, 0
	}
	// The scale spans the values shown, lowest to highest, so that a small
	// change of a large value is still visible.
	base := lo
	span := hi - base
	top, bottom := formatAxis(hi), formatAxis(base)
	axis := max(utf8.RuneCountInString(top), utf8.RuneCountInString(bottom))
	var b strings.Builder
	b.WriteString(title + "\n")
	for row := height - 1; row >= 0; row-- {
		label := ""
		switch row {
		case height - 1:
			label = top
		case 0:
			label = bottom
		}
		b.WriteString(strings.Repeat(" ", axis-utf8.RuneCountInString(label)) + label + " ┤")
		for _, v := range cols {
			b.WriteRune(cell(v, base, span, row, height))
		}
		b.WriteString("\n")
	}
	pad := strings.Repeat(" ", axis+2)
	b.WriteString(pad + "└" + strings.Repeat("─", max(len(cols)-1, 0)) + "\n")
	foot := first
	if last != first && len(cols) > 1 {
		gap := max(len(cols)-utf8.RuneCountInString(first)-utf8.RuneCountInString(last), 2)
		foot = first + strings.Repeat(" ", gap) + last
	}
	b.WriteString(pad + foot + "\n")
	_, err := io.WriteString(w, b.String())
	return err
}

// cell returns the character of one bar at one row (row 0 is the bottom).
func cell(v, base, span float64, row, height int) rune {
	if math.IsNaN(v) {
		return ' '
	}
	level := height * 8 // a flat series draws full bars
	if span > 0 {
		level = int(math.Round((v - base) / span * float64(height*8)))
	}
	level = max(level, 1) // the lowest value still shows
	switch {
	case level >= (row+1)*8:
		return '█'
	case level > row*8:
		return eighths[level-row*8-1]
	}
	return ' '
}

// resample averages values in groups so that at most width remain, and
// returns the labels of the first and last value.
func resample(values []float64, labels []string, width int) ([]float64, string, string) {
	label := func(i int) string {
		if i < len(labels) {
			return labels[i]
		}
		return ""
	}
	if len(values) <= width {
		return values, label(0), label(len(values) - 1)
	}
	out := make([]float64, width)
	for c := range width {
		lo, hi := c*len(values)/width, (c+1)*len(values)/width
		sum, n := 0.0, 0
		for _, v := range values[lo:hi] {
			if !math.IsNaN(v) {
				sum += v
				n++
			}
		}
		out[c] = math.NaN()
		if n > 0 {
			out[c] = sum / float64(n)
		}
	}
	return out, label(0), label(len(values) - 1)
}

func formatAxis(v float64) string {
	return fmt.Sprintf("%.4g", v)
}
