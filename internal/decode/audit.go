package decode

import (
	"fmt"

	"github.com/sluicehq/sluice/internal/model"
)

// audit decodes the object at d.pos into e.
func (d *decoder) audit(e *model.AuditEvent) error {
	var seen uint16
	empty, err := d.open()
	if err != nil {
		return err
	}
	for !empty {
		d.field = ""
		k, err := d.str()
		if err != nil {
			return err
		}
		switch string(k) {
		case "event_id":
			if e.EventID, err = d.idField(&seen, seenEventID, "event_id", false); err != nil {
				return err
			}
		case "stream":
			if e.Stream, err = d.idField(&seen, seenStream, "stream", true); err != nil {
				return err
			}
		case "ts":
			if err := d.member(&seen, seenTS, "ts"); err != nil {
				return err
			}
			if err := d.colon(); err != nil {
				return err
			}
			if e.TS, err = d.ts(); err != nil {
				return err
			}
		case "actor":
			if e.Actor, err = d.textField(&seen, seenActor, "actor", false); err != nil {
				return err
			}
		case "action":
			if e.Action, err = d.textField(&seen, seenAction, "action", true); err != nil {
				return err
			}
		case "resource":
			if e.Resource, err = d.textField(&seen, seenResource, "resource", false); err != nil {
				return err
			}
		case "outcome":
			if e.Outcome, err = d.textField(&seen, seenOutcome, "outcome", true); err != nil {
				return err
			}
		case "attributes":
			if err := d.member(&seen, seenAttributes, "attributes"); err != nil {
				return err
			}
			if err := d.colon(); err != nil {
				return err
			}
			if e.Attributes, err = d.attributes(); err != nil {
				return err
			}
		default:
			return d.unknownField(k)
		}
		d.field = ""
		if empty, err = d.next(); err != nil {
			return err
		}
	}
	d.field = ""
	switch {
	case seen&seenEventID == 0:
		return d.fail("event_id", "is required")
	case seen&seenStream == 0:
		return d.fail("stream", "is required")
	case seen&seenTS == 0:
		return d.fail("ts", "is required")
	case e.Action == "":
		return d.fail("action", "is required")
	}
	return nil
}

// idField reads a required id. Ids of low cardinality (streams) are interned.
func (d *decoder) idField(seen *uint16, bit uint16, field string, intern bool) (string, error) {
	if err := d.member(seen, bit, field); err != nil {
		return "", err
	}
	if err := d.colon(); err != nil {
		return "", err
	}
	if d.peek() != '"' {
		return "", d.wrongType(field, "must be a string")
	}
	if intern {
		if s, ok := d.internID(); ok {
			return s, nil
		}
	}
	b, reason, err := d.id()
	if err != nil {
		return "", err
	}
	if reason != "" {
		return "", d.fail(field, reason)
	}
	if intern {
		return d.ids.get(b), nil
	}
	return string(b), nil
}

// textField reads an optional text; null means absent (""). Texts of low
// cardinality (action, outcome) are interned.
func (d *decoder) textField(seen *uint16, bit uint16, field string, intern bool) (string, error) {
	if err := d.member(seen, bit, field); err != nil {
		return "", err
	}
	if err := d.colon(); err != nil {
		return "", err
	}
	switch d.peek() {
	case 'n':
		return "", d.literal("null")
	case '"':
	default:
		return "", d.wrongType(field, "must be a string")
	}
	b, err := d.str()
	if err != nil {
		return "", err
	}
	if reason := checkText(b, d.lim.MaxTextLength); reason != "" {
		return "", d.fail(field, reason)
	}
	if intern {
		return d.text.get(b), nil
	}
	return string(b), nil
}

// attributes reads the optional attributes object at d.pos and returns it
// compacted, in memory of its own; null means absent (nil). The raw object
// may be at most lim.MaxAttributesBytes long: scanning stops there.
func (d *decoder) attributes() ([]byte, error) {
	switch d.peek() {
	case 'n':
		return nil, d.literal("null")
	case '{':
	default:
		return nil, d.wrongType("attributes", "must be a JSON object")
	}
	// Scan within a window cut at the size limit; running into the cut
	// means the object is too large.
	start, end := d.pos, d.end
	limit := start + d.lim.MaxAttributesBytes
	if limit < end {
		d.end = limit
	}
	out, err := d.compact(make([]byte, 0, min(d.end-start, 512)), 1)
	cut := d.end < end && d.pos >= d.end
	d.end = end
	if cut && err != nil {
		return nil, d.fail("attributes", fmt.Sprintf("is longer than %d bytes", d.lim.MaxAttributesBytes))
	}
	if err != nil {
		return nil, err
	}
	return out, nil
}
