package deploy

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"net"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/compose-spec/compose-go/v2/loader"
	"github.com/compose-spec/compose-go/v2/types"
	"go.yaml.in/yaml/v3"

	"github.com/sluicehq/sluice/internal/config"
	"github.com/sluicehq/sluice/internal/testenv"
)

const (
	composeFile      = "../docker-compose.yml"
	imageConfig      = "../configs/ingest.yaml" // what the image loads (Dockerfile: SLUICE_CONFIG)
	prometheusConfig = "prometheus/prometheus.yml"
	datasourcesDir   = "grafana/provisioning/datasources"
)

// loadCompose loads a compose file as `docker compose` does: parsed,
// interpolated (with an empty environment), validated against the Compose
// specification's JSON schema (compose-go embeds it) and checked for
// consistency (every service, volume and secret referred to is defined).
func loadCompose(file string, content []byte) (*types.Project, error) {
	abs, err := filepath.Abs(file)
	if err != nil {
		return nil, err
	}
	return loader.LoadWithContext(context.Background(), types.ConfigDetails{
		WorkingDir:  filepath.Dir(abs),
		ConfigFiles: []types.ConfigFile{{Filename: abs, Content: content}},
		Environment: types.Mapping{},
	})
}

func project(t *testing.T) *types.Project {
	t.Helper()
	b, err := os.ReadFile(composeFile)
	if err != nil {
		t.Fatal(err)
	}
	p, err := loadCompose(composeFile, b)
	if err != nil {
		t.Fatalf("%s: %v", composeFile, err)
	}
	return p
}

// TestComposeFileValid loads docker-compose.yml, and shows that the same
// loading refuses the file with a misspelt attribute or a malformed value.
func TestComposeFileValid(t *testing.T) {
	p := project(t)
	if len(p.Services) < 7 {
		t.Fatalf("%d services loaded, want the whole shape: %v", len(p.Services), slices.Sorted(maps.Keys(p.Services)))
	}
	b, err := os.ReadFile(composeFile)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range []struct{ old, new, why string }{
		{"  migrate:\n    build: .\n", "  migrate:\n    biuld: .\n    build: .\n", "an attribute the specification does not have"},
		{"stop_grace_period: 40s", "stop_grace_period: forty seconds", "a duration that is not one"},
		{"condition: service_completed_successfully", "condition: service_finished", "a dependency condition that does not exist"},
		{"      - sluice-2-data:/var/lib/sluice\n", "      - sluice-3-data:/var/lib/sluice\n", "a named volume that is not declared"},
	} {
		if !strings.Contains(string(b), m.old) {
			t.Fatalf("cannot break the file: %q not found", m.old)
		}
		broken := strings.Replace(string(b), m.old, m.new, 1)
		if _, err := loadCompose(composeFile, []byte(broken)); err == nil {
			t.Errorf("a compose file with %s (%q) loads", m.why, m.new)
		}
	}
}

var versionTag = regexp.MustCompile(`^v?\d+\.\d+\.\d+`)

// pinned reports why an image reference (a pulled image) does not name one
// exact version, or nil: a digest, or a tag of at least three numbers
// (1.2.3, v3.5.0, 24.8.14.39, 2.0.22-openssl).
func pinned(ref string) error {
	if _, digest, ok := strings.Cut(ref, "@"); ok {
		if strings.HasPrefix(digest, "sha256:") {
			return nil
		}
		return fmt.Errorf("digest %q is not sha256", digest)
	}
	name := ref[strings.LastIndex(ref, "/")+1:]
	_, tag, ok := strings.Cut(name, ":")
	switch {
	case !ok || tag == "":
		return fmt.Errorf("no tag: it means latest")
	case tag == "latest":
		return fmt.Errorf("tag latest moves")
	case !versionTag.MatchString(tag):
		return fmt.Errorf("tag %q is not an exact version (major.minor.patch)", tag)
	}
	return nil
}

