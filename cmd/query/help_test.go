package main

import (
	"errors"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"
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
var exclusive = map[string]string{"stream": "device", "device": "stream", "largest": "device", "hottest": "device", "audit": "device", "urls": "device"}

var (
	flagName   = regexp.MustCompile(`--([a-z][a-z-]*)`)
	flagValues = regexp.MustCompile(`--([a-z][a-z-]*) ([A-Za-z0-9.]+(?:\|[A-Za-z0-9.]+)+)`)
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
		but := strings.Fields(strings.TrimSuffix(strings.TrimPrefix(h, "Flags every command but "), " takes"))
		for _, b := range but {
			if b != "and" && !slices.Contains(names, strings.TrimSuffix(b, ",")) {
				t.Fatalf("top-level help: %q excepts %q, not a command", header, b)
			}
		}
		return slices.DeleteFunc(slices.Clone(names), func(n string) bool {
			return slices.Contains(but, n) || slices.Contains(but, n+",")
		})
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

// argsWith returns the command line that runs name with flag set to value.
// flags are the flags help names for name.
func argsWith(name string, flags namedFlags, flag, value, configFile string) []string {
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
	if name != "sql" && !direct {
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
				if !ok && !boolFlags[flag] {
					t.Errorf("command %q: help names --%s: add a sample value to the test", name, flag)
					continue
				}
				values = []string{v}
			}
			for _, v := range values {
				args := argsWith(name, flags, flag, v, configFile)
				t.Run(name+" --"+flag+" "+v, func(t *testing.T) {
					_, _, err := queryEnv(t, now, args...)
					if ue := (*usageError)(nil); errors.As(err, &ue) {
						t.Errorf("help names --%s for %q (value %q), but the command refuses it: %v", flag, name, v, err)
					} else if err == nil {
						t.Errorf("error = nil, want a connection error (nothing listens on %s)", refusedURL)
					}
				})
			}
		}
	}
}

// TestHelpExamplesRun runs every example help shows (without the shell
// redirections) against a gateway that refuses connections: none may be a
// usage error.
func TestHelpExamplesRun(t *testing.T) {
	now := time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC)
	n := 0
	for _, c := range commands() {
		for _, ex := range c.examples {
			n++
			args := shellSplit(t, ex)
			if len(args) < 2 || args[0] != "query" {
				t.Errorf("example %q does not start with query", ex)
				continue
			}
			args = args[1:]
			if c.name == "sql" {
				args = append([]string{"sql", "--clickhouse", "127.0.0.1:1"}, args[1:]...)
			} else {
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
				if ue := (*usageError)(nil); errors.As(err, &ue) {
					t.Errorf("example is a usage error: %v", err)
				} else if err == nil {
					t.Errorf("error = nil, want a connection error (nothing listens on %s)", refusedURL)
				}
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
