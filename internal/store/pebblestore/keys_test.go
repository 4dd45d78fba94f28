package pebblestore

import (
	"bytes"
	"context"
	"encoding/hex"
	"errors"
	"log/slog"
	"slices"
	"testing"

	"github.com/cockroachdb/pebble/v2"

	"github.com/sluicehq/sluice/internal/model"
	"github.com/sluicehq/sluice/internal/store"
)

// AppendReading gives exactly the keys and values Commit writes: the
// benchmarks' limits rely on it to write the gateway's rows.
func TestAppendReadingMatchesCommit(t *testing.T) {
	s, err := Open(t.TempDir(), Options{}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	pk := model.SeriesDay{Kind: model.KindReadings, Tenant: "acme", Series: "pump-7", Day: 20_000}.Partition(3)
	t0 := model.Day(20_000).Start()
	readings := [][]model.ReadingRow{
		{{TS: t0 + 5, Metric: "rpm", Value: 1180, Seq: 9, HasSeq: true}, {TS: t0 + 5, Metric: "state", Type: model.TypeString, Str: "idle", Seq: 9, HasSeq: true}},
		{{TS: t0 + 6, Metric: "temp_c", Value: -2.5}},
	}
	var rows []model.ReadingRow
	for _, r := range readings {
		rows = append(rows, r...)
	}
	if err := s.Commit(context.Background(), &store.Batch{Partitions: []store.PartitionWrite{{Key: pk, Readings: rows}}}); err != nil {
		t.Fatal(err)
	}
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: []byte{tabReadings}, UpperBound: []byte{tabReadings + 1}})
	if err != nil {
		t.Fatal(err)
	}
	defer it.Close()
	i := 0
	for ok := it.First(); ok; ok = it.Next() {
		if i >= len(readings) {
			t.Fatalf("Commit wrote more than %d reading keys", len(readings))
		}
		key, val := AppendReading(nil, nil, pk, readings[i])
		if !bytes.Equal(it.Key(), key) || !bytes.Equal(it.Value(), val) {
			t.Errorf("reading %d: Commit wrote %x = %x, AppendReading gives %x = %x", i, it.Key(), it.Value(), key, val)
		}
		// And DecodeReading reads it back.
		series, back, err := DecodeReading(it.Key(), it.Value(), nil)
		if err != nil || string(series) != pk.Series || !slices.Equal(back, readings[i]) {
			t.Errorf("reading %d: DecodeReading gives %q, %+v, %v; want %q, %+v", i, series, back, err, pk.Series, readings[i])
		}
		i++
	}
	if i != len(readings) {
		t.Errorf("Commit wrote %d reading keys, want %d", i, len(readings))
	}
}

// TestReadingValueFormat pins the bytes of a reading value: a store written
// before typed values (flags 0 or 1, float bits, seq) must keep reading
// back as floats, and a value that is cut or has unknown flags is corrupt.
func TestReadingValueFormat(t *testing.T) {
	cases := []struct {
		name  string
		bytes string // hex
		row   model.ReadingRow
	}{
		{"float, as written before typed values", "00" + "4035800000000000", model.ReadingRow{Value: 21.5}},
		{"float with seq, as written before typed values", "01" + "4035800000000000" + "0e", model.ReadingRow{Value: 21.5, Seq: 7, HasSeq: true}},
		{"int", "02" + "fffffffffffffffe", model.ReadingRow{Type: model.TypeInt, Int: -2}},
		{"bool true with seq", "05" + "01" + "01", model.ReadingRow{Type: model.TypeBool, Int: 1, Seq: -1, HasSeq: true}},
		{"bool false", "04" + "00", model.ReadingRow{Type: model.TypeBool}},
		{"string", "06" + "04" + "69646c65", model.ReadingRow{Type: model.TypeString, Str: "idle"}},
		{"empty string with seq", "07" + "00" + "02", model.ReadingRow{Type: model.TypeString, Seq: 1, HasSeq: true}},
	}
	for _, tc := range cases {
		if got := hex.EncodeToString(encodeReading(nil, tc.row)); got != tc.bytes {
			t.Errorf("%s: encoded %s, want %s", tc.name, got, tc.bytes)
		}
		b, _ := hex.DecodeString(tc.bytes)
		got := model.ReadingRow{Value: 99, Int: 99, Str: "stale", Seq: 99}
		if err := decodeReading(b, &got); err != nil || got != tc.row {
			t.Errorf("%s: decoded %+v, %v; want %+v", tc.name, got, err, tc.row)
		}
	}
	for _, bad := range []string{"", "00", "004035", "01" + "4035800000000000", "08" + "4035800000000000",
		"02" + "00", "04", "04" + "02", "06", "06" + "05" + "69646c65", "06" + "ffffffffffffffffff01"} {
		b, _ := hex.DecodeString(bad)
		var r model.ReadingRow
		if err := decodeReading(b, &r); !errors.Is(err, errCorrupt) {
			t.Errorf("decode %s: %v, want a corrupt value", bad, err)
		}
	}
}

// DecodeReading refuses what is not a reading key of the current layout.
func TestDecodeReadingRefuses(t *testing.T) {
	pk := model.SeriesDay{Kind: model.KindReadings, Tenant: "acme", Series: "pump-7", Day: 20_000}.Partition(0)
	key, val := AppendReading(nil, nil, pk, []model.ReadingRow{{TS: model.Day(20_000).Start(), Metric: "rpm", Value: 1}})
	for name, k := range map[string][]byte{
		"empty":             nil,
		"another table":     append([]byte{tabCatalogue}, key[1:]...),
		"no series":         key[:7],
		"a per-metric key":  append(bytes.Clone(key), "rpm"...),
		"a short timestamp": key[:len(key)-1],
	} {
		if _, _, err := DecodeReading(k, val, nil); !errors.Is(err, errCorrupt) {
			t.Errorf("%s: DecodeReading(%x) = %v, want a corrupt-key error", name, k, err)
		}
	}
}
