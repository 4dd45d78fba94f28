package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/sluicehq/sluice/internal/client"
)

// defaultURL is where the gateway listens unless told otherwise.
const defaultURL = "http://127.0.0.1:8080"

// flagSet is one command's flags. Parse errors and help are handled here;
// each command validates its values after parsing, naming the flag.
type flagSet struct {
	*flag.FlagSet
	cmd  command
	e    *env
	exec func(ctx context.Context) error
	set  map[string]bool
}

func newFlagSet(cmd command, e *env) *flagSet {
	fs := &flagSet{FlagSet: flag.NewFlagSet(cmd.name, flag.ContinueOnError), cmd: cmd, e: e}
	// Errors are reported by the caller, help is written by parse.
	fs.SetOutput(io.Discard)
	fs.exec = cmd.flags(fs, e)
	return fs
}

// parse parses args. It returns help=true (and no error) if help was asked
// for and written.
func (fs *flagSet) parse(args []string) (exec func(ctx context.Context) error, help bool, err error) {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			writeCommandHelp(fs.e.out, fs)
			return nil, true, nil
		}
		return nil, false, fs.usagef("%v", err)
	}
	if fs.NArg() > 0 && !fs.cmd.args {
		return nil, false, fs.usagef("unexpected argument %q (all arguments are flags)", fs.Arg(0))
	}
	fs.set = make(map[string]bool)
	fs.Visit(func(f *flag.Flag) { fs.set[f.Name] = true })
	return fs.exec, false, nil
}

// isSet reports whether the flag was given on the command line.
func (fs *flagSet) isSet(name string) bool { return fs.set[name] }

func (fs *flagSet) usagef(format string, args ...any) error {
	return usagef(fs.cmd.name, format, args...)
}

// writeCommandHelp writes a command's usage, flags and examples.
func writeCommandHelp(w io.Writer, fs *flagSet) {
	c := fs.cmd
	fmt.Fprintf(w, "Usage: query %s %s\n\n%s\n", c.name, c.synopsis, c.summary)
	if c.about != "" {
		fmt.Fprintf(w, "\n%s", c.about)
	}
	fmt.Fprintf(w, "\nFlags:\n")
	fs.VisitAll(func(f *flag.Flag) {
		name, usage := flag.UnquoteUsage(f)
		left := "--" + f.Name
		if name != "" {
			left += " " + name
		}
		if def := f.DefValue; def != "" && def != "0" && def != "false" {
			usage += fmt.Sprintf(" (default %s)", def)
		}
		fmt.Fprintf(w, "  %-22s %s\n", left, usage)
	})
	if len(c.examples) > 0 {
		fmt.Fprintf(w, "\nExamples:\n")
		for _, ex := range c.examples {
			fmt.Fprintf(w, "  %s\n", ex)
		}
	}
}

// connFlags are the flags that say how to reach the gateway.
type connFlags struct {
	url, token string
	timeout    time.Duration
	// Direct mode (direct.go): read Cassandra without a gateway.
	direct         bool
	tenant, config string
}

// connMode says whether a command can also run in direct mode.
type connMode int

const (
	gatewayOnly connMode = iota // the rollup commands: direct mode has no rollup store
	orDirect                    // readings, audit, partitions, deadletters
)

// addConnFlags adds --url, --token and --timeout, and with orDirect the
// direct-mode flags --direct, --tenant and --config.
func addConnFlags(fs *flagSet, mode connMode) *connFlags {
	c := &connFlags{}
	fs.StringVar(&c.url, "url", "", "gateway `URL` (env SLUICE_URL; default "+defaultURL+")")
	fs.StringVar(&c.token, "token", "", "bearer `TOKEN`; it selects the tenant (env SLUICE_TOKEN)")
	fs.DurationVar(&c.timeout, "timeout", 30*time.Second, "timeout of each HTTP request, a `DURATION` such as 30s or 2m")
	if mode == orDirect {
		fs.BoolVar(&c.direct, "direct", false, "read Cassandra directly, without a gateway, as configured by the gateway's configuration (--config, SLUICE_STORE_*)")
		fs.StringVar(&c.tenant, "tenant", "", "with --direct, the `TENANT` to read")
		fs.StringVar(&c.config, "config", "", "with --direct, the gateway configuration `FILE` (default ./configs/ingest.yaml if present; env SLUICE_* apply)")
	}
	return c
}

