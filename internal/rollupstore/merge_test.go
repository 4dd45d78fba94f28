package rollupstore

import (
	"slices"
	"testing"

	"github.com/sluicehq/sluice/internal/rollup"
)

func TestLatestMerger(t *testing.T) {
	key := func() []byte { return hourKey(row("acme", "pump-1", "temp", 60_000, 1, 1)) }
	enc := func(count, version uint64) []byte {
		r := row("acme", "pump-1", "temp", 60_000, count, version)
		return rollup.EncodeValue(nil, &r)
	}
	// legacy is a value as stores written before values left out their
	// key hold it: the whole row.
	legacy := func(count, version uint64) []byte {
		r := row("acme", "pump-1", "temp", 60_000, count, version)
		return rollup.EncodeRow(nil, &r)
	}
	corrupt := []byte{1, 1, 200}
	corruptValue := []byte{2, 1, 200}
	tests := []struct {
		name      string
		operands  [][]byte // oldest first
		wantCount uint64   // count of the row kept; 0 with wantBad
		wantBad   bool     // the result is the corrupt operand
	}{
		{name: "one operand", operands: [][]byte{enc(3, 5)}, wantCount: 3},
		{name: "newer version wins", operands: [][]byte{enc(3, 5), enc(4, 6)}, wantCount: 4},
		{name: "older version arriving later loses", operands: [][]byte{enc(4, 6), enc(3, 5)}, wantCount: 4},
		{name: "a tombstone of a higher version wins", operands: [][]byte{enc(4, 6), enc(0, 7), enc(9, 6)}, wantCount: 0},
		{name: "corrupt ranks below valid, before", operands: [][]byte{corrupt, enc(2, 1)}, wantCount: 2},
		{name: "corrupt ranks below valid, after", operands: [][]byte{enc(2, 1), corrupt}, wantCount: 2},
		{name: "only corrupt is kept as is", operands: [][]byte{corrupt}, wantBad: true},
		{name: "a value newer than a legacy row wins", operands: [][]byte{legacy(3, 5), enc(4, 6)}, wantCount: 4},
		{name: "a legacy row newer than a value wins", operands: [][]byte{enc(3, 5), legacy(4, 6)}, wantCount: 4},
		{name: "an older value after a legacy row loses", operands: [][]byte{legacy(4, 6), enc(3, 5)}, wantCount: 4},
		{name: "a corrupt value ranks below a valid legacy row", operands: [][]byte{legacy(2, 1), corruptValue}, wantCount: 2},
		{name: "only a corrupt value is kept as is", operands: [][]byte{corruptValue}, wantBad: true},
	}
	for _, tc := range tests {
		for _, newer := range []bool{true, false} {
			name := tc.name + "/merge older"
			if newer {
				name = tc.name + "/merge newer"
			}
			t.Run(name, func(t *testing.T) {
				// Pebble hands operands either newest-first (MergeOlder) or
				// oldest-first (MergeNewer); the result must not depend on it.
				ops := tc.operands
				first, rest := ops[0], ops[1:]
				if !newer {
					first = ops[len(ops)-1]
					rest = nil
					for i := len(ops) - 2; i >= 0; i-- {
						rest = append(rest, ops[i])
					}
				}
				buf := append([]byte(nil), first...)
				vm, err := latestMerger.Merge(nil, buf)
				if err != nil {
					t.Fatal(err)
				}
				clear(buf) // the merger must have copied what it keeps
				for _, op := range rest {
					b := append([]byte(nil), op...)
					if newer {
						err = vm.MergeNewer(b)
					} else {
						err = vm.MergeOlder(b)
					}
					if err != nil {
						t.Fatal(err)
					}
					clear(b)
				}
				out, _, err := vm.Finish(true)
				if err != nil {
					t.Fatal(err)
				}
				got, err := decode(key(), out)
				if tc.wantBad {
					if err == nil {
						t.Fatalf("result decodes: %+v", got)
					}
					return
				}
				if err != nil {
					t.Fatal(err)
				}
				if got.Count != tc.wantCount {
					t.Errorf("kept count %d, want %d", got.Count, tc.wantCount)
				}
			})
		}
	}
}

