// Command sluice is Sluice's one binary. Every subcommand that touches a
// store takes --store URL ("memory", the default, or redis://...).
//
//	sluice replay [--store URL] < events.jsonl
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"sort"
	"strings"

	"syscall"

	"github.com/sluicehq/sluice/internal/yamlfile"
	"github.com/sluicehq/sluice/server"
)

// env is what a subcommand gets from the process.
type env struct {
	stdin          io.Reader
	stdout, stderr io.Writer
}

type command struct {
	summary string
	run     func(ctx context.Context, e env, args []string) int
}

// commands maps each subcommand to its implementation, one file each.
var commands = map[string]command{
	"replay": {"apply JSON-lines decision events to a store, print one result line each", runReplay},

	"serve":        {"serve decisions over HTTP/JSON and Envoy's gRPC rate limit service", runServe},
	"import-envoy": {"convert envoyproxy/ratelimit configuration files to limits.yaml", runImportEnvoy},

	"validate": {"check limits.yaml files, print every error with its position", runValidate},
	"explain":  {"show the keys, hash slots and limits a request path hits in limits.yaml", runExplain},

	"queue": {"a bounded admission queue on Redis Streams: define, add, stats, work, dead letters", runQueue},

	"sim": {"fire traffic scenarios at several strategies, chart what got through", runSim},

	"version": {"print the version of sluice (also: sluice --version)", runVersion},
}

func main() {
	if filepath.Base(os.Args[0]) == guardName {
		os.Exit(runGuard())
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	args := os.Args[1:]
	if isEnvoyName() { // envoyproxy/ratelimit's /bin/ratelimit: its variables
		args = append([]string{"serve", "--envoy-env"}, args...)
	}
	os.Exit(run(ctx, env{os.Stdin, os.Stdout, os.Stderr}, args))
}

func run(ctx context.Context, e env, args []string) int {
	if len(args) > 0 && (args[0] == "--version" || args[0] == "-version") {
		return runVersion(ctx, e, nil)
	}
	if len(args) == 2 && args[0] == "help" {
		args = []string{args[1], "-h"} // sluice help serve: serve's help
	}
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		usage(e.stderr)
		if len(args) == 0 {
			return 2
		}
		return 0
	}
	c, ok := commands[args[0]]
	if !ok {
		names := make([]string, 0, len(commands))
		for n := range commands {
			names = append(names, n)
		}
		fmt.Fprintf(e.stderr, "sluice: unknown command %q%s; sluice -h lists the commands\n", args[0], yamlfile.DidYouMean(args[0], names, ""))
		return 2
	}
	return c.run(ctx, e, args[1:])
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "usage: sluice <command> [flags]\n\ncommands:")
	names := make([]string, 0, len(commands))
	for n := range commands {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(w, "  %-14s %s\n", n, commands[n].summary)
	}
	fmt.Fprintln(w, "\nRun 'sluice <command> -h' for a command's flags.")
}

// newFlags makes a subcommand's flag set: -h prints usage, then the flags.
func newFlags(e env, name, usage string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(e.stderr)
	fs.Usage = func() {
		fmt.Fprintln(e.stderr, usage)
		fs.PrintDefaults()
	}
	return fs
}

// parseFlags parses a subcommand's flags. -h and --help print its usage
// and exit 0; a bad flag exits 2 with one line that says what is wrong
// and, for a misspelt flag, which was meant (not the whole usage, which
// would bury it).
func parseFlags(fs *flag.FlagSet, args []string) (code int, ok bool) {
	usage, out := fs.Usage, fs.Output()
	fs.Usage = func() {}
	fs.SetOutput(io.Discard)
	err := fs.Parse(args)
	fs.Usage = usage
	fs.SetOutput(out)
	switch {
	case err == nil:
		return 0, true
	case errors.Is(err, flag.ErrHelp):
		usage()
		return 0, false
	}
	msg := err.Error()
	if name, found := strings.CutPrefix(msg, "flag provided but not defined: -"); found {
		var names []string
		fs.VisitAll(func(f *flag.Flag) { names = append(names, f.Name) })
		msg += yamlfile.DidYouMean(strings.TrimLeft(name, "-"), names, "--")
	}
	fmt.Fprintf(out, "sluice %s: %s; sluice %s -h lists its flags\n", fs.Name(), msg, fs.Name())
	return 2, false
}

func runVersion(_ context.Context, e env, args []string) int {
	fs := newFlags(e, "version", "usage: sluice version\n\nPrints the module version, VCS revision and Go version sluice was built with.")
	if code, ok := parseFlags(fs, args); !ok {
		return code
	}
	fmt.Fprintln(e.stdout, "sluice", server.Version(), runtime.Version())
	return 0
}
