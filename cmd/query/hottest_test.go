package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/sluicehq/sluice/internal/client"
	"github.com/sluicehq/sluice/internal/model"
)

// rp is a ranked readings partition of 2026-11-22.
func rp(series string, sub uint32, rate float64) client.RankedPartition {
	k := model.PartitionKey{Kind: model.KindReadings, Series: series, Day: mustDay("2026-11-22"), Sub: sub}
	return client.RankedPartition{PartitionInfo: model.PartitionInfo{Key: k}, RowsPerSecond: rate}
}

func mustDay(s string) model.Day {
	d, err := model.ParseDay(s)
	if err != nil {
		panic(err)
	}
	return d
}

func TestMergeRankings(t *testing.T) {
	answer := func(url string, ps ...client.RankedPartition) gatewayAnswer {
		return gatewayAnswer{url: url, list: client.TopPartitionList{Partitions: ps}}
	}
	down := gatewayAnswer{url: "c", err: errors.New("connection refused")}
	for _, tc := range []struct {
		name     string
		answers  []gatewayAnswer
		limit    int
		want     []string
		wantDups []duplicate
	}{
		{
			name:    "interleaved by rate, cut at the limit",
			answers: []gatewayAnswer{answer("a", rp("a1", 0, 90), rp("a2", 0, 30), rp("a3", 0, 5)), answer("b", rp("b1", 0, 60), rp("b2", 0, 40))},
			limit:   4,
			want:    []string{"a1/0:90", "b1/0:60", "b2/0:40", "a2/0:30"},
		},
		{
			name:    "a failed gateway is skipped",
			answers: []gatewayAnswer{answer("a", rp("a1", 0, 9)), down, answer("b", rp("b1", 0, 12))},
			limit:   10,
			want:    []string{"b1/0:12", "a1/0:9"},
		},
		{
			name:    "equal rates ordered by series then sub-bucket",
			answers: []gatewayAnswer{answer("a", rp("x", 2, 7)), answer("b", rp("x", 1, 7), rp("w", 5, 7))},
			limit:   10,
			want:    []string{"w/5:7", "x/1:7", "x/2:7"},
		},
		{
			name:     "a partition ranked twice keeps the higher rate",
			answers:  []gatewayAnswer{answer("a", rp("dup", 3, 4), rp("a1", 0, 2)), answer("b", rp("dup", 3, 8))},
			limit:    10,
			want:     []string{"dup/3:8", "a1/0:2"},
			wantDups: []duplicate{{Series: "dup", SubBucket: 3, Kept: "b", Dropped: "a"}},
		},
		{
			name:     "the first of two is kept when it is higher",
			answers:  []gatewayAnswer{answer("a", rp("dup", 3, 8)), answer("b", rp("dup", 3, 4))},
			limit:    10,
			want:     []string{"dup/3:8"},
			wantDups: []duplicate{{Series: "dup", SubBucket: 3, Kept: "a", Dropped: "b"}},
		},
		{
			name:    "none answered",
			answers: []gatewayAnswer{down},
			limit:   10,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ps, _, dups := mergeRankings(tc.answers, tc.limit)
			var got []string
			for _, p := range ps {
				got = append(got, fmt.Sprintf("%s/%d:%g", p.Key.Series, p.Key.Sub, p.RowsPerSecond))
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("ranking (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.wantDups, dups); diff != "" {
				t.Errorf("duplicates (-want +got):\n%s", diff)
			}
		})
	}
}

func TestMergeRankingsUnsettled(t *testing.T) {
	a := gatewayAnswer{url: "a", list: client.TopPartitionList{Partitions: []client.RankedPartition{rp("a", 0, 1)}}}
	b := gatewayAnswer{url: "b", list: client.TopPartitionList{Unsettled: true}}
	if _, unsettled, _ := mergeRankings([]gatewayAnswer{a, b}, 10); !unsettled {
		t.Error("unsettled = false, want true when one gateway says so")
	}
}