func TestPinned(t *testing.T) {
	for ref, ok := range map[string]bool{
		"cassandra:5.0.9":                         true,
		"clickhouse/clickhouse-server:24.8.14.39": true,
		"prom/prometheus:v3.5.0":                  true,
		"eclipse-mosquitto:2.0.22-openssl":        true,
		"registry.local:5000/team/img:1.2.3":      true,
		"grafana/grafana@sha256:0123abcd":         true,
		"eclipse-mosquitto:2":                     false,
		"clickhouse/clickhouse-server:24.8":       false,
		"grafana/grafana":                         false,
		"grafana/grafana:latest":                  false,
		"registry.local:5000/team/img":            false,
		"cassandra:stable":                        false,
		"grafana/grafana@md5:0123":                false,
	} {
		if err := pinned(ref); (err == nil) != ok {
			t.Errorf("pinned(%q) = %v, want pinned %v", ref, err, ok)
		}
	}
}

// TestImagesPinned: every image pulled is an exact version; an image
// built here (build:) carries an explicit tag other than latest, and the
// Grafana plugins installed are pinned too.
func TestImagesPinned(t *testing.T) {
	p := project(t)
	for name, s := range p.Services {
		switch {
		case s.Build != nil:
			if _, tag, _ := strings.Cut(s.Image[strings.LastIndex(s.Image, "/")+1:], ":"); s.Image != "" && (tag == "" || tag == "latest") {
				t.Errorf("service %s builds image %q: give it an explicit tag other than latest", name, s.Image)
			}
		case s.Image == "":
			t.Errorf("service %s has neither image nor build", name)
		default:
			if err := pinned(s.Image); err != nil {
				t.Errorf("service %s: image %q is not pinned: %v", name, s.Image, err)
			}
		}
		if v := env(s, "GF_INSTALL_PLUGINS"); v != "" {
			for plugin := range strings.SplitSeq(v, ",") {
				fields := strings.Fields(plugin)
				if len(fields) != 2 || !versionTag.MatchString(fields[1]) {
					t.Errorf("service %s: plugin %q has no exact version (\"id 1.2.3\")", name, plugin)
				}
			}
		}
	}
}

// env returns a service's variable, "" when unset.
func env(s types.ServiceConfig, name string) string {
	if v := s.Environment[name]; v != nil {
		return *v
	}
	return ""
}

// sluiceVars returns a service's SLUICE_* variables.
func sluiceVars(s types.ServiceConfig) map[string]string {
	out := map[string]string{}
	for k, v := range s.Environment {
		if strings.HasPrefix(k, "SLUICE_") && v != nil {
			out[k] = *v
		}
	}
	return out
}

// unknownSluiceVars loads the configuration as the image does (its
// configs/ingest.yaml, then these variables) and returns, sorted, the
// SLUICE_* variables that set no key. The loader passes over those without
// a word (SLUICE_URL and the like belong to the query tool), so a misspelt
// variable would leave its key at the default. A value the loader refuses
// is an error.
func unknownSluiceVars(vars map[string]string) ([]string, error) {
	var list []string
	for k, v := range vars {
		list = append(list, k+"="+v)
	}
	_, loaded, err := config.LoadSources(config.Sources{File: imageConfig, Env: list})
	if err != nil {
		return nil, err
	}
	used := map[string]bool{}
	for _, origin := range loaded.Origin {
		if name, ok := strings.CutPrefix(origin, "env "); ok {
			used[name] = true
		}
	}
	var unknown []string
	for k := range vars {
		if !used[k] {
			unknown = append(unknown, k)
		}
	}
	slices.Sort(unknown)
	return unknown, nil
}

