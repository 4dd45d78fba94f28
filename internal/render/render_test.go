package render

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/sluicehq/sluice/internal/model"
)

var update = flag.Bool("update", false, "rewrite golden files in testdata")

// ms returns s (RFC 3339) in milliseconds since the epoch.
func ms(t *testing.T, s string) int64 {
	t.Helper()
	v, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		t.Fatal(err)
	}
	return v.UnixMilli()
}

func testReadings(t *testing.T) []model.Reading {
	return []model.Reading{
		{DeviceID: "pump-17", TS: ms(t, "2026-11-22T10:00:00.25Z"), Seq: 42, HasSeq: true,
			Metrics: []model.Metric{{Name: "rpm", Value: 1180}, {Name: "temp_c", Value: 21.5}}},
		// No seq, no temp_c, a metric no other reading has.
		{DeviceID: "pump-17", TS: ms(t, "2026-11-22T10:00:01Z"),
			Metrics: []model.Metric{{Name: "pressure_bar", Value: 0.000001234}, {Name: "rpm", Value: -3}}},
		{DeviceID: "pump-17", TS: ms(t, "2026-11-22T10:00:02.999Z"), Seq: 44, HasSeq: true,
			Metrics: []model.Metric{{Name: "temp_c", Value: 1e22}}},
	}
}

func testEvents(t *testing.T) []model.AuditEvent {
	return []model.AuditEvent{
		{EventID: "evt-1", Stream: "billing-api", TS: ms(t, "2026-11-22T10:00:00Z"), Actor: "user:42",
			Action: "invoice.refund", Resource: "invoice:981", Outcome: "success",
			Attributes: []byte("{\n  \"amount\": 12.5,\n  \"currency\": \"EUR\"\n}")},
		// Optional fields empty, and a newline that must not break the table.
		{EventID: "evt-2", Stream: "billing-api", TS: ms(t, "2026-11-22T10:00:00.001Z"),
			Action: "login\nfailed"},
	}
}

func testPartitions(t *testing.T) []model.PartitionInfo {
	key := func(sub uint32) model.PartitionKey {
		day, err := model.ParseDay("2026-11-22")
		if err != nil {
			t.Fatal(err)
		}
		return model.PartitionKey{Kind: model.KindReadings, Series: "pump-17", Day: day, Sub: sub}
	}
	return []model.PartitionInfo{
		{Key: key(0), State: "single", Closed: true, Rows: 200000, Bytes: 1288490,
			MinTS: ms(t, "2026-11-22T00:00:00Z"), MaxTS: ms(t, "2026-11-22T09:59:59.999Z")},
		{Key: key(1), State: "split", Rows: 123, Bytes: 4567,
			MinTS: ms(t, "2026-11-22T10:00:00Z"), MaxTS: ms(t, "2026-11-22T10:05:00.5Z")},
	}
}

