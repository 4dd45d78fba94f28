package deploy

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"go.yaml.in/yaml/v3"

	"github.com/sluicehq/sluice/internal/chstore"
	"github.com/sluicehq/sluice/internal/chstore/chstoretest"
	"github.com/sluicehq/sluice/internal/rollup"
	"github.com/sluicehq/sluice/internal/testenv"
)

const dashboardsDir = "grafana/dashboards"

// dashboard is the part of a Grafana dashboard the tests read.
type dashboard struct {
	file       string
	UID        string `json:"uid"`
	Title      string `json:"title"`
	Templating struct {
		List []variable `json:"list"`
	} `json:"templating"`
	Panels []panel `json:"panels"`
}

type dsRef struct {
	Type string `json:"type"`
	UID  string `json:"uid"`
}

type panel struct {
	ID         int      `json:"id"`
	Type       string   `json:"type"`
	Title      string   `json:"title"`
	Datasource *dsRef   `json:"datasource"`
	Targets    []target `json:"targets"`
	Panels     []panel  `json:"panels"` // a collapsed row's panels
}

type target struct {
	RefID      string `json:"refId"`
	Datasource *dsRef `json:"datasource"`
	// ClickHouse (grafana-clickhouse-datasource): editorType sql, queryType
	// timeSeries with format 0 or table with format 1.
	EditorType string `json:"editorType"`
	QueryType  string `json:"queryType"`
	Format     *int   `json:"format"`
	RawSQL     string `json:"rawSql"`
	// Prometheus.
	Expr string `json:"expr"`
}

type variable struct {
	Name       string          `json:"name"`
	Type       string          `json:"type"`
	Datasource *dsRef          `json:"datasource"`
	Query      json.RawMessage `json:"query"`
}

// text is the variable's query: a string (ClickHouse, constants) or an
// object with a query field (Prometheus).
func (v variable) text() string {
	var s string
	if json.Unmarshal(v.Query, &s) == nil {
		return s
	}
	var o struct {
		Query string `json:"query"`
	}
	_ = json.Unmarshal(v.Query, &o)
	return o.Query
}

// allPanels returns the panels, those inside collapsed rows included.
func (d dashboard) allPanels() []panel {
	var out []panel
	var walk func([]panel)
	walk = func(ps []panel) {
		for _, p := range ps {
			out = append(out, p)
			walk(p.Panels)
		}
	}
	walk(d.Panels)
	return out
}

func dashboards(t *testing.T) []dashboard {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dashboardsDir, "*.json"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no dashboards in %s (%v)", dashboardsDir, err)
	}
	var out []dashboard
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		d := dashboard{file: f}
		if err := json.Unmarshal(b, &d); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		out = append(out, d)
	}
	return out
}

// dashboardByTitle returns the dashboard of that title or fails t.
func dashboardByTitle(t *testing.T, title string) dashboard {
	t.Helper()
	for _, d := range dashboards(t) {
		if d.Title == title {
			return d
		}
	}
	t.Fatalf("no dashboard %q in %s", title, dashboardsDir)
	return dashboard{}
}

// TestDashboardsWellFormed: the analysts' and the operators' dashboards
// exist; every query names a provisioned data source of its own type, and
// the ClickHouse queries are raw SQL in a format the plugin knows.
func TestDashboardsWellFormed(t *testing.T) {
	ds := datasources(t)
	uids := map[string]string{}
	for _, d := range dashboards(t) {
		if other, dup := uids[d.UID]; d.UID == "" || dup {
			t.Errorf("%s: uid %q empty or also in %s", d.file, d.UID, other)
		}
		uids[d.UID] = d.file
		check := func(where string, ref *dsRef) {
			if ref == nil {
				t.Errorf("%s: %s names no data source", d.file, where)
				return
			}
			if got, ok := ds[ref.UID]; !ok || got.Type != ref.Type {
				t.Errorf("%s: %s uses data source %+v, which is not provisioned (%s)", d.file, where, *ref, datasourcesDir)
			}
		}
		for _, v := range d.Templating.List {
			if v.Type == "query" {
				check("variable "+v.Name, v.Datasource)
			}
		}
		for _, p := range d.allPanels() {
			if p.Type == "row" {
				continue
			}
			if len(p.Targets) == 0 {
				t.Errorf("%s: panel %q has no query", d.file, p.Title)
			}
			for _, tg := range p.Targets {
				where := fmt.Sprintf("panel %q query %s", p.Title, tg.RefID)
				check(where, tg.Datasource)
				if tg.Datasource == nil {
					continue
				}
				switch tg.Datasource.Type {
				case "grafana-clickhouse-datasource":
					ok := tg.EditorType == "sql" && tg.RawSQL != "" && tg.Format != nil &&
						(*tg.Format == 0 && tg.QueryType == "timeSeries" || *tg.Format == 1 && tg.QueryType == "table")
					if !ok {
						t.Errorf("%s: %s: want editorType sql, rawSql, and format 0 with queryType timeSeries or 1 with table", d.file, where)
					}
				case "prometheus":
					if tg.Expr == "" {
						t.Errorf("%s: %s has no expr", d.file, where)
					}
				}
			}
		}
	}
	for _, title := range []string{"Sluice rollups", "Sluice operations"} {
		dashboardByTitle(t, title)
	}
}

