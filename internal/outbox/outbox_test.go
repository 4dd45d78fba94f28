package outbox

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/sluicehq/sluice/internal/model"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

func payload(i int) []byte { return fmt.Appendf(nil, "record-%03d", i) } // 10 bytes

func TestDurableAcrossReopen(t *testing.T) {
	dir := t.TempDir()
	o, err := Open(dir, 1<<20, quiet)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		if err := o.Append(payload(i), i+1); err != nil {
			t.Fatal(err)
		}
	}
	recs, err := o.Peek(3) // 1+2 rows fit, the third record would pass 3
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 2 || string(recs[0].Payload) != "record-000" || recs[1].Rows != 2 {
		t.Fatalf("Peek(3) = %+v", recs)
	}
	if err := o.Ack(recs); err != nil {
		t.Fatal(err)
	}
	if err := o.MarkDirty([]DirtyDay{{"acme", 20000}, {"acme", 19999}, {"bulk", 19999}}); err != nil {
		t.Fatal(err)
	}
	if err := o.Close(); err != nil {
		t.Fatal(err)
	}

	o, err = Open(dir, 1<<20, quiet)
	if err != nil {
		t.Fatal(err)
	}
	defer o.Close()
	if got, want := o.Depth(), (Depth{Records: 3, Rows: 3 + 4 + 5, Bytes: 30}); got != want {
		t.Errorf("depth after reopen %+v, want %+v", got, want)
	}
	recs, err = o.Peek(1000)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, r := range recs {
		got = append(got, string(r.Payload))
	}
	if diff := cmp.Diff([]string{"record-002", "record-003", "record-004"}, got); diff != "" {
		t.Errorf("records after reopen (-want +got):\n%s", diff)
	}
	// New records go after the old ones.
	if err := o.Append(payload(9), 1); err != nil {
		t.Fatal(err)
	}
	recs, _ = o.Peek(1000)
	if last := recs[len(recs)-1]; string(last.Payload) != "record-009" || last.Seq <= recs[0].Seq {
		t.Errorf("appended record %+v is not last", last)
	}
	days, err := o.Dirty()
	if diff := cmp.Diff([]DirtyDay{{"acme", 19999}, {"bulk", 19999}, {"acme", 20000}}, days); err != nil || diff != "" {
		t.Errorf("Dirty() (-want +got), err %v:\n%s", err, diff)
	}
	// A rebuild of acme's day clears acme's mark, not bulk's.
	if err := o.ClearDirty("acme", []model.Day{19999}, o.DirtySeq()); err != nil {
		t.Fatal(err)
	}
	if days, _ := o.Dirty(); !cmp.Equal(days, []DirtyDay{{"bulk", 19999}, {"acme", 20000}}) {
		t.Errorf("Dirty() after clearing acme's 19999 = %v", days)
	}
	// A mark written after the rebuild started (a loss it may have missed)
	// stays; one written before goes.
	started := o.DirtySeq()
	if err := o.MarkDirty([]DirtyDay{{"acme", 20000}}); err != nil {
		t.Fatal(err)
	}
	if err := o.ClearDirty("acme", []model.Day{20000}, started); err != nil {
		t.Fatal(err)
	}
	if days, _ := o.Dirty(); !cmp.Equal(days, []DirtyDay{{"bulk", 19999}, {"acme", 20000}}) {
		t.Errorf("Dirty() after a rebuild that started before acme's 20000 was marked again = %v", days)
	}
	// A mark without a tenant (written before marks named one) goes with
	// the first tenant's rebuild of its day.
	if err := o.MarkDirty([]DirtyDay{{"", 20001}}); err != nil {
		t.Fatal(err)
	}
	if days, _ := o.Dirty(); !cmp.Equal(days[len(days)-1], DirtyDay{"", 20001}) {
		t.Errorf("Dirty() = %v, want the mark without a tenant last", days)
	}
	if err := o.ClearDirty("bulk", []model.Day{20001}, o.DirtySeq()); err != nil {
		t.Fatal(err)
	}
	if days, _ := o.Dirty(); !cmp.Equal(days, []DirtyDay{{"bulk", 19999}, {"acme", 20000}}) {
		t.Errorf("Dirty() after clearing bulk's 20001 = %v", days)
	}
}

func TestBound(t *testing.T) {
	tests := []struct {
		name     string
		maxBytes int64
		appends  int
		wantOK   int
	}{
		{"room for all", 100, 10, 10},
		{"room for three", 35, 10, 3},
		{"room for none", 5, 2, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			o, err := Open(t.TempDir(), tc.maxBytes, quiet)
			if err != nil {
				t.Fatal(err)
			}
			defer o.Close()
			ok := 0
			for i := range tc.appends {
				err := o.Append(payload(i), 1)
				switch {
				case err == nil:
					ok++
				case !errors.Is(err, ErrFull):
					t.Fatalf("append %d: %v", i, err)
				}
			}
			if ok != tc.wantOK || o.Depth().Records != tc.wantOK {
				t.Errorf("kept %d (depth %+v), want %d", ok, o.Depth(), tc.wantOK)
			}
			// Acknowledging frees room again.
			recs, _ := o.Peek(1000)
			if err := o.Ack(recs); err != nil {
				t.Fatal(err)
			}
			if d := o.Depth(); d != (Depth{}) {
				t.Errorf("depth after acking everything: %+v", d)
			}
			if tc.maxBytes >= 10 {
				if err := o.Append(payload(0), 1); err != nil {
					t.Errorf("append after ack: %v", err)
				}
			}
		})
	}
}