// formatAndClient validates --format, then the connection flags, and
// returns the format and a client: what every command that reads through
// the gateway starts with.
func (c *connFlags) formatAndClient(fs *flagSet, formatFlag string) (format, *client.Client, error) {
	f, err := parseFormat(fs, formatFlag)
	if err != nil {
		return f, nil, err
	}
	cl, err := c.client(fs)
	return f, cl, err
}

// client validates the connection flags, falling back on the environment,
// and returns a client. Busy answers are retried with a note on stderr.
func (c *connFlags) client(fs *flagSet) (*client.Client, error) {
	e := fs.e
	if c.direct {
		if c.tenant == "" {
			return nil, fs.usagef("--direct needs --tenant")
		}
		hc, token, err := directHTTP(context.Background(), c.config, c.tenant, c.timeout, os.Stderr)
		if err != nil {
			return nil, err
		}
		return client.NewClient("http://direct.invalid", token, hc)
	}
	if c.tenant != "" || c.config != "" {
		return nil, fs.usagef("--tenant and --config only apply with --direct")
	}
	return c.gatewayClient(fs, c.gatewayURL(e), "--url", "")
}

// gatewayURL is --url, else SLUICE_URL, else the default.
func (c *connFlags) gatewayURL(e *env) string {
	return cmp.Or(c.url, e.getenv("SLUICE_URL"), defaultURL)
}

// gatewayClient returns a client of the gateway at url, which flag named.
// A non-empty label starts the client's notes on stderr.
func (c *connFlags) gatewayClient(fs *flagSet, url, flag, label string) (*client.Client, error) {
	e := fs.e
	token := c.token
	if token == "" {
		token = e.getenv("SLUICE_TOKEN")
	}
	if token == "" {
		return nil, fs.usagef("no token: set --token or SLUICE_TOKEN")
	}
	if c.timeout <= 0 {
		return nil, fs.usagef("--timeout %v: must be positive", c.timeout)
	}
	cl, err := client.NewClient(url, token, &http.Client{Timeout: c.timeout})
	if err != nil {
		return nil, fs.usagef("%s: %v", flag, err)
	}
	cl.Retry = e.retry
	cl.Retry.Notify = func(err *client.APIError, wait time.Duration) {
		fmt.Fprintf(e.stderr, "query: %s%v; retrying in %v\n", label, err, wait)
	}
	return cl, nil
}

// format is how results are printed.
type format string

const (
	formatTable format = "table"
	formatCSV   format = "csv"
	formatJSON  format = "json"
)

func addFormatFlag(fs *flagSet) *string {
	return fs.String("format", string(formatTable), "output `FORMAT`: table, csv or json")
}

func parseFormat(fs *flagSet, s string) (format, error) {
	switch f := format(s); f {
	case formatTable, formatCSV, formatJSON:
		return f, nil
	}
	return "", fs.usagef("--format %q: want table, csv or json", s)
}

// rangeFlags select a time range and a page of it.
type rangeFlags struct {
	spanFlags
	cursor         string
	limit, maxRows int
	all            bool
}

// spanFlags are --from and --to.
type spanFlags struct{ from, to string }

// addSpanFlags adds --from and --to; required says so in their help.
func addSpanFlags(fs *flagSet, required bool) *spanFlags {
	s := &spanFlags{}
	s.add(fs, required)
	return s
}

