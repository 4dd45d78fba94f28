// Command query reads a Sluice gateway's data over its read API: readings,
// audit events and the partition catalogue, printed as a table, CSV or JSON.
//
// Each subcommand lives in its own file and is listed in commands(); adding
// one (deadletters, rollups, top, sql, …) means writing that file and adding
// a line there.
package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/sluicehq/sluice/internal/client"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	go func() {
		// After the first signal, restore the default handling so that a
		// second one ends the process at once.
		<-ctx.Done()
		stop()
	}()
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(report(os.Stderr, err))
}

// run executes the command line args (without the program name).
func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	return runEnv(ctx, &env{stdout: stdout, stderr: stderr, getenv: os.Getenv, now: time.Now, retry: client.DefaultRetry()}, args)
}

// env is what a subcommand may use of the outside world.
type env struct {
	stdout io.Writer
	stderr io.Writer
	getenv func(string) string
	now    func() time.Time
	retry  client.Retry

	// out buffers stdout; subcommands write results to it.
	out *bufio.Writer
}

// command is one subcommand.
type command struct {
	name     string
	synopsis string // flags as shown after "query <name>"
	summary  string // one line, for the command list
	about    string // a paragraph for the command's own help; optional
	examples []string
	// args: the command takes positional arguments (query sql "SELECT …").
	args bool
	// flags registers the command's flags on fs and returns the function
	// that runs it once fs has been parsed.
	flags func(fs *flagSet, e *env) func(ctx context.Context) error
}

// commands lists the subcommands in the order help shows them.
func commands() []command {
	return append([]command{
		readingsCommand(),
		auditCommand(),
		partitionsCommand(),
		rollupsCommand(),
		rollupsRebuildCommand(),
		rollupsVerifyCommand(),
		topCommand(),
		sqlCommand(),
		deadLettersCommand(),
	}, auditLogCommands()...)
}

func runEnv(ctx context.Context, e *env, args []string) error {
	e.out = bufio.NewWriter(e.stdout)
	err := dispatch(ctx, e, args)
	if ferr := e.out.Flush(); ferr != nil && err == nil {
		err = fmt.Errorf("write output: %w", ferr)
	}
	return err
}

func dispatch(ctx context.Context, e *env, args []string) error {
	if len(args) == 0 {
		writeHelp(e.stderr)
		return &usageError{err: errors.New("no command given")}
	}
	name, rest := args[0], args[1:]
	switch name {
	case "help", "-h", "-help", "--help":
		if name == "help" && len(rest) > 0 {
			// query help rollups verify: the two-word name first.
			cmd, ok := lookup(strings.Join(rest, " "))
			if !ok {
				return &usageError{err: fmt.Errorf("unknown command %q", strings.Join(rest, " "))}
			}
			fs := newFlagSet(cmd, e)
			writeCommandHelp(e.out, fs)
			return nil
		}
		writeHelp(e.out)
		return nil
	}
	cmd, ok := lookup(name)
	if len(rest) > 0 { // two-word commands: query rollups rebuild …
		if sub, found := lookup(name + " " + rest[0]); found {
			cmd, ok, rest = sub, true, rest[1:]
		}
	}
	if !ok {
		if strings.HasPrefix(name, "-") {
			return &usageError{err: fmt.Errorf("flags go after the command: query <command> %s …", name)}
		}
		return &usageError{err: fmt.Errorf("unknown command %q", name)}
	}
	fs := newFlagSet(cmd, e)
	exec, help, err := fs.parse(rest)
	if err != nil || help {
		return err
	}
	return exec(ctx)
}

func lookup(name string) (command, bool) {
	for _, c := range commands() {
		if c.name == name {
			return c, true
		}
	}
	return command{}, false
}

// usageError is a mistake on the command line; it exits with status 2.
type usageError struct {
	cmd string // the subcommand, or "" for the top level
	err error
}

func (e *usageError) Error() string { return e.err.Error() }
func (e *usageError) Unwrap() error { return e.err }

func usagef(cmd, format string, args ...any) error {
	return &usageError{cmd: cmd, err: fmt.Errorf(format, args...)}
}

// report prints err for the user and returns the exit status: 0 for
// success, 2 for a usage error, 1 for anything else.
func report(w io.Writer, err error) int {
	if err == nil {
		return 0
	}
	fmt.Fprintf(w, "query: %v\n", err)
	var ue *usageError
	if errors.As(err, &ue) {
		if ue.cmd != "" {
			fmt.Fprintf(w, "run 'query %s -h' for usage\n", ue.cmd)
		} else {
			fmt.Fprintln(w, "run 'query help' for usage")
		}
		return 2
	}
	return 1
}

func writeHelp(w io.Writer) {
	fmt.Fprint(w, `query reads data from a Sluice gateway's read API.

Usage:
  query <command> [flags]

Commands:
`)
	for _, c := range commands() {
		fmt.Fprintf(w, "  %-19s %s\n", c.name, c.summary)
	}
	fmt.Fprintf(w, "  %-19s %s\n", "help", "show this help, or a command's: query help <command>")
	fmt.Fprint(w, `
Flags every command takes:
  --format FORMAT  table, csv or json (default table)

Flags every command but sql and audit verify-proof takes (sql reads ClickHouse, verify-proof files):
  --url URL        gateway address (env SLUICE_URL; default `+defaultURL+`)
  --token TOKEN    bearer token; it selects the tenant (env SLUICE_TOKEN)
  --timeout DUR    timeout of each HTTP request (default 30s)

Flags of readings, audit, partitions and deadletters (read Cassandra without a gateway):
  --direct         read the store the gateway's configuration names, in this process
  --tenant TENANT  with --direct, the tenant to read
  --config FILE    with --direct, the gateway configuration (default ./configs/ingest.yaml)

Flags of partitions (with --hottest, which each gateway answers for its own writes):
  --urls URL,URL   every gateway of the cluster, asked at once and merged (env SLUICE_URLS)

`+timeHelp+`
Examples:
`)
	for _, c := range commands() {
		for _, ex := range c.examples {
			fmt.Fprintf(w, "  %s\n", ex)
		}
	}
	fmt.Fprint(w, `
Exit status: 0 on success, 1 on an error, 2 on a usage error.
Run 'query <command> -h' for a command's flags.
`)
}

const timeHelp = `Times (--from, --to): RFC 3339 (2026-11-22T10:00:00Z), a UTC date (2026-11-22),
epoch milliseconds, now, or relative to now: -30m, -1h, -7d, -2w, -1d12h.
--from is inclusive, --to exclusive; --to defaults to now, --from to 24h before --to.
`