// TestSluiceVariablesAreKeys checks every SLUICE_* variable the compose
// file sets with the gateway's own loader, and that a misspelt variable and
// a bad value are caught.
func TestSluiceVariablesAreKeys(t *testing.T) {
	p := project(t)
	checked := 0
	for name, s := range p.Services {
		vars := sluiceVars(s)
		if len(vars) == 0 {
			continue
		}
		checked++
		unknown, err := unknownSluiceVars(vars)
		if err != nil {
			t.Errorf("service %s: the gateway refuses its configuration: %v", name, err)
		}
		if len(unknown) > 0 {
			t.Errorf("service %s sets variables that are no configuration key: %v", name, unknown)
		}
	}
	if checked < 3 {
		t.Fatalf("only %d services set SLUICE_* variables; want migrate and two gateways", checked)
	}

	gw := sluiceVars(p.Services["sluice-1"])
	gw["SLUICE_BUCKETS_WRITERID"] = "3"
	if unknown, err := unknownSluiceVars(gw); err != nil || !slices.Equal(unknown, []string{"SLUICE_BUCKETS_WRITERID"}) {
		t.Errorf("misspelt variable: unknown %v, err %v; want it reported", unknown, err)
	}
	delete(gw, "SLUICE_BUCKETS_WRITERID")
	gw["SLUICE_BUCKETS_WRITER_ID"] = "300"
	if _, err := unknownSluiceVars(gw); err == nil || !strings.Contains(err.Error(), "buckets.writer_id") {
		t.Errorf("writer id 300: err %v, want buckets.writer_id refused", err)
	}
}

// gateways returns the services that run the gateway (command serve),
// sorted by name, and the one-shot migration.
func gateways(t *testing.T, p *types.Project) ([]types.ServiceConfig, types.ServiceConfig) {
	t.Helper()
	var gws, migrates []types.ServiceConfig
	for _, name := range slices.Sorted(maps.Keys(p.Services)) {
		s := p.Services[name]
		switch {
		case len(s.Command) > 0 && s.Command[0] == "serve":
			gws = append(gws, s)
		case len(s.Command) > 0 && s.Command[0] == "migrate":
			migrates = append(migrates, s)
		}
	}
	if len(gws) < 2 || len(migrates) != 1 {
		t.Fatalf("%d gateways (command serve) and %d migrations (command migrate); want at least 2 and 1", len(gws), len(migrates))
	}
	return gws, migrates[0]
}

