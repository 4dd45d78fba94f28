package main

import (
	"fmt"
	"io"
	"iter"

	"github.com/sluicehq/sluice/internal/render"
)

// result is what a paged command prints: rows in two shapes, and the cursor
// of the next page if more remain.
type result struct {
	table func() render.Table
	json  func(w io.Writer, next string) error
	next  string
}

// print writes res in format f. The next-page hint goes where it keeps the
// output usable: after a text table on stdout, on stderr for CSV (stdout
// stays valid CSV), inside the object for JSON.
func (e *env) print(f format, res result) error {
	var err error
	switch f {
	case formatTable:
		err = res.table().WriteText(e.out)
		if err == nil && res.next != "" {
			_, err = fmt.Fprintf(e.out, "next page: --cursor %s\n", shellWord(res.next))
		}
	case formatCSV:
		err = res.table().WriteCSV(e.out)
		if err == nil && res.next != "" {
			// Flush first so that on a terminal the hint follows the rows.
			if err = e.out.Flush(); err == nil {
				_, err = fmt.Fprintf(e.stderr, "next page: --cursor %s\n", shellWord(res.next))
			}
		}
	case formatJSON:
		err = res.json(e.out, res.next)
	}
	if err != nil {
		return fmt.Errorf("write output: %w", err)
	}
	return nil
}

// collect gathers the rows of every page of seq, starting at cursor start,
// until the pages end or at least maxRows rows are in. It returns the rows
// and, if it stopped early or failed, the cursor to continue from.
func collect[P, R any](seq iter.Seq2[P, error], start string, rows func(P) ([]R, string), maxRows int) ([]R, string, error) {
	var out []R
	resume := start
	for p, err := range seq {
		if err != nil {
			return out, resume, err
		}
		rs, next := rows(p)
		out = append(out, rs...)
		resume = next
		if next != "" && len(out) >= maxRows {
			return out, next, nil
		}
	}
	return out, "", nil
}

// fetchAll runs collect and tells the user on stderr when it stopped at
// --max-rows or failed part way.
func fetchAll[P, R any](e *env, seq iter.Seq2[P, error], start string, rows func(P) ([]R, string), maxRows int) ([]R, string, error) {
	out, next, err := collect(seq, start, rows, maxRows)
	switch {
	case err != nil && len(out) > 0:
		fmt.Fprintf(e.stderr, "query: --all: failed after %d rows; resume with --cursor %s\n", len(out), shellWord(next))
	case err == nil && next != "":
		fmt.Fprintf(e.stderr, "query: --all: stopped after %d rows (--max-rows %d); more remain\n", len(out), maxRows)
	}
	return out, next, err
}

// fetch returns the rows of one page (one) or, with --all, of every page
// from q's cursor on (pages), with the cursor that continues after them.
func fetch[P, R any](e *env, rf *rangeFlags, cursor string, one func() (P, error), pages iter.Seq2[P, error], rows func(P) ([]R, string)) ([]R, string, error) {
	if rf.all {
		return fetchAll(e, pages, cursor, rows, rf.maxRows)
	}
	page, err := one()
	if err != nil {
		return nil, "", err
	}
	rs, next := rows(page)
	return rs, next, nil
}
