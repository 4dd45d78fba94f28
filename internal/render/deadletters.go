package render

import (
	"encoding/base64"
	"io"
	"strconv"
	"unicode/utf8"

	"github.com/sluicehq/sluice/internal/model"
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

type deadLetterJSON struct {
	TS            string `json:"ts"`
	ID            string `json:"id"`
	Source        string `json:"source"`
	Topic         string `json:"topic,omitempty"`
	Reason        string `json:"reason"`
	Error         string `json:"error"`
	Payload       string `json:"payload,omitempty"`
	PayloadBase64 string `json:"payload_base64,omitempty"`
	Truncated     bool   `json:"truncated,omitempty"`
}

type deadLettersJSON struct {
	DeadLetters []deadLetterJSON `json:"dead_letters"`
	NextCursor  string           `json:"next_cursor,omitempty"`
}

// DeadLettersJSON writes the read API's dead-letter object:
// {"dead_letters": [...], "next_cursor": next}.
func DeadLettersJSON(w io.Writer, dls []model.DeadLetter, next string) error {
	out := deadLettersJSON{DeadLetters: make([]deadLetterJSON, len(dls)), NextCursor: next}
	for i, d := range dls {
		j := deadLetterJSON{TS: Time(d.TS), ID: d.ID, Source: d.Source, Topic: d.Topic, Reason: d.Reason, Error: d.Error, Truncated: d.Truncated}
		if utf8.Valid(d.Payload) {
			j.Payload = string(d.Payload)
		} else {
			j.PayloadBase64 = base64.StdEncoding.EncodeToString(d.Payload)
		}
		out.DeadLetters[i] = j
	}
	return writeJSON(w, out)
}
