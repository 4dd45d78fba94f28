package main

import (
	"encoding/json"
	"errors"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/mod/sumdb/note"

	"github.com/sluicehq/sluice/internal/audit/auditlog"
	"github.com/sluicehq/sluice/internal/audit/tree"
)

// The tests here read the help a user reads and run every command with
// every flag it names, so that help cannot promise a flag (or a flag value)
// that a command refuses. Commands point at a gateway that refuses
// connections: a flag the command accepts then ends in a connection error,
// a flag it refuses in a usage error.

// refusedURL is a gateway address where nothing listens.
const refusedURL = "http://127.0.0.1:1"

// required are the flags (and arguments) each command needs to get past
// its own checks. A command missing here fails the test.
var required = map[string][]string{
	"readings":        {"--device", "pump-17"},
	"audit":           {"--stream", "billing-api"},
	"partitions":      {"--device", "pump-17", "--day", "2026-11-22"},
	"rollups":         {"--device", "pump-17", "--metric", "temp"},
	"rollups rebuild": {"--from", "-2h", "--to", "-1h"},
	"rollups verify":  {"--day", "2026-11-22"},
	"top":             {"--metric", "temp"},
	"sql":             {"--clickhouse", "127.0.0.1:1"},
	"deadletters":     {},
	// file:NAME is a file the test writes (auditFiles).
	"audit checkpoint":   {"--stream", "billing-api"},
	"audit checkpoints":  {"--stream", "billing-api"},
	"audit proof":        {"--stream", "billing-api", "--day", "2026-11-20", "--event-id", "evt-123"},
	"audit consistency":  {"--stream", "billing-api", "--old", "file:checkpoint"},
	"audit verify-proof": {"--proof", "file:proof", "--keys", "file:export"},
	"audit verify":       {"--stream", "billing-api"},
}

// positional are the arguments that follow the flags.
var positional = map[string][]string{"sql": {"SELECT 1"}}

// samples are valid values of the flags that help names without listing
// their values. A flag named by help but missing here fails the test.
var samples = map[string]string{
	"device": "pump-18", "stream": "audit-stream", "metric": "rpm", "day": "2026-11-21",
	"from": "-3h", "to": "-1h", "limit": "5", "cursor": "opaque", "max-rows": "5",
	"url": refusedURL, "token": "t", "timeout": "5s", "urls": refusedURL + ",http://127.0.0.1:2",
	"tenant": "acme", "config": "", // config: set by the test to a file
	"step": "1h", "by": "mean", "width": "40", "height": "5", "format": "json",
	"clickhouse": "127.0.0.1:1", "database": "sluice", "user": "default",
	"event-id": "evt-7", "size": "3", "old": "2", "new": "file:checkpoint", "proof": "file:proof",
	"old-checkpoint": "file:checkpoint", "keys": "file:keys", "checkpoints": "file:export",
	"key": "", // key: set by the test to the verifier key of auditFiles
}

// commandSamples replace samples for one command: the audit log commands
// take days, not times.
var commandSamples = map[string]map[string]string{
	"audit checkpoints": {"from": "2026-11-20", "to": "2026-11-21"},
	"audit verify":      {"from": "2026-11-20", "to": "2026-11-21"},
}

// boolFlags take no value.
var boolFlags = map[string]bool{"all": true, "direct": true, "largest": true, "hottest": true, "audit": true}

// companions are flags that only apply together with others.
var companions = map[string][]string{
	"max-rows": {"--all"},
	"direct":   {"--tenant", "acme"},
	"tenant":   {"--direct"},
	"config":   {"--direct", "--tenant", "acme"},
	"audit":    {"--largest"},
	"urls":     {"--hottest"},
}

// exclusive names, for a flag, the flag it replaces in required.
var exclusive = map[string]string{"stream": "device", "device": "stream", "largest": "device", "hottest": "device", "audit": "device", "urls": "device",
	"key": "keys"}

var (
	flagName = regexp.MustCompile(`--([a-z][a-z-]*)`)
	// Values are literals (table|csv|json); SIZE|FILE are placeholders.
	flagValues = regexp.MustCompile(`--([a-z][a-z-]*) ([a-z0-9.]+(?:\|[a-z0-9.]+)+)\b`)
	listSep    = regexp.MustCompile(`, (?:and )?| and `)
	listValues = regexp.MustCompile(`^[a-z0-9]+(?:, [a-z0-9]+)* or [a-z0-9]+$`)
)