// grafanaQuery is what Grafana sends the ClickHouse plugin for a query and
// the plugin runs: the dashboard's variables replaced (Grafana), then the
// plugin's macros, for a time range and interval.
type grafanaQuery struct {
	from, to  time.Time
	intervalS int
	vars      map[string]string
}

var (
	varRef   = regexp.MustCompile(`\$\{(\w+)(?::(\w+))?\}|\$(\w+)`)
	macroRef = regexp.MustCompile(`\$__(\w+)(?:\(([^)]*)\))?`)
)

// expand replaces the variables and macros of sql as Grafana 11 and the
// ClickHouse plugin 4 do, and fails on any it does not know (a query
// using one could not be checked).
func (q grafanaQuery) expand(sql string) (string, error) {
	var errs []string
	sql = varRef.ReplaceAllStringFunc(sql, func(m string) string {
		g := varRef.FindStringSubmatch(m)
		name, format := g[1]+g[3], g[2]
		if strings.HasPrefix(name, "__") {
			return m // a macro, for the plugin
		}
		v, ok := q.vars[name]
		switch {
		case !ok:
			errs = append(errs, "unknown variable "+m)
		case format == "":
			return v
		case format == "sqlstring":
			return "'" + strings.ReplaceAll(v, "'", "''") + "'"
		default:
			errs = append(errs, "unknown variable format "+m)
		}
		return m
	})
	dt := func(t time.Time) string { return fmt.Sprintf("toDateTime(%d)", t.Unix()) }
	sql = macroRef.ReplaceAllStringFunc(sql, func(m string) string {
		g := macroRef.FindStringSubmatch(m)
		switch g[1] {
		case "timeFilter":
			col := strings.TrimSpace(g[2])
			return fmt.Sprintf("%s >= %s AND %s <= %s", col, dt(q.from), col, dt(q.to))
		case "fromTime":
			return dt(q.from)
		case "toTime":
			return dt(q.to)
		case "interval_s":
			return strconv.Itoa(q.intervalS)
		}
		errs = append(errs, "unknown macro "+m)
		return m
	})
	if len(errs) > 0 {
		return "", fmt.Errorf("%s", strings.Join(errs, "; "))
	}
	return sql, nil
}

func TestExpand(t *testing.T) {
	q := grafanaQuery{from: time.Unix(100, 0), to: time.Unix(200, 0), intervalS: 15,
		vars: map[string]string{"database": "db", "device": "o'hare"}}
	got, err := q.expand("SELECT greatest(60, $__interval_s) FROM $database.t WHERE device = ${device:sqlstring} AND $__timeFilter(minute) AND x < $__toTime")
	want := "SELECT greatest(60, 15) FROM db.t WHERE device = 'o''hare' AND minute >= toDateTime(100) AND minute <= toDateTime(200) AND x < toDateTime(200)"
	if err != nil || got != want {
		t.Errorf("expand:\n got %q, %v\nwant %q", got, err, want)
	}
	for _, bad := range []string{"SELECT $tenant", "SELECT ${device:csv}", "SELECT $__timeGroup(minute, 1m)"} {
		if got, err := q.expand(bad); err == nil {
			t.Errorf("expand(%q) = %q, want an error", bad, got)
		}
	}
}

func clickhouseAddr() string {
	if a := os.Getenv("SLUICE_ROLLUPS_CLICKHOUSE_ADDR"); a != "" {
		return a
	}
	return "127.0.0.1:9000"
}

// scratchRollups creates the rollup table with chstore's own migration in
// a database of its own on the test ClickHouse, dropped when t ends.
func scratchRollups(t *testing.T) *chstore.Store {
	t.Helper()
	addr := clickhouseAddr()
	testenv.LockClickHouse(t, false)
	testenv.Require(t, "clickhouse", addr)
	return chstoretest.Scratch(t, addr, "sluice_deploy")
}

var dashT0 = time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)

// at is a time dashT0 + d in milliseconds.
func at(d time.Duration) int64 { return dashT0.Add(d).UnixMilli() }

