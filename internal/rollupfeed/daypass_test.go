package rollupfeed

import (
	"context"
	"errors"
	"testing"

	"github.com/sluicehq/sluice/internal/model"
	"github.com/sluicehq/sluice/internal/store"
)

// fakeScanner hands out its devices, one reading each (its index as TS),
// "split" ones not whole, then returns err.
type fakeScanner struct {
	devices []string
	err     error
}

func (f fakeScanner) EachSeriesReadings(_ context.Context, _ string, _ model.Day, _ store.Range, fn func(string, []model.Reading, bool) error) error {
	for i, d := range f.devices {
		whole := d != "split"
		var rs []model.Reading
		if whole {
			rs = []model.Reading{{DeviceID: d, TS: int64(i)}}
		}
		if err := fn(d, rs, whole); err != nil {
			return err
		}
	}
	return f.err
}

// A pass hands each device asked for, in order, its readings; a device it
// did not meet has none; one it met but nobody asked for is skipped; one
// it could not hand over whole is to be read on its own; the scan's error
// reaches the caller once the pass gets to it.
func TestDayPassTake(t *testing.T) {
	boom := errors.New("boom")
	p := newDayPass(t.Context(), fakeScanner{devices: []string{"a", "b", "c", "split", "x"}, err: boom}, "acme", 1, store.Range{})
	defer p.close()
	for _, tc := range []struct {
		device  string
		ts      int64 // of its one reading; -1: none
		have    bool
		wantErr bool
	}{
		{"b", 1, true, false},       // a skipped
		{"bb", -1, true, false},     // not met: no readings
		{"c", 2, true, false},       //
		{"split", -1, false, false}, // read it on its own
		{"w", -1, true, false},      // x is next
		{"y", 0, false, true},       // x skipped, then the scan's error
	} {
		rs, have, err := p.take(tc.device)
		if tc.wantErr {
			if !errors.Is(err, boom) {
				t.Errorf("take(%q): %v, want the scan's error", tc.device, err)
			}
			continue
		}
		if err != nil || have != tc.have || (tc.ts < 0) != (len(rs) == 0) || len(rs) > 0 && rs[0].TS != tc.ts {
			t.Errorf("take(%q) = %+v, %v, %v; want reading at %d, have %v", tc.device, rs, have, err, tc.ts, tc.have)
		}
	}
	// Without a scanner every device is read on its own.
	var none dayPass
	if _, have, err := none.take("a"); have || err != nil {
		t.Errorf("no pass: have %v, %v; want the device read on its own", have, err)
	}
	none.close()
}