// namedFlags is what help says of one command: the flags it names and, for
// some, the values it lists.
type namedFlags map[string][]string

func (n namedFlags) add(name string, values ...string) {
	for _, v := range values {
		if !slices.Contains(n[name], v) {
			n[name] = append(n[name], v)
		}
	}
	if _, ok := n[name]; !ok {
		n[name] = nil
	}
}

// commonFlags reads the "Flags …:" sections of the top-level help and
// returns, per command, the flags (and values) they promise it.
func commonFlags(t *testing.T, help string, names []string) map[string]namedFlags {
	t.Helper()
	out := make(map[string]namedFlags)
	for _, n := range names {
		out[n] = namedFlags{}
	}
	var applies []string
	for line := range strings.Lines(help) {
		line = strings.TrimRight(line, "\n")
		switch {
		case strings.HasPrefix(line, "Flags "):
			applies = sectionCommands(t, line, names)
		case line == "":
			applies = nil
		case applies != nil:
			m := flagName.FindStringSubmatch(line)
			if m == nil || !strings.HasPrefix(strings.TrimSpace(line), "--") {
				t.Fatalf("top-level help: line %q in a flags section names no flag", line)
			}
			// "--format FORMAT  table, csv or json (default table)": the
			// values are listed before the parenthesis.
			l, desc := strings.TrimSpace(line), ""
			if i := strings.Index(l, "  "); i >= 0 {
				desc = strings.TrimSpace(l[i:])
			}
			if j := strings.Index(desc, " ("); j >= 0 {
				desc = desc[:j]
			}
			var values []string
			if listValues.MatchString(desc) {
				values = strings.FieldsFunc(strings.ReplaceAll(desc, " or ", ", "), func(r rune) bool { return r == ',' || r == ' ' })
			}
			for _, c := range applies {
				out[c].add(m[1], values...)
			}
		}
	}
	return out
}

// sectionCommands says which commands a "Flags …:" header speaks of.
func sectionCommands(t *testing.T, header string, names []string) []string {
	t.Helper()
	h := strings.TrimSuffix(header, ":")
	if i := strings.Index(h, " ("); i >= 0 {
		h = h[:i]
	}
	switch {
	case h == "Flags every command takes":
		return names
	case strings.HasPrefix(h, "Flags every command but ") && strings.HasSuffix(h, " takes"):
		// "but sql and audit verify-proof": names of one or two words.
		but := listSep.Split(strings.TrimSuffix(strings.TrimPrefix(h, "Flags every command but "), " takes"), -1)
		for _, b := range but {
			if !slices.Contains(names, b) {
				t.Fatalf("top-level help: %q excepts %q, not a command", header, b)
			}
		}
		return slices.DeleteFunc(slices.Clone(names), func(n string) bool { return slices.Contains(but, n) })
	case strings.HasPrefix(h, "Flags of "):
		var out []string
		for _, w := range strings.Fields(strings.ReplaceAll(strings.TrimPrefix(h, "Flags of "), ",", " ")) {
			if w == "and" {
				continue
			}
			if !slices.Contains(names, w) {
				t.Fatalf("top-level help: %q names %q, not a command", header, w)
			}
			out = append(out, w)
		}
		return out
	}
	t.Fatalf("top-level help: cannot tell which commands %q speaks of", header)
	return nil
}

// helpFlags returns what help says of each command: the top-level
// sections, and every --flag in the command's own help (usage line, about,
// flags and examples), with the values its usage line lists (a|b|c).
func helpFlags(t *testing.T) map[string]namedFlags {
	t.Helper()
	var names []string
	for _, c := range commands() {
		names = append(names, c.name)
	}
	top, _, err := query(t, "help")
	if err != nil {
		t.Fatal(err)
	}
	out := commonFlags(t, top, names)
	for _, name := range names {
		h, _, err := query(t, append([]string{"help"}, strings.Fields(name)...)...)
		if err != nil {
			t.Fatalf("query help %s: %v", name, err)
		}
		for _, m := range flagName.FindAllStringSubmatch(h, -1) {
			out[name].add(m[1])
		}
		for _, m := range flagValues.FindAllStringSubmatch(h, -1) {
			out[name].add(m[1], strings.Split(m[2], "|")...)
		}
	}
	return out
}