// TestGolden renders each case in each format and compares it with
// testdata/<case>.golden. Run with -update to rewrite the files.
func TestGolden(t *testing.T) {
	for _, tc := range []struct {
		name   string
		render func(t *testing.T, b *bytes.Buffer) error
	}{
		{"readings.txt", func(t *testing.T, b *bytes.Buffer) error { return ReadingsTable(testReadings(t)).WriteText(b) }},
		{"readings.csv", func(t *testing.T, b *bytes.Buffer) error { return ReadingsTable(testReadings(t)).WriteCSV(b) }},
		{"readings.json", func(t *testing.T, b *bytes.Buffer) error { return ReadingsJSON(b, testReadings(t), "c2") }},
		{"readings_empty.txt", func(t *testing.T, b *bytes.Buffer) error { return ReadingsTable(nil).WriteText(b) }},
		{"readings_empty.json", func(t *testing.T, b *bytes.Buffer) error { return ReadingsJSON(b, nil, "") }},
		{"audit.txt", func(t *testing.T, b *bytes.Buffer) error { return AuditTable(testEvents(t)).WriteText(b) }},
		{"audit.csv", func(t *testing.T, b *bytes.Buffer) error { return AuditTable(testEvents(t)).WriteCSV(b) }},
		{"audit.json", func(t *testing.T, b *bytes.Buffer) error { return AuditJSON(b, testEvents(t), "") }},
		{"partitions.txt", func(t *testing.T, b *bytes.Buffer) error {
			ps := testPartitions(t)
			if err := PartitionsTable(ps).WriteText(b); err != nil {
				return err
			}
			return PartitionsTotal(b, ps)
		}},
		{"partitions.csv", func(t *testing.T, b *bytes.Buffer) error { return PartitionsTable(testPartitions(t)).WriteCSV(b) }},
		{"partitions.json", func(t *testing.T, b *bytes.Buffer) error { return PartitionsJSON(b, testPartitions(t), false) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var b bytes.Buffer
			if err := tc.render(t, &b); err != nil {
				t.Fatal(err)
			}
			path := filepath.Join("testdata", tc.name+".golden")
			if *update {
				if err := os.WriteFile(path, b.Bytes(), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("%v (run with -update to create it)", err)
			}
			if diff := cmp.Diff(string(want), b.String()); diff != "" {
				t.Errorf("%s mismatch (-want +got):\n%s", path, diff)
			}
		})
	}
}

func TestTextAlignment(t *testing.T) {
	for _, tc := range []struct {
		name  string
		table Table
		want  string
	}{
		{
			name: "left, right, last column unpadded",
			table: Table{
				Columns: []Column{{Name: "name"}, {Name: "n", Right: true}, {Name: "note"}},
				Rows:    [][]string{{"a", "1", "x"}, {"long name", "12345", ""}},
			},
			want: "NAME           N  NOTE\n" +
				"a              1  x\n" +
				"long name  12345\n",
		},
		{
			name:  "runes, not bytes",
			table: Table{Columns: []Column{{Name: "k", Title: "K"}, {Name: "v"}}, Rows: [][]string{{"äöü", "1"}, {"ab", "2"}}},
			want:  "K    V\näöü  1\nab   2\n",
		},
		{
			name:  "header only",
			table: Table{Columns: []Column{{Name: "ts"}, {Name: "seq", Right: true}}},
			want:  "TS  SEQ\n",
		},
		{
			name:  "control characters escaped",
			table: Table{Columns: []Column{{Name: "a"}, {Name: "b"}}, Rows: [][]string{{"x\ty", "1\r\n2"}}},
			want:  "A     B\nx\\ty  1\\r\\n2\n",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var b bytes.Buffer
			if err := tc.table.WriteText(&b); err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, b.String()); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

func TestCSVQuotingAndTextOnly(t *testing.T) {
	table := Table{
		Columns: []Column{{Name: "a"}, {Name: "human", TextOnly: true}, {Name: "b"}},
		Rows:    [][]string{{"x,y", "1 KiB", "say \"hi\"\nbye"}},
	}
	var b bytes.Buffer
	if err := table.WriteCSV(&b); err != nil {
		t.Fatal(err)
	}
	want := "a,b\n\"x,y\",\"say \"\"hi\"\"\nbye\"\n"
	if diff := cmp.Diff(want, b.String()); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}

func TestFloat(t *testing.T) {
	for _, tc := range []struct {
		in   float64
		want string
	}{
		{0, "0"},
		{1180, "1180"},
		{21.5, "21.5"},
		{-3, "-3"},
		{0.1, "0.1"},
		{1e-6, "0.000001"},
		{1.234e-7, "1.234e-07"},
		{1e20, "100000000000000000000"},
		{1e21, "1e+21"},
	} {
		if got := Float(tc.in); got != tc.want {
			t.Errorf("Float(%v) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

func TestBytes(t *testing.T) {
	for _, tc := range []struct {
		in   int64
		want string
	}{
		{0, "0 B"},
		{1023, "1023 B"},
		{1024, "1.0 KiB"},
		{4567, "4.5 KiB"},
		{1288490, "1.2 MiB"},
		{5 << 30, "5.0 GiB"},
		{1 << 62, "4.0 EiB"},
	} {
		if got := Bytes(tc.in); got != tc.want {
			t.Errorf("Bytes(%d) = %q, want %q", tc.in, got, tc.want)
		}
	}
}
