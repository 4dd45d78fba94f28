package pebblestore_test

import (
	"fmt"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/sluicehq/sluice/internal/model"
	"github.com/sluicehq/sluice/internal/reader"
	"github.com/sluicehq/sluice/internal/store"
)

// A read session answers every read as the store did when it opened: the
// same catalogues, readings and audit events for many devices read one
// after the other from its iterators, and nothing committed after it
// opened, to a new partition or to one it lists.
func TestReadsMatchStore(t *testing.T) {
	st := open(t, t.TempDir())
	defer st.Close()
	day := model.DayOf(1_700_000_000_000)
	// commitEntry writes n readings from second from; the partition's entry
	// then spans [first, from+n) seconds and holds rows readings.
	commitEntry := func(series string, sub uint32, from, n, first, rows int) {
		t.Helper()
		sd := model.SeriesDay{Kind: model.KindReadings, Tenant: "acme", Series: series, Day: day}
		pk := sd.Partition(sub)
		pw := store.PartitionWrite{Key: pk}
		for i := from; i < from+n; i++ {
			pw.Readings = append(pw.Readings, model.ReadingRow{TS: day.Start() + int64(i)*1000, Metric: "m", Value: float64(i)})
		}
		b := store.Batch{Partitions: []store.PartitionWrite{pw}, Catalogue: []model.PartitionInfo{{Key: pk, Rows: int64(rows),
			MinTS: day.Start() + int64(first)*1000, MaxTS: day.Start() + int64(from+n-1)*1000, State: "split"}}}
		if err := st.Commit(t.Context(), &b); err != nil {
			t.Fatal(err)
		}
	}
	commit := func(series string, sub uint32, from, n int) { t.Helper(); commitEntry(series, sub, from, n, from, n) }
	var devices []string
	for d := range 30 {
		dev := fmt.Sprintf("dev-%02d", d)
		devices = append(devices, dev)
		commit(dev, 1<<24|1, 0, 50+d)
		if d%3 == 0 {
			commit(dev, 1<<24|2, 40, 20) // a second partition, overlapping
		}
	}
	rs, err := st.NewReads(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer rs.Close()
	commit("dev-05", 1<<24|3, 1000, 10)              // after the session opened
	commitEntry("dev-07", 1<<24|1, 2000, 5, 0, 57+5) // rows of a listed partition, after it opened
	read := func(src reader.Store, dev string, from, to int64) []model.Reading {
		t.Helper()
		got, _, err := reader.Readings(t.Context(), src, reader.Query{Tenant: "acme", Series: dev, From: from, To: to, Limit: reader.MaxLimit})
		if err != nil {
			t.Fatal(err)
		}
		return got
	}
	for _, dev := range devices {
		for _, r := range [][2]int64{{day.Start(), day.Start() + 86_400_000}, {day.Start() + 20_000, day.Start() + 45_000}} {
			want := read(st, dev, r[0], r[1])
			if r[1]-r[0] == 86_400_000 {
				switch dev { // the store has the later commits, the session not
				case "dev-05":
					want = want[:len(want)-10]
				case "dev-07":
					want = want[:len(want)-5]
				}
			}
			if got := read(rs, dev, r[0], r[1]); !cmp.Equal(want, got, cmpopts.EquateEmpty()) {
				t.Errorf("%s %v: the session read %d readings, the store %d:\n%s", dev, r, len(got), len(want), cmp.Diff(want, got))
			}
		}
	}
	// Backwards, and alternating catalogues with rows, through the same
	// session: its iterators are never bounded, so a read must stop at its
	// own partition and find what lies before the last one read.
	for _, dev := range slices.Backward(devices) {
		want := read(st, dev, day.Start()+10_000, day.Start()+60_000)
		if got := read(rs, dev, day.Start()+10_000, day.Start()+60_000); !cmp.Equal(want, got, cmpopts.EquateEmpty()) {
			t.Errorf("%s backwards: the session read %d readings, the store %d:\n%s", dev, len(got), len(want), cmp.Diff(want, got))
		}
	}
	if n := len(read(rs, "dev-05", day.Start(), day.Start()+86_400_000)); n != 55 {
		t.Errorf("the session read %d readings of dev-05, want the 55 committed before it opened", n)
	}
}