// auditFiles writes the files the audit commands read into a temporary
// directory: a signed checkpoint, a proof that does not hold, an export
// and a key list (file:NAME in required and samples). It returns them, the
// verifier key that signed the checkpoint, and the directory.
func auditFiles(t *testing.T) (files map[string]string, vkey, dir string) {
	t.Helper()
	skey, vkey, err := note.GenerateKey(nil, "audit.example.com")
	if err != nil {
		t.Fatal(err)
	}
	signer, err := note.NewSigner(skey)
	if err != nil {
		t.Fatal(err)
	}
	cp, err := auditlog.SignCheckpoint(tree.Checkpoint{Origin: "audit.example.com/acme/billing-api", Size: 3, Root: tree.EmptyRoot}, signer)
	if err != nil {
		t.Fatal(err)
	}
	export, err := json.Marshal(auditlog.Export{Origin: "audit.example.com/acme/billing-api", PublicKeys: []string{vkey}, Days: []auditlog.DayRecord{}})
	if err != nil {
		t.Fatal(err)
	}
	dir = t.TempDir()
	files = make(map[string]string)
	for name, content := range map[string]string{
		"checkpoint": string(cp),
		// A proof of nothing: verify-proof reads it and finds it does not hold.
		"proof":  "c2sp.org/tlog-proof@v1\nindex 0\n",
		"export": string(export),
		"keys":   vkey + "\n",
	} {
		files[name] = filepath.Join(dir, name)
		if err := os.WriteFile(files[name], []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return files, vkey, dir
}

// argsWith returns the command line that runs name with flag set to value.
// flags are the flags help names for name; files holds the file:NAME
// files, and "config" the gateway configuration.
func argsWith(name string, flags namedFlags, flag, value string, files map[string]string) []string {
	args := argsWithout(name, flags, flag, value, files["config"])
	for i, a := range args {
		if f, ok := strings.CutPrefix(a, "file:"); ok {
			args[i] = files[f]
		}
	}
	return args
}

func argsWithout(name string, flags namedFlags, flag, value, configFile string) []string {
	args := strings.Fields(name)
	req := required[name]
	skip := map[string]bool{flag: true, exclusive[flag]: true}
	for i := 0; i < len(req); i += 2 {
		if !skip[strings.TrimPrefix(req[i], "--")] {
			args = append(args, req[i], req[i+1])
		}
	}
	var extra []string
	for _, c := range companions[flag] {
		if _, named := flags[strings.TrimPrefix(c, "--")]; named || !strings.HasPrefix(c, "--") {
			extra = append(extra, c)
		}
	}
	switch {
	case boolFlags[flag]:
		args = append(args, "--"+flag)
	case flag == "config":
		args = append(args, "--config", configFile)
	default:
		args = append(args, "--"+flag, value)
	}
	args = append(args, extra...)
	direct := slices.Contains(args, "--direct")
	if direct && !slices.Contains(args, "--config") {
		args = append(args, "--config", configFile)
	}
	// A command that reads no gateway (help names no --url) gets none.
	if _, gw := flags["url"]; gw && !direct {
		for _, f := range []string{"url", "token"} {
			// --urls replaces --url.
			if flag != f && (flag != "urls" || f != "url") {
				args = append(args, "--"+f, samples[f])
			}
		}
	}
	return append(args, positional[name]...)
}

// TestHelpFlagsAccepted runs every command with every flag its help names,
// once per value help lists for it, and fails on a usage error.
func TestHelpFlagsAccepted(t *testing.T) {
	// --direct reads the store a gateway configuration names; with the
	// embedded store it answers that direct mode needs Cassandra, which is
	// no usage error: the flags were accepted.
	configFile := filepath.Join(t.TempDir(), "ingest.yaml")
	if err := os.WriteFile(configFile, []byte("store:\n  backend: pebble\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	files, vkey, _ := auditFiles(t)
	files["config"] = configFile
	samples["key"] = vkey
	now := time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC)
	all := helpFlags(t)
	for _, name := range slices.Sorted(maps.Keys(all)) {
		flags := all[name]
		if _, ok := required[name]; !ok {
			t.Errorf("command %q: add its required flags to the test's table", name)
			continue
		}
		if len(flags) == 0 {
			t.Errorf("command %q: help names no flag", name)
		}
		for _, flag := range slices.Sorted(maps.Keys(flags)) {
			values := flags[flag]
			if len(values) == 0 {
				v, ok := samples[flag]
				if cv, cok := commandSamples[name][flag]; cok {
					v, ok = cv, true
				}
				if !ok && !boolFlags[flag] {
					t.Errorf("command %q: help names --%s: add a sample value to the test", name, flag)
					continue
				}
				values = []string{v}
			}
			for _, v := range values {
				args := argsWith(name, flags, flag, v, files)
				_, url := flags["url"]
				_, ch := flags["clickhouse"]
				online := url || ch
				t.Run(name+" --"+flag+" "+v, func(t *testing.T) {
					_, _, err := queryEnv(t, now, args...)
					checkRan(t, err, online)
				})
			}
		}
	}
}

// checkRan fails t if err is a usage error, or if a command that reads a
// gateway or ClickHouse (online) did not fail to reach it. A command that reads only
// files gets, from the test's files, a proof that does not hold.
func checkRan(t *testing.T, err error, online bool) {
	t.Helper()
	ue := (*usageError)(nil)
	switch {
	case errors.As(err, &ue):
		t.Errorf("usage error: %v", err)
	case online && err == nil:
		t.Errorf("error = nil, want a connection error (nothing listens on %s)", refusedURL)
	case !online && !errors.Is(err, errAuditBad):
		t.Errorf("error = %v, want the test's proof not to hold", err)
	}
}

// exampleFiles are the files the examples read, by the end of their name:
// the test writes them (auditFiles) in place of the ones an auditor has.
var exampleFiles = map[string]string{".checkpoint": "checkpoint", ".proof": "proof", ".json": "export"}

// TestHelpExamplesRun runs every example help shows (without the shell
// redirections) against a gateway that refuses connections: none may be a
// usage error. A file an example reads is one of the test's (exampleFiles);
// an example of a command that reads no gateway gets no --url.
func TestHelpExamplesRun(t *testing.T) {
	files, _, _ := auditFiles(t)
	now := time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC)
	n := 0
	for _, c := range commands() {
		h, _, err := query(t, append([]string{"help"}, strings.Fields(c.name)...)...)
		if err != nil {
			t.Fatalf("query help %s: %v", c.name, err)
		}
		online := strings.Contains(h, "--url") || strings.Contains(h, "--clickhouse")
		for _, ex := range c.examples {
			n++
			args := shellSplit(t, ex)
			if len(args) < 2 || args[0] != "query" {
				t.Errorf("example %q does not start with query", ex)
				continue
			}
			args = args[1:]
			for i, a := range args {
				for suffix, f := range exampleFiles {
					if i > 0 && strings.HasPrefix(args[i-1], "--") && strings.HasSuffix(a, suffix) {
						args[i] = files[f]
					}
				}
			}
			switch {
			case !online:
			case c.name == "sql":
				args = append([]string{"sql", "--clickhouse", "127.0.0.1:1"}, args[1:]...)
			default:
				// Connection flags go before the flags of a two-word
				// command's name, which are at the front.
				k := len(strings.Fields(c.name))
				conn := []string{"--url", refusedURL, "--token", "t"}
				// An example's gateways are replaced by refusing ones.
				if i := slices.Index(args, "--urls"); i >= 0 && i+1 < len(args) {
					args[i+1] = samples["urls"]
					conn = conn[2:]
				}
				args = append(append(slices.Clone(args[:k]), conn...), args[k:]...)
			}
			t.Run(ex, func(t *testing.T) {
				_, _, err := queryEnv(t, now, args...)
				checkRan(t, err, online)
			})
		}
	}
	if n == 0 {
		t.Fatal("no examples")
	}
}

// shellSplit splits an example command line into words: double quotes
// group, and a word starting with > ends the command.
func shellSplit(t *testing.T, s string) []string {
	t.Helper()
	var words []string
	for s = strings.TrimSpace(s); s != ""; s = strings.TrimSpace(s) {
		if s[0] == '>' {
			break
		}
		if s[0] == '"' {
			end := strings.IndexByte(s[1:], '"')
			if end < 0 {
				t.Fatalf("unbalanced quote in %q", s)
			}
			words = append(words, s[1:1+end])
			s = s[2+end:]
			continue
		}
		end := strings.IndexAny(s, " \t")
		if end < 0 {
			end = len(s)
		}
		words = append(words, s[:end])
		s = s[end:]
	}
	return words
}