// part is one partial aggregate row, as a gateway emits it.
func part(tenant, device, metric string, minute time.Duration, writer uint16, p, version uint64, points ...[2]float64) rollup.Row {
	r := rollup.Row{Key: rollup.Key{Tenant: tenant, Device: device, Metric: metric, Minute: at(minute)}, Writer: writer, Part: p, Version: version}
	for i, pt := range points { // pt: seconds after dashT0, value; sorted by time
		ts, v := at(time.Duration(pt[0]*float64(time.Second))), pt[1]
		if i == 0 {
			r.Min, r.Max, r.FirstTS, r.FirstValue = v, v, ts, v
		}
		r.Count++
		r.Sum += v
		r.Min, r.Max = min(r.Min, v), max(r.Max, v)
		r.LastTS, r.LastValue = ts, v
	}
	return r
}

// TestRollupsDashboardSQL runs every ClickHouse query of the dashboards
// (panels and variables) against the test suite's ClickHouse (18.16), on
// rows that exercise what the queries must get right: partial rows of two
// writers for one minute, a newer version of a row (inserted before a
// retried older one), a tombstone retracting a part, other tenants, metrics
// and minutes outside the range, and a device id with a quote.
func TestRollupsDashboardSQL(t *testing.T) {
	s := scratchRollups(t)
	ctx := context.Background()
	const m = time.Minute
	inserts := [][]rollup.Row{
		{
			part("acme", "d1", "temp", 0, 1, 1, 1, [2]float64{5, 4}, [2]float64{50, 6}),
			part("acme", "d1", "temp", 0, 2, 7, 1, [2]float64{1, 9}),
			part("acme", "d1", "temp", m, 2, 8, 1, [2]float64{70, 100}, [2]float64{80, 100}, [2]float64{90, 100}, [2]float64{100, 100}, [2]float64{110, 100}),
			part("acme", "d1", "rpm", 0, 1, 1, 1, [2]float64{5, 1500}),
			part("acme", "d2", "temp", 0, 1, 2, 1, [2]float64{30, 100}),
			part("acme", "o'hare", "temp", 2*m, 1, 3, 1, [2]float64{120, 10}, [2]float64{160, 20}),
			part("acme", "d1", "temp", 60*m, 1, 1, 1, [2]float64{3610, 1000}), // after the range
			part("other", "d1", "temp", 0, 1, 1, 1, [2]float64{5, 7777}),
			part("gone", "d9", "temp", 0, 1, 1, 1, [2]float64{5, 1}, [2]float64{6, 2}, [2]float64{7, 3}),
		},
		{
			// Re-emitted after a late reading: replaces version 1.
			part("acme", "d1", "temp", 0, 1, 1, 2, [2]float64{5, 4}, [2]float64{50, 6}, [2]float64{55, 5}),
			part("acme", "d1", "temp", m, 1, 1, 3, [2]float64{60, 0}, [2]float64{90, 2}),
			// Tombstones: retract writer 2's part 8 and all of tenant gone.
			part("acme", "d1", "temp", m, 2, 8, 2),
			part("gone", "d9", "temp", 0, 1, 1, 2),
		},
		{
			// A retried insert of the old version wins nothing.
			part("acme", "d1", "temp", 0, 1, 1, 1, [2]float64{5, 4}, [2]float64{50, 6}),
		},
	}
	for _, rows := range inserts {
		if err := s.Insert(ctx, rows); err != nil {
			t.Fatal(err)
		}
	}
	database := strings.TrimSuffix(s.Table(), ".rollups_1m")
	q := grafanaQuery{from: dashT0, to: dashT0.Add(30 * m), intervalS: 15, vars: map[string]string{
		"database": database, "tenant": "acme", "metric": "temp", "device": "d1",
	}}
	const t12, t1201, t1202 = "2025-03-01 12:00:00", "2025-03-01 12:01:00", "2025-03-01 12:02:00"
	// What each query must answer, by variable name or panel title. Minute
	// 12:00 of d1 temp: writer 1 part 1 version 2 (3 readings: 4, 6, 5 at
	// :05, :50, :55) and writer 2 part 7 (9 at :01): 4 readings, sum 24,
	// first 9, last 5. Minute 12:01: writer 1 (0, 2 at :00, :30); writer 2's
	// part is a tombstone.
	want := map[string][][]string{
		"variable tenant": {{"acme"}, {"other"}},
		"variable metric": {{"rpm"}, {"temp"}},
		"variable device": {{"d1"}, {"d2"}, {"o'hare"}},
		"Mean, lowest and highest $metric of $device": {{t12, "6", "4", "9"}, {t1201, "1", "0", "2"}},
		"Latest $metric of $device":                   {{"2"}},
		"Readings of $metric from $device":            {{t12, "4"}, {t1201, "2"}},
		"Readings of $tenant by metric":               {{t12, "rpm", "1"}, {t12, "temp", "5"}, {t1201, "temp", "2"}, {t1202, "temp", "2"}},
		"Devices by mean $metric":                     {{"d2", "1", "100", "100", "100"}, {"o'hare", "2", "15", "10", "20"}, {"d1", "6", "4.333333333333333", "0", "9"}},
		"Change of $metric over the time range":       {{"d1", "9", "2", "-7"}, {"d2", "100", "100", "0"}, {"o'hare", "10", "20", "10"}},
	}
	run := func(name, sql string, q grafanaQuery) [][]string {
		t.Helper()
		expanded, err := q.expand(sql)
		if err != nil {
			t.Errorf("%s: %v", name, err)
			return nil
		}
		res, err := s.SQL(ctx, expanded, 1000)
		if err != nil {
			t.Errorf("%s: %v\n%s", name, err, expanded)
			return nil
		}
		return res.Rows
	}
	ran := map[string]bool{}
	check := func(name, sql string) {
		ran[name] = true
		w, ok := want[name]
		if !ok {
			t.Errorf("query %q has no expected answer in this test: add one", name)
			return
		}
		if diff := cmp.Diff(w, run(name, sql, q)); diff != "" {
			t.Errorf("%s (-want +got):\n%s", name, diff)
		}
	}
	clickhouseQueries := 0
	for _, d := range dashboards(t) {
		for _, v := range d.Templating.List {
			if v.Type == "query" && v.Datasource != nil && v.Datasource.Type == "grafana-clickhouse-datasource" {
				check("variable "+v.Name, v.text())
				clickhouseQueries++
			}
			if v.Type == "constant" && v.Name == "database" && v.text() != chstore.DefaultConfig().Database {
				t.Errorf("%s: constant database %q, the gateways' default is %q", d.file, v.text(), chstore.DefaultConfig().Database)
			}
		}
		for _, p := range d.allPanels() {
			for _, tg := range p.Targets {
				if tg.Datasource != nil && tg.Datasource.Type == "grafana-clickhouse-datasource" {
					check(p.Title, tg.RawSQL)
					clickhouseQueries++
				}
			}
		}
	}
	for name := range want {
		if !ran[name] {
			t.Errorf("expected answer for %q, but no dashboard has that query", name)
		}
	}
	if clickhouseQueries < len(want) {
		t.Fatalf("%d ClickHouse queries run, want %d", clickhouseQueries, len(want))
	}

	// The device is quoted: an id with a quote selects its own rows.
	quoted := q
	quoted.vars = map[string]string{"database": database, "tenant": "acme", "metric": "temp", "device": "o'hare"}
	for _, p := range dashboardByTitle(t, "Sluice rollups").allPanels() {
		if p.Title == "Latest $metric of $device" {
			if got := run(p.Title, p.Targets[0].RawSQL, quoted); !slices.Equal(slices.Concat(got...), []string{"20"}) {
				t.Errorf("latest of device o'hare: %v, want 20", got)
			}
		}
	}
}