func (s *spanFlags) add(fs *flagSet, required bool) {
	fromDefault, toDefault := "default 24h before --to", "default now"
	if required {
		fromDefault, toDefault = "required", "required"
	}
	fs.StringVar(&s.from, "from", "", "start of the range, inclusive: a `TIME` ("+fromDefault+")")
	fs.StringVar(&s.to, "to", "", "end of the range, exclusive: a `TIME` ("+toDefault+")")
}

// resolve turns --from and --to into times, to the millisecond: --to
// defaults to now and --from to 24 hours before --to.
func (s *spanFlags) resolve(fs *flagSet) (from, to time.Time, err error) {
	now := fs.e.now()
	to = now
	if s.to != "" {
		if to, err = parseTime(s.to, now); err != nil {
			return from, to, fs.usagef("--to %q: %v", s.to, err)
		}
	}
	from = to.Add(-24 * time.Hour)
	if s.from != "" {
		if from, err = parseTime(s.from, now); err != nil {
			return from, to, fs.usagef("--from %q: %v", s.from, err)
		}
	}
	from, to = from.Truncate(time.Millisecond), to.Truncate(time.Millisecond)
	if !from.Before(to) {
		return from, to, fs.usagef("--from (%s) must be before --to (%s)",
			from.UTC().Format(client.TimeFormat), to.UTC().Format(client.TimeFormat))
	}
	return from, to, nil
}

// defaultMaxRows bounds --all: a table of readings is built in memory
// before it is printed.
const defaultMaxRows = 100_000

func addRangeFlags(fs *flagSet) *rangeFlags {
	r := &rangeFlags{}
	r.spanFlags.add(fs, false)
	fs.IntVar(&r.limit, "limit", 0, "rows per page, `N` in 1..10000 (default: the server's, 1000)")
	fs.StringVar(&r.cursor, "cursor", "", "continue after the page that printed this `CURSOR`")
	fs.BoolVar(&r.all, "all", false, "follow cursors and print every page as one result (see --max-rows)")
	fs.IntVar(&r.maxRows, "max-rows", defaultMaxRows, "with --all, stop after at least `N` rows and print the cursor to go on")
	return r
}

// listFlags are the flags of the subcommands that list rows page by page:
// the range, the output format and the connection.
type listFlags struct {
	*rangeFlags
	format *string
	conn   *connFlags
}

func addListFlags(fs *flagSet) listFlags {
	return listFlags{rangeFlags: addRangeFlags(fs), format: addFormatFlag(fs), conn: addConnFlags(fs, orDirect)}
}

// resolve validates them, in that order, and returns a client.
func (l listFlags) resolve(fs *flagSet) (client.Range, format, *client.Client, error) {
	rng, err := l.rangeFlags.resolve(fs)
	if err != nil {
		return rng, "", nil, err
	}
	f, c, err := l.conn.formatAndClient(fs, *l.format)
	return rng, f, c, err
}

// resolve validates the flags and turns them into a client range.
func (r *rangeFlags) resolve(fs *flagSet) (client.Range, error) {
	var rng client.Range
	var err error
	if rng.From, rng.To, err = r.spanFlags.resolve(fs); err != nil {
		return rng, err
	}
	if fs.isSet("limit") && (r.limit < 1 || r.limit > client.MaxLimit) {
		return rng, fs.usagef("--limit %d: want 1..%d", r.limit, client.MaxLimit)
	}
	if fs.isSet("max-rows") && !r.all {
		return rng, fs.usagef("--max-rows only applies with --all")
	}
	if r.maxRows < 1 {
		return rng, fs.usagef("--max-rows %d: must be at least 1", r.maxRows)
	}
	rng.Limit, rng.Cursor = r.limit, r.cursor
	return rng, nil
}

// shellWord quotes s for a POSIX shell if it needs quoting, so that a
// printed "--cursor C" can be pasted back.
func shellWord(s string) string {
	if s != "" && strings.IndexFunc(s, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("-_.=:/+,@%", r))
	}) < 0 {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