func TestSplitURLs(t *testing.T) {
	for _, tc := range []struct {
		in      string
		want    []string
		wantErr string
	}{
		{in: "http://a:1", want: []string{"http://a:1"}},
		{in: " http://a:1 , http://b:2", want: []string{"http://a:1", "http://b:2"}},
		{in: "http://a:1,,http://b:2", wantErr: "item 2 is empty"},
		{in: "http://a:1,", wantErr: "item 2 is empty"},
		{in: "http://a:1,http://a:1", wantErr: `"http://a:1" is given twice`},
		{in: strings.Repeat("http://a,", maxGateways) + "http://b", wantErr: "want at most 64"},
	} {
		t.Run(tc.in, func(t *testing.T) {
			got, err := splitURLs(tc.in)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error %v, want it to contain %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

// dayLog records the days a server was asked for.
type dayLog struct {
	mu   sync.Mutex
	days []string
}

func (l *dayLog) add(d string) { l.mu.Lock(); l.days = append(l.days, d); l.mu.Unlock() }

func (l *dayLog) first() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.days) == 0 {
		return ""
	}
	return l.days[0]
}

// hotServer is a gateway whose --hottest answer is one partition of
// series at rate; it records the day asked for.
func hotServer(t *testing.T, series string, rate float64, days *dayLog) string {
	t.Helper()
	srv := newServer(t, func(w http.ResponseWriter, r *http.Request) bool {
		if r.URL.Path != "/v1/partitions/top" {
			return false
		}
		day := r.URL.Query().Get("day")
		days.add(day)
		w.Header().Set("Content-Type", "application/json")
		_, _ = fmt.Fprintf(w, `{"kind":"readings","day":%q,"by":"rate","partitions":[{"kind":"readings","series":%q,"day":%q,"sub_bucket":0,"state":"open",`+
			`"closed":false,"rows":10,"bytes":300,"min_ts":"2026-11-22T00:00:00.000Z","max_ts":"2026-11-22T06:00:00.000Z","rows_per_second":%g}]}`, day, series, day, rate)
		return true
	})
	return srv.URL
}

// TestHottestAcrossGateways: --hottest --urls asks every gateway for the
// same day and prints their merged ranking; a gateway that does not answer
// is named, makes the exit status 1, and the others are still printed.
func TestHottestAcrossGateways(t *testing.T) {
	var daysA, daysB dayLog
	a := hotServer(t, "dev-a", 3, &daysA)
	b := hotServer(t, "dev-b", 7, &daysB)
	now := time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC)

	stdout, stderr, err := queryEnv(t, now, "partitions", "--hottest", "--urls", a+","+b, "--token", token, "--format", "json")
	if err != nil {
		t.Fatalf("%v (stderr %q)", err, stderr)
	}
	var page clusterPage
	if err := json.Unmarshal([]byte(stdout), &page); err != nil {
		t.Fatalf("decode %q: %v", stdout, err)
	}
	var got []string
	for _, p := range page.Partitions {
		got = append(got, fmt.Sprintf("%s:%g", p.Series, p.RowsPerSecond))
	}
	if want := []string{"dev-b:7", "dev-a:3"}; !cmp.Equal(want, got) {
		t.Errorf("ranking %v, want %v", got, want)
	}
	if want := []string{a, b}; !cmp.Equal(want, page.Gateways) || page.Failed != nil || page.Day != "2026-11-22" {
		t.Errorf("gateways %v failed %v day %s, want %v, none, 2026-11-22", page.Gateways, page.Failed, page.Day, want)
	}
	if daysA.first() != "2026-11-22" || daysB.first() != "2026-11-22" {
		t.Errorf("days asked %q and %q, want today on the client's clock", daysA.first(), daysB.first())
	}

	stdout, stderr, err = queryEnv(t, now, "partitions", "--hottest", "--urls", a+","+refusedURL, "--token", token, "--format", "json")
	if err == nil || !strings.Contains(err.Error(), "1 of 2 gateways did not answer") {
		t.Errorf("error %v, want 1 of 2 gateways did not answer", err)
	}
	if ue := (*usageError)(nil); errors.As(err, &ue) {
		t.Errorf("error %v is a usage error, want status 1", err)
	}
	if !strings.Contains(stderr, "gateway "+refusedURL+":") {
		t.Errorf("stderr %q, want it to name %s", stderr, refusedURL)
	}
	page = clusterPage{}
	if err := json.Unmarshal([]byte(stdout), &page); err != nil {
		t.Fatalf("decode %q: %v", stdout, err)
	}
	if len(page.Partitions) != 1 || page.Partitions[0].Series != "dev-a" || len(page.Failed) != 1 || page.Failed[0].URL != refusedURL {
		t.Errorf("partitions %+v failed %+v, want dev-a and %s failed", page.Partitions, page.Failed, refusedURL)
	}

	_, _, err = queryEnv(t, now, "partitions", "--hottest", "--urls", refusedURL+",http://127.0.0.1:2", "--token", token)
	if err == nil || !strings.Contains(err.Error(), "no gateway answered") || !strings.Contains(err.Error(), "127.0.0.1:2") {
		t.Errorf("error %v, want no gateway answered naming both", err)
	}
}

func TestHottestURLsUsage(t *testing.T) {
	now := time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--hottest", "--urls", "http://a,http://b", "--url", "http://a"}, "give --url or --urls, not both"},
		{[]string{"--largest", "--urls", "http://a,http://b"}, "--urls applies only with --hottest"},
		{[]string{"--device", "d", "--day", "2026-11-22", "--urls", "http://a"}, "--urls applies only with --hottest"},
		{[]string{"--hottest", "--urls", "http://a,,http://b"}, "--urls: item 2 is empty"},
		{[]string{"--hottest", "--urls", "http://a,a:1"}, "--urls: base URL \"a:1\""},
		{[]string{"--hottest", "--urls", "http://a", "--tenant", "acme"}, "--tenant and --config only apply with --direct"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			_, _, err := queryEnv(t, now, append(append([]string{"partitions"}, tc.args...), "--token", token)...)
			if ue := (*usageError)(nil); !errors.As(err, &ue) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %v, want a usage error containing %q", err, tc.want)
			}
		})
	}
}

