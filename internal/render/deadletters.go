package render

import (
	"encoding/base64"
	"io"
	"strconv"
	"unicode/utf8"

	"github.com/sluicehq/sluice/internal/model"
	"github.com/sluicehq/sluice/internal/wire"
)

// DeadLettersTable lays dead letters out with columns ts, id, source,
// topic, reason, error, payload (as text when it is UTF-8, else base64
// prefixed with "base64:") and truncated.
func DeadLettersTable(dls []model.DeadLetter) Table {
	t := Table{Columns: []Column{
		{Name: "ts"}, {Name: "id"}, {Name: "source"}, {Name: "topic"}, {Name: "reason"},
		{Name: "error"}, {Name: "payload"}, {Name: "truncated"},
	}}
	t.Rows = make([][]string, len(dls))
	for i, d := range dls {
		payload := string(d.Payload)
		if !utf8.Valid(d.Payload) {
			payload = "base64:" + base64.StdEncoding.EncodeToString(d.Payload)
		}
		t.Rows[i] = []string{Time(d.TS), d.ID, d.Source, d.Topic, d.Reason, d.Error, payload, strconv.FormatBool(d.Truncated)}
	}
	return t
}

// DeadLettersJSON writes the read API's dead-letter object:
// {"dead_letters": [...], "next_cursor": next}.
func DeadLettersJSON(w io.Writer, dls []model.DeadLetter, next string) error {
	out := wire.DeadLettersPage{DeadLetters: make([]wire.DeadLetter, len(dls)), NextCursor: next}
	for i, d := range dls {
		out.DeadLetters[i] = wire.DeadLetterOf(d)
	}
	return writeJSON(w, out)
}
