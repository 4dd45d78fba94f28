package wire

import (
	"encoding/json"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/sluicehq/sluice/internal/model"
)

// Every shape survives model → JSON → model unchanged.
func TestRoundTrip(t *testing.T) {
	reading := model.Reading{DeviceID: "pump-17", TS: 1795341600250, Seq: 7, HasSeq: true,
		Metrics: []model.Metric{{Name: "rpm", Value: 1180}, {Name: "temp_c", Value: -21.5}}}
	event := model.AuditEvent{EventID: "01J", Stream: "billing-api", TS: -1, Actor: "user:42", Action: "refund",
		Resource: "invoice:9", Outcome: "success", Attributes: []byte(`{"a":[1,2]}`)}
	part := model.PartitionInfo{Key: model.PartitionKey{Kind: model.KindAudit, Series: "billing-api", Day: 20414, Sub: 1<<24 | 3},
		Rows: 10, Bytes: 999, MinTS: 1763769600000, MaxTS: 1763855999999, State: "split", Closed: true}
	dead := model.DeadLetter{TS: 1, ID: "x", Source: "mqtt", Topic: "t", Reason: "invalid_json", Error: "e", Payload: []byte{0xff, 0}, Truncated: true}

	check := func(name string, in, out any) {
		t.Helper()
		if diff := cmp.Diff(in, out); diff != "" {
			t.Errorf("%s round trip (-in +out):\n%s", name, diff)
		}
	}
	var r Reading
	mustJSON(t, ReadingOf(reading), &r)
	got, err := r.Model()
	if err != nil {
		t.Fatal(err)
	}
	check("reading", reading, got)

	var e Event
	mustJSON(t, EventOf(event), &e)
	gotE, err := e.Model()
	if err != nil {
		t.Fatal(err)
	}
	check("event", event, gotE)

	var p Partition
	mustJSON(t, PartitionOf(part), &p)
	gotP, err := p.Model()
	if err != nil {
		t.Fatal(err)
	}
	check("partition", part, gotP)

	var d DeadLetter
	mustJSON(t, DeadLetterOf(dead), &d)
	if d.PayloadBase64 == "" {
		t.Error("binary payload not sent as base64")
	}
	gotD, err := d.Model()
	if err != nil {
		t.Fatal(err)
	}
	check("dead letter", dead, gotD)
}

func mustJSON(t *testing.T, in, out any) {
	t.Helper()
	b, err := json.Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, out); err != nil {
		t.Fatal(err)
	}
}

func TestModelErrors(t *testing.T) {
	if _, err := (Reading{TS: "yesterday"}).Model(); err == nil {
		t.Error("bad reading ts accepted")
	}
	if _, err := (Partition{Kind: "metrics", Day: "2026-11-22", MinTS: FormatTS(0), MaxTS: FormatTS(0)}).Model(); err == nil {
		t.Error("bad partition kind accepted")
	}
	if _, err := (DeadLetter{TS: FormatTS(0), PayloadBase64: "!!"}).Model(); err == nil {
		t.Error("bad base64 accepted")
	}
}