// BenchmarkMerge measures the merge of four versions of a device-minute
// of six metrics (re-recomputed), what reads and compactions of the store
// do, and of a row of the layouts before.
func BenchmarkMerge(b *testing.B) {
	const minute = 1_740_000_000_000
	var rowOps, minuteOps [][]byte
	for v := range uint64(4) {
		r := row("acme", "device-000123", "temperature", minute, 6+v, 1_740_000_000_000_000_000+v)
		rowOps = append(rowOps, rollup.EncodeRow(nil, &r))
		var rows []rollup.Row
		for _, metric := range []string{"a", "b", "c", "d", "e", "f"} {
			rows = append(rows, row("acme", "device-000123", metric, minute, 6+v, 1_740_000_000_000_000_000+v))
		}
		minuteOps = append(minuteOps, appendMinuteValue(nil, rows))
	}
	r0 := row("acme", "device-000123", "", minute, 0, 0)
	for _, tc := range []struct {
		name string
		key  []byte
		ops  [][]byte
	}{
		{"device-minute", appendKey(nil, &r0), minuteOps},
		{"row", hourKey(row("acme", "device-000123", "temperature", minute, 0, 0)), rowOps},
	} {
		b.Run(tc.name, func(b *testing.B) {
			for b.Loop() {
				vm, err := latestMerger.Merge(tc.key, tc.ops[0])
				if err != nil {
					b.Fatal(err)
				}
				for _, op := range tc.ops[1:] {
					_ = vm.MergeNewer(op)
				}
				if _, _, err := vm.Finish(true); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// The merge of device-minute values keeps, metric by metric, what
// TestLatestMerger keeps of a row, in whatever order and split the
// operands come; a value whose framing does not decode ranks below every
// valid one.
func TestMinuteMerger(t *testing.T) {
	r0 := row("acme", "pump-1", "", 60_000, 0, 0)
	key := appendKey(nil, &r0)
	type m struct {
		metric         string
		count, version uint64
	}
	enc := func(ms ...m) []byte {
		rows := make([]rollup.Row, len(ms))
		for i, x := range ms {
			rows[i] = row("acme", "pump-1", x.metric, 60_000, x.count, x.version)
		}
		return appendMinuteValue(nil, rows)
	}
	// badEntry is a value whose framing decodes but whose one row does not.
	badEntry := func(metric string) []byte {
		b := append([]byte{minuteValueVersion, 1, byte(len(metric))}, metric...)
		return append(b, 3, 2, 1, 200)
	}
	// wholeRow is a value holding a row in EncodeRow's form (the outbox's,
	// and the store's before values left the key out), which a
	// device-minute value never holds: it ranks as corrupt.
	wholeRow := func(metric string, count, version uint64) []byte {
		r := row("acme", "pump-1", metric, 60_000, count, version)
		v := rollup.EncodeRow(nil, &r)
		b := append([]byte{minuteValueVersion, 1, byte(len(metric))}, metric...)
		return append(append(b, byte(len(v))), v...)
	}
	corrupt := []byte{minuteValueVersion, 2, 4, 't'}
	tests := []struct {
		name     string
		operands [][]byte // oldest first
		want     []m      // the rows kept, by metric; nil with wantBad
		wantBad  bool     // the result does not decode
	}{
		{name: "one operand", operands: [][]byte{enc(m{"rpm", 2, 5}, m{"temp", 3, 5})}, want: []m{{"rpm", 2, 5}, {"temp", 3, 5}}},
		{name: "a newer version wins per metric", operands: [][]byte{enc(m{"rpm", 2, 5}, m{"temp", 3, 5}), enc(m{"temp", 4, 6})},
			want: []m{{"rpm", 2, 5}, {"temp", 4, 6}}},
		{name: "an older version arriving later loses", operands: [][]byte{enc(m{"rpm", 2, 6}, m{"temp", 3, 6}), enc(m{"rpm", 9, 5}, m{"temp", 9, 5})},
			want: []m{{"rpm", 2, 6}, {"temp", 3, 6}}},
		{name: "rows of one version split over operands", operands: [][]byte{enc(m{"temp", 3, 5}), enc(m{"hum", 1, 5}, m{"rpm", 2, 5})},
			want: []m{{"hum", 1, 5}, {"rpm", 2, 5}, {"temp", 3, 5}}},
		{name: "a tombstone of a higher version wins", operands: [][]byte{enc(m{"temp", 4, 6}), enc(m{"temp", 0, 7}), enc(m{"temp", 9, 6})},
			want: []m{{"temp", 0, 7}}},
		{name: "corrupt ranks below valid, before", operands: [][]byte{corrupt, enc(m{"temp", 2, 1})}, want: []m{{"temp", 2, 1}}},
		{name: "corrupt ranks below valid, after", operands: [][]byte{enc(m{"temp", 2, 1}), corrupt}, want: []m{{"temp", 2, 1}}},
		{name: "only corrupt is kept as is", operands: [][]byte{corrupt}, wantBad: true},
		{name: "only corrupt twice is kept as is", operands: [][]byte{corrupt, corrupt}, wantBad: true},
		{name: "a bad row ranks below a valid row of its metric", operands: [][]byte{badEntry("temp"), enc(m{"rpm", 1, 1}, m{"temp", 2, 1})},
			want: []m{{"rpm", 1, 1}, {"temp", 2, 1}}},
		{name: "a bad row alone for its metric is kept and reported", operands: [][]byte{enc(m{"rpm", 1, 1}), badEntry("temp")}, wantBad: true},
		{name: "a whole row is no device-minute row", operands: [][]byte{wholeRow("temp", 9, 9), enc(m{"temp", 2, 1})}, want: []m{{"temp", 2, 1}}},
		{name: "interleaved metrics merge", operands: [][]byte{enc(m{"a", 1, 1}, m{"c", 1, 1}, m{"e", 1, 1}), enc(m{"b", 2, 1}, m{"c", 2, 2}, m{"f", 2, 1}), enc(m{"a", 3, 3}, m{"d", 3, 1})},
			want: []m{{"a", 3, 3}, {"b", 2, 1}, {"c", 2, 2}, {"d", 3, 1}, {"e", 1, 1}, {"f", 2, 1}}},
	}
	for _, tc := range tests {
		for _, newer := range []bool{true, false} {
			name := tc.name + "/merge older"
			if newer {
				name = tc.name + "/merge newer"
			}
			t.Run(name, func(t *testing.T) {
				ops := tc.operands
				first, rest := ops[0], ops[1:]
				if !newer {
					first = ops[len(ops)-1]
					rest = nil
					for i := len(ops) - 2; i >= 0; i-- {
						rest = append(rest, ops[i])
					}
				}
				buf := append([]byte(nil), first...)
				vm, err := latestMerger.Merge(key, buf)
				if err != nil {
					t.Fatal(err)
				}
				clear(buf) // the merger must have copied what it keeps
				for _, op := range rest {
					b := append([]byte(nil), op...)
					if newer {
						err = vm.MergeNewer(b)
					} else {
						err = vm.MergeOlder(b)
					}
					if err != nil {
						t.Fatal(err)
					}
					clear(b)
				}
				out, _, err := vm.Finish(true)
				if err != nil {
					t.Fatal(err)
				}
				var got []m
				err = decodeEach(key, out, func(r rollup.Row) error {
					got = append(got, m{r.Metric, r.Count, r.Version})
					return nil
				})
				if tc.wantBad {
					if err == nil {
						t.Fatalf("result decodes: %+v", got)
					}
					return
				}
				if err != nil {
					t.Fatal(err)
				}
				if !slices.Equal(got, tc.want) {
					t.Errorf("kept %+v, want %+v", got, tc.want)
				}
			})
		}
	}
}