// TestComposeShape checks what the issue asks of the shape: two gateways
// with their own writer ids and MQTT client ids in one shared
// subscription, started after the schema is migrated, each with a named
// volume at its data_dir; healthchecks; every file mounted exists; the
// gateways share one cursor key.
func TestComposeShape(t *testing.T) {
	p := project(t)
	gws, migrate := gateways(t, p)
	if migrate.Restart != "no" {
		t.Errorf("service %s restarts (%q): a migration runs once", migrate.Name, migrate.Restart)
	}
	writers, clients, volumes := map[string]string{}, map[string]string{}, map[string]string{}
	group, keyFile := env(gws[0], "SLUICE_MQTT_SHARED_GROUP"), env(gws[0], "SLUICE_READ_CURSOR_KEY_FILE")
	if group == "" || keyFile == "" {
		t.Fatalf("gateway %s: SLUICE_MQTT_SHARED_GROUP %q, SLUICE_READ_CURSOR_KEY_FILE %q; want both set", gws[0].Name, group, keyFile)
	}
	for _, g := range gws {
		if g.Image != migrate.Image || g.Build == nil {
			t.Errorf("gateway %s runs image %q (build %v); the migration runs %q: want the one built here", g.Name, g.Image, g.Build != nil, migrate.Image)
		}
		if d, ok := g.DependsOn[migrate.Name]; !ok || d.Condition != types.ServiceConditionCompletedSuccessfully {
			t.Errorf("gateway %s does not wait for %s to complete successfully (depends_on %+v)", g.Name, migrate.Name, g.DependsOn)
		}
		w := env(g, "SLUICE_BUCKETS_WRITER_ID")
		if n, err := strconv.Atoi(w); err != nil || n < 1 || n > 255 {
			t.Errorf("gateway %s: SLUICE_BUCKETS_WRITER_ID %q, want 1-255", g.Name, w)
		} else if other, dup := writers[w]; dup {
			t.Errorf("gateways %s and %s share writer id %s", other, g.Name, w)
		}
		writers[w] = g.Name
		c := env(g, "SLUICE_MQTT_CLIENT_ID")
		if other, dup := clients[c]; c == "" || dup {
			t.Errorf("gateway %s: MQTT client id %q empty or shared with %s", g.Name, c, other)
		}
		clients[c] = g.Name
		for k, want := range map[string]string{"SLUICE_MQTT_ENABLED": "true", "SLUICE_STORE_BACKEND": "cassandra",
			"SLUICE_MQTT_SHARED_GROUP": group, "SLUICE_READ_CURSOR_KEY_FILE": keyFile} {
			if got := env(g, k); got != want {
				t.Errorf("gateway %s: %s=%q, want %q", g.Name, k, got, want)
			}
		}
		if !slices.ContainsFunc(g.Secrets, func(s types.ServiceSecretConfig) bool {
			return s.Target == keyFile || "/run/secrets/"+s.Source == keyFile
		}) {
			t.Errorf("gateway %s: no secret mounted at the cursor key file %s", g.Name, keyFile)
		}
		dataDir := env(g, "SLUICE_DATA_DIR")
		i := slices.IndexFunc(g.Volumes, func(v types.ServiceVolumeConfig) bool { return v.Target == dataDir })
		switch {
		case dataDir == "" || i < 0:
			t.Errorf("gateway %s: nothing mounted at its data_dir %q", g.Name, dataDir)
		case g.Volumes[i].Type != types.VolumeTypeVolume || p.Volumes[g.Volumes[i].Source].Name == "":
			t.Errorf("gateway %s: data_dir %s is a %s mount of %q, want a named volume", g.Name, dataDir, g.Volumes[i].Type, g.Volumes[i].Source)
		default:
			if other, dup := volumes[g.Volumes[i].Source]; dup {
				t.Errorf("gateways %s and %s share volume %s", other, g.Name, g.Volumes[i].Source)
			}
			volumes[g.Volumes[i].Source] = g.Name
		}
		if hc := g.HealthCheck; hc == nil || !slices.Equal(hc.Test, []string{"CMD", "/usr/local/bin/ingest", "healthcheck"}) {
			t.Errorf("gateway %s: healthcheck %+v, want the gateway's own `ingest healthcheck`", g.Name, hc)
		}
	}
	for name, s := range p.Services {
		if name != migrate.Name && (s.HealthCheck == nil || s.HealthCheck.Disable || len(s.HealthCheck.Test) == 0) {
			t.Errorf("service %s has no healthcheck", name)
		}
		for _, v := range s.Volumes {
			if v.Type != types.VolumeTypeBind {
				continue
			}
			if _, err := os.Stat(v.Source); err != nil {
				t.Errorf("service %s mounts %s, which is missing: %v", name, v.Source, err)
			}
		}
	}
	for name, s := range p.Secrets {
		if b, err := os.ReadFile(s.File); err != nil || len(strings.TrimSpace(string(b))) < 32 {
			t.Errorf("secret %s: file %s: %v, %d bytes; want a key of at least 32 bytes", name, s.File, err, len(strings.TrimSpace(string(b))))
		}
	}
}

// TestPrometheusScrapesGateways: prometheus.yml is valid for promtool
// (rules included), scrapes every gateway of the compose file on its HTTP
// port, and is mounted beside the rules it loads.
func TestPrometheusScrapesGateways(t *testing.T) {
	if out, err := promtool(t, "check", "config", prometheusConfig); err != nil {
		t.Errorf("promtool check config %s: %v\n%s", prometheusConfig, err, out)
	}
	b, err := os.ReadFile(prometheusConfig)
	if err != nil {
		t.Fatal(err)
	}
	var cfg struct {
		RuleFiles     []string `yaml:"rule_files"`
		ScrapeConfigs []struct {
			StaticConfigs []struct {
				Targets []string `yaml:"targets"`
			} `yaml:"static_configs"`
		} `yaml:"scrape_configs"`
	}
	if err := yaml.Unmarshal(b, &cfg); err != nil {
		t.Fatal(err)
	}
	var targets []string
	for _, sc := range cfg.ScrapeConfigs {
		for _, st := range sc.StaticConfigs {
			targets = append(targets, st.Targets...)
		}
	}
	p := project(t)
	gws, _ := gateways(t, p)
	for _, g := range gws {
		_, port, err := net.SplitHostPort(env(g, "SLUICE_HTTP_ADDR"))
		if err != nil {
			t.Fatalf("gateway %s: SLUICE_HTTP_ADDR: %v", g.Name, err)
		}
		if want := net.JoinHostPort(g.Name, port); !slices.Contains(targets, want) {
			t.Errorf("prometheus.yml does not scrape gateway %s (%s); targets %v", g.Name, want, targets)
		}
	}
	// The rules are loaded relative to the configuration file: both must be
	// mounted in one directory of the prometheus container.
	mounts := map[string]string{}
	for _, v := range p.Services["prometheus"].Volumes {
		mounts[filepath.Base(v.Source)] = v.Target
	}
	cfgTarget, ok := mounts[filepath.Base(prometheusConfig)]
	if !ok {
		t.Fatalf("the prometheus service does not mount %s", prometheusConfig)
	}
	for _, rf := range cfg.RuleFiles {
		if got := mounts[filepath.Base(rf)]; got != path.Join(path.Dir(cfgTarget), rf) {
			t.Errorf("rule file %s is mounted at %q, want %s", rf, got, path.Join(path.Dir(cfgTarget), rf))
		}
	}
}