// promQLVars stands for the Grafana variables of the operators' dashboard,
// so that promtool can parse its queries.
var promQLVars = strings.NewReplacer("$__rate_interval", "5m", "$__range", "1h", "$__interval", "1m", "$instance", ".*")

// TestDashboardPromQL parses every Prometheus query of the dashboards
// with Prometheus's own parser: each becomes a recording rule of a
// scratch rule file that `promtool check rules` reads.
func TestDashboardPromQL(t *testing.T) {
	type rule struct {
		Record string `yaml:"record"`
		Expr   string `yaml:"expr"`
	}
	var rules []rule
	for _, d := range dashboards(t) {
		for _, p := range d.allPanels() {
			for _, tg := range p.Targets {
				if tg.Datasource != nil && tg.Datasource.Type == "prometheus" {
					rules = append(rules, rule{Record: fmt.Sprintf("dashboard:panel_%d:%s", p.ID, strings.ToLower(tg.RefID)), Expr: promQLVars.Replace(tg.Expr)})
				}
			}
		}
	}
	if len(rules) < 10 {
		t.Fatalf("only %d Prometheus queries in the dashboards", len(rules))
	}
	check := func(rules []rule) ([]byte, error) {
		b, err := yaml.Marshal(map[string]any{"groups": []map[string]any{{"name": "dashboards", "rules": rules}}})
		if err != nil {
			t.Fatal(err)
		}
		file := filepath.Join(t.TempDir(), "dashboards.rules.yml")
		if err := os.WriteFile(file, b, 0o600); err != nil {
			t.Fatal(err)
		}
		return promtool(t, "check", "rules", file)
	}
	if out, err := check(rules); err != nil {
		t.Errorf("promtool check rules: %v\n%s", err, out)
	}
	// A query Prometheus cannot parse fails the check.
	broken := append(slices.Clone(rules), rule{Record: "dashboard:broken", Expr: "sum by (instance (rate(sluice_sink_commits_total[5m]))"})
	if _, err := check(broken); err == nil {
		t.Error("promtool accepted a query with unbalanced parentheses")
	}
}
