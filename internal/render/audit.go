package render

import (
	"bytes"
	"encoding/json"
	"io"

	"github.com/sluicehq/sluice/internal/model"
	"github.com/sluicehq/sluice/internal/wire"
)

// AuditTable lays events out with columns ts, event_id, actor, action,
// resource, outcome and attributes (compact JSON). The stream is left out:
// every query names exactly one.
func AuditTable(es []model.AuditEvent) Table {
	t := Table{Columns: []Column{
		{Name: "ts"}, {Name: "event_id"}, {Name: "actor"}, {Name: "action"},
		{Name: "resource"}, {Name: "outcome"}, {Name: "attributes"},
	}}
	t.Rows = make([][]string, len(es))
	for i, e := range es {
		t.Rows[i] = []string{Time(e.TS), e.EventID, e.Actor, e.Action, e.Resource, e.Outcome, compactJSON(e.Attributes)}
	}
	return t
}

// compactJSON returns raw without insignificant blanks, or as it is if it is
// not valid JSON.
func compactJSON(raw []byte) string {
	if len(raw) == 0 {
		return ""
	}
	var b bytes.Buffer
	if err := json.Compact(&b, raw); err != nil {
		return string(raw)
	}
	return b.String()
}

// AuditJSON writes the read API's audit object: {"events": [...],
// "next_cursor": next}, the cursor left out when next is empty.
func AuditJSON(w io.Writer, es []model.AuditEvent, next string) error {
	out := wire.EventsPage{Events: make([]wire.Event, len(es)), NextCursor: next}
	for i, e := range es {
		out.Events[i] = wire.EventOf(e)
	}
	return writeJSON(w, out)
}