// datasource is a provisioned Grafana data source.
type datasource struct {
	Name     string         `yaml:"name"`
	UID      string         `yaml:"uid"`
	Type     string         `yaml:"type"`
	URL      string         `yaml:"url"`
	JSONData map[string]any `yaml:"jsonData"`
}

// datasources reads Grafana's provisioned data sources, by uid.
func datasources(t *testing.T) map[string]datasource {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(datasourcesDir, "*.yml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no data source files in %s (%v)", datasourcesDir, err)
	}
	out := map[string]datasource{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var doc struct {
			Datasources []datasource `yaml:"datasources"`
		}
		if err := yaml.Unmarshal(b, &doc); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		for _, d := range doc.Datasources {
			out[d.UID] = d
		}
	}
	return out
}

// TestGrafanaDatasources: the ClickHouse data source reads the database the
// gateways write, on the server and port they write to, and the Prometheus
// one is the compose file's Prometheus.
func TestGrafanaDatasources(t *testing.T) {
	p := project(t)
	gws, _ := gateways(t, p)
	host, port, err := net.SplitHostPort(env(gws[0], "SLUICE_ROLLUPS_CLICKHOUSE_ADDR"))
	if err != nil {
		t.Fatalf("SLUICE_ROLLUPS_CLICKHOUSE_ADDR: %v", err)
	}
	database := cmp.Or(env(gws[0], "SLUICE_ROLLUPS_CLICKHOUSE_DATABASE"), config.Default().Rollups.ClickHouse.Database)
	var ch, prom int
	for uid, d := range datasources(t) {
		switch d.Type {
		case "grafana-clickhouse-datasource":
			ch++
			got := fmt.Sprint(d.JSONData["host"], ":", d.JSONData["port"], "/", d.JSONData["defaultDatabase"], " ", d.JSONData["protocol"])
			if want := host + ":" + port + "/" + database + " native"; got != want {
				t.Errorf("data source %s reads %s, the gateways write %s", uid, got, want)
			}
		case "prometheus":
			prom++
			if _, ok := p.Services["prometheus"]; !ok || d.URL != "http://prometheus:9090" {
				t.Errorf("data source %s: url %q, want the prometheus service (http://prometheus:9090)", uid, d.URL)
			}
		}
	}
	if ch != 1 || prom != 1 {
		t.Errorf("%d ClickHouse and %d Prometheus data sources provisioned, want one each", ch, prom)
	}
}

// promtool runs Prometheus's promtool, or stops the test (skips; fails
// under CI=true) when it is not installed.
func promtool(t *testing.T, args ...string) ([]byte, error) {
	t.Helper()
	p, err := exec.LookPath("promtool")
	if err != nil {
		testenv.Missing(t, "promtool not found (it checks deploy/prometheus/prometheus.yml); install it with: bash scripts/servers.sh tools")
	}
	return exec.Command(p, args...).CombinedOutput()
}
