package buckets

import (
	"testing"

	"github.com/sluicehq/sluice/internal/model"
)

// TestIndexCollisions chains series-days whose hashes collide and takes
// them out in every order: each look-up finds exactly what is held.
func TestIndexCollisions(t *testing.T) {
	sd := func(dev string) model.SeriesDay {
		return model.SeriesDay{Kind: model.KindReadings, Tenant: "t", Series: dev, Day: 20_000}
	}
	for _, tt := range []struct {
		name   string
		remove []string // of a, b, c, all under one hash (c is the chain's head)
	}{
		{"head", []string{"c"}},
		{"middle", []string{"b"}},
		{"tail", []string{"a"}},
		{"tail then head", []string{"a", "c"}},
		{"all", []string{"b", "c", "a"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			ix := newIndex()
			held := map[string]*Series{}
			for _, dev := range []string{"a", "b", "c"} {
				s := &Series{sd: sd(dev)}
				ix.link(s, 42)
				held[dev] = s
			}
			other := &Series{sd: sd("d")}
			ix.link(other, 43)
			for _, dev := range tt.remove {
				ix.remove(held[dev])
				delete(held, dev)
			}
			for _, dev := range []string{"a", "b", "c"} {
				if got, want := ix.find(42, sd(dev)), held[dev]; got != want {
					t.Errorf("find(%s) = %p, want %p", dev, got, want)
				}
			}
			if got := ix.find(43, sd("d")); got != other {
				t.Errorf("find(d) = %p, want %p", got, other)
			}
			if got, want := ix.len(), len(held)+1; got != want {
				t.Errorf("len %d, want %d", got, want)
			}
			if _, ok := ix.m[42]; ok != (len(held) > 0) {
				t.Errorf("hash 42 in the map: %v with %d series-days under it", ok, len(held))
			}
		})
	}
}

// TestIndexHash checks that series-days differing in one field hash apart
// and that put and get agree with the hash.
func TestIndexHash(t *testing.T) {
	ix := newIndex()
	base := model.SeriesDay{Kind: model.KindReadings, Tenant: "t", Series: "dev", Day: 20_000}
	variants := []model.SeriesDay{base}
	for _, v := range []func(*model.SeriesDay){
		func(s *model.SeriesDay) { s.Kind = model.KindAudit },
		func(s *model.SeriesDay) { s.Tenant = "u" },
		func(s *model.SeriesDay) { s.Series = "dew" },
		func(s *model.SeriesDay) { s.Day++ },
		func(s *model.SeriesDay) { s.Tenant, s.Series = "tdev", "" },
	} {
		sd := base
		v(&sd)
		variants = append(variants, sd)
	}
	seen := map[uint64]model.SeriesDay{}
	for _, sd := range variants {
		h := ix.hash(sd)
		if prev, dup := seen[h]; dup {
			t.Errorf("%v and %v hash alike", prev, sd)
		}
		seen[h] = sd
		ix.put(&Series{sd: sd}, h)
	}
	for i, sd := range variants {
		s := ix.get(sd)
		if s == nil || s.sd != sd {
			t.Errorf("variant %d: get(%v) = %v", i, sd, s)
		}
	}
	if ix.get(model.SeriesDay{Tenant: "x"}) != nil {
		t.Error("found a series-day never put")
	}
}
