package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/algo"
	"github.com/sluicehq/sluice/internal/yamlfile"
	"github.com/sluicehq/sluice/sim"
	"github.com/sluicehq/sluice/store"
)

// listFlag collects a repeated flag.
type listFlag []string

func (l *listFlag) String() string     { return strings.Join(*l, " ") }
func (l *listFlag) Set(s string) error { *l = append(*l, s); return nil }

func runSim(ctx context.Context, e env, args []string) int {
	fs := flag.NewFlagSet("sim", flag.ContinueOnError)
	fs.SetOutput(e.stderr)
	scenario := fs.String("scenario", "zoo", "a built-in scenario (see below)")
	trace := fs.String("trace", "", "replay a recorded trace (sluice replay's JSON lines; the key is the caller) instead of a scenario")
	seed := fs.Uint64("seed", 1, "the seed: the same seed gives the same traffic")
	duration := fs.Duration("duration", 0, "the scenario's length (its default when 0)")
	rate := fs.Float64("rate", 0, "requests per second over all callers (the scenario's default when 0)")
	callers := fs.Int("callers", 0, "how many callers (the scenario's default when 0)")
	runFor := fs.Duration("hold", 0, "how long each admitted request runs: it is in flight, and holds its concurrency slots, that long (the scenario's default, else 200ms, when 0)")
	slice := fs.Duration("slice", time.Second, "the length of a slice of the series")
	storeURL := fs.String("store", "memory", "memory (virtual time: as fast as it decides) or redis://... (real time)")
	out := fs.String("out", "", "write series.csv, summary.json, chart.png, chart.svg, callers.png and report.html to this directory")
	var limits, policies listFlag
	fs.Var(&limits, "limit", `a strategy of one limit: NAME=each:SPEC (each caller's own) or NAME=shared:SPEC, SPEC as in replay, such as 'gate=each:{"algorithm":"gate","interval":"10s"}' (repeatable)`)
	fs.Var(&policies, "policy", "a strategy from a limits.yaml, such as your service's: NAME=FILE (repeatable); see --path for the path a caller's request takes")
	pathFlag := fs.String("path", "", "the path of a --policy's requests, {caller} the caller, such as api/{caller}; default caller/{caller} when the policy limits it, else its first limited node with a *, that * the caller (user/*/trade: user/{caller}/trade)")
	fs.Usage = func() {
		fmt.Fprintln(e.stderr, `usage: sluice sim [--scenario NAME | --trace FILE] [--limit ...] [--policy ...] [--out DIR]

Fires one traffic scenario at several strategies, on Sluice's own stores,
and prints per strategy what was offered and admitted; --out writes the
series, a summary, charts and a self-contained report.html. Without
--limit or --policy a scenario's own strategies run (zoo has three).

scenarios:`)
		for _, n := range slices.Sorted(maps.Keys(sim.Scenarios)) {
			sc := sim.Scenarios[n]
			fmt.Fprintf(e.stderr, "  %-8s %s\n", n, sc.Description)
		}
		fmt.Fprintln(e.stderr, "\nflags:")
		fs.PrintDefaults()
	}
	if code, ok := parseFlags(fs, args); !ok {
		return code
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(e.stderr, "sim: unexpected argument %q\n", fs.Arg(0))
		return 2
	}
	fail := func(err error) int {
		fmt.Fprintf(e.stderr, "sim: %s\n", strings.TrimPrefix(err.Error(), "sim: "))
		return 1
	}
	var sc sim.Scenario
	if *trace != "" {
		f, err := os.Open(*trace)
		if err != nil {
			return fail(err)
		}
		sc, err = sim.TraceScenario(*trace, f)
		f.Close()
		if err != nil {
			return fail(err)
		}
	} else {
		var ok bool
		if sc, ok = sim.Scenarios[*scenario]; !ok {
			return fail(fmt.Errorf("unknown scenario %q (want %s)", *scenario, strings.Join(slices.Sorted(maps.Keys(sim.Scenarios)), ", ")))
		}
	}
	var strategies []sim.Strategy
	for _, l := range limits {
		s, err := limitStrategy(l)
		if err != nil {
			return fail(fmt.Errorf("--limit %s: %w", l, err))
		}
		strategies = append(strategies, s)
	}
	for _, p := range policies {
		name, file, ok := strings.Cut(p, "=")
		if !ok || name == "" {
			return fail(fmt.Errorf("--policy %s: want NAME=FILE", p))
		}
		data, err := yamlfile.ReadFile(file)
		if err != nil {
			return fail(err)
		}
		s, err := sim.CompileStrategy(sim.StrategySource{Name: name, Policy: string(data)})
		if err != nil {
			return fail(err)
		}
		if *pathFlag != "" {
			if s.Path = strings.Split(*pathFlag, "/"); !slices.Contains(s.Path, "{caller}") {
				return fail(fmt.Errorf("--path %s: want a segment {caller}, such as api/{caller}", *pathFlag))
			}
		}
		if s.Path != nil {
			fmt.Fprintf(e.stderr, "sim: strategy %s: a request by caller c is the path %s\n", name, strings.ReplaceAll(strings.Join(s.Path, "/"), "{caller}", "c"))
		}
		strategies = append(strategies, s)
	}
	if len(strategies) == 0 {
		for _, src := range sc.Strategies {
			s, err := sim.CompileStrategy(src)
			if err != nil {
				return fail(err)
			}
			strategies = append(strategies, s)
		}
	}
	if len(strategies) == 0 {
		return fail(fmt.Errorf("scenario %s has no strategies of its own: give --limit or --policy", sc.Name))
	}
	opts := sim.Options{Slice: *slice}
	if isTerminal(e.stderr) {
		opts.Progress = e.stderr // a bar redrawn in place: for a terminal only
	}
	if *storeURL != "memory" && *storeURL != "" {
		opts.Store = func(strategy string) (store.Store, error) {
			// Each strategy its own keys: a prefix of its own.
			return store.Open(ctx, *storeURL, store.Options{Prefix: "sluice:sim:" + sluice.Key(strategy) + ":"})
		}
	}
	res, err := sim.Run(ctx, sc, *seed, sim.Params{Duration: *duration, Rate: *rate, Callers: *callers, RunFor: *runFor}, strategies, opts)
	if err != nil {
		return fail(err)
	}
	for _, s := range res.Strategies {
		fmt.Fprintf(e.stdout, "%-20s offered %7d  admitted %7d  in flight at most %5d  fairness %.3f  greediest %s %.1f%%\n",
			s.Name, s.Summary.Offered, s.Summary.Admitted, s.Summary.MaxInFlight, s.Summary.Fairness, s.Summary.GreediestCaller, 100*s.Summary.GreediestShare)
	}
	if *out != "" {
		if err := sim.WriteDir(*out, res, sc.Description); err != nil {
			return fail(err)
		}
		fmt.Fprintf(e.stdout, "wrote %s (and series.csv, summary.json, chart.png, chart.svg, callers.png)\n", filepath.Join(*out, "report.html"))
	}
	return 0
}

// isTerminal reports whether w is a terminal (a character device).
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

// limitStrategy reads NAME=each:SPEC or NAME=shared:SPEC.
func limitStrategy(arg string) (sim.Strategy, error) {
	name, rest, ok := strings.Cut(arg, "=")
	scope, spec, ok2 := strings.Cut(rest, ":")
	if !ok || !ok2 || name == "" || scope != "each" && scope != "shared" {
		return sim.Strategy{}, fmt.Errorf("want NAME=each:SPEC or NAME=shared:SPEC")
	}
	var s algo.Spec
	if err := json.Unmarshal([]byte(spec), &s); err != nil {
		return sim.Strategy{}, err
	}
	l, err := s.Build()
	if err != nil {
		return sim.Strategy{}, err
	}
	return sim.LimitStrategy(name, l, scope == "each")
}