// TestHottestURLsFromEnv: SLUICE_URLS names the gateways when no flag does.
func TestHottestURLsFromEnv(t *testing.T) {
	var days dayLog
	a := hotServer(t, "dev-a", 3, &days)
	var out, errb strings.Builder
	e := &env{stdout: &out, stderr: &errb, now: time.Now, retry: client.Retry{Attempts: 1},
		getenv: func(k string) string {
			return map[string]string{"SLUICE_URLS": a + "," + refusedURL, "SLUICE_TOKEN": token}[k]
		}}
	err := runEnv(t.Context(), e, []string{"partitions", "--hottest", "--format", "csv"})
	if err == nil || !strings.Contains(errb.String(), refusedURL) || !strings.Contains(out.String(), "dev-a") {
		t.Errorf("error %v, stdout %q, stderr %q: want dev-a listed and %s named", err, out.String(), errb.String(), refusedURL)
	}
}

// TestHottestDuplicateNamed: a partition two gateways rank is listed once,
// with the higher rate, and named on stderr.
func TestHottestDuplicateNamed(t *testing.T) {
	var days dayLog
	a := hotServer(t, "dev-x", 3, &days)
	b := hotServer(t, "dev-x", 7, &days)
	stdout, stderr, err := queryEnv(t, time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC),
		"partitions", "--hottest", "--urls", a+","+b, "--token", token, "--format", "csv")
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(stdout, "dev-x"); n != 1 || !strings.Contains(stdout, ",7.00") {
		t.Errorf("stdout %q, want dev-x once at 7.00 rows/s", stdout)
	}
	if want := "partition dev-x/0 was ranked by both " + b + " and " + a; !strings.Contains(stderr, want) {
		t.Errorf("stderr %q, want it to contain %q", stderr, want)
	}
}
