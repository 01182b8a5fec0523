// Command gobench runs a package's Go benchmarks in interleaved rounds and
// prints markdown tables of the median of the rounds.
//
// It builds the package's test binary once (go test -c, in the Sluice
// module), then runs every benchmark once per round, waiting before each
// round (for at most -quiet-wait) until the rest of the machine is nearly
// idle; each round's line in the output says how much CPU other processes
// used during it. Rounds, rather than -count, spread a burst of outside
// load over all benchmarks instead of one.
//
//	gobench -pkg ./store/memory -bench . -benchtime 300ms -rounds 5 -layout memory
package main

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/sluicehq/sluice/bench/internal/machine"
)

var (
	flagRoot      = flag.String("root", "..", "the Sluice module's directory")
	flagPkg       = flag.String("pkg", "./store/memory", "package whose benchmarks to run, relative to -root")
	flagBench     = flag.String("bench", ".", "-test.bench pattern")
	flagBenchtime = flag.String("benchtime", "300ms", "-test.benchtime of each benchmark, per round")
	flagRounds    = flag.Int("rounds", 5, "rounds; the tables show the median")
	flagQuietWait = flag.Duration("quiet-wait", 10*time.Second, "before each round, wait up to this long for the machine to be idle (0: do not wait)")
	flagLayout    = flag.String("layout", "plain", "tables: plain, memory (store/memory's BenchmarkDecide) or redis (store/redis's)")
	flagRaw       = flag.String("raw", "", "also append the raw benchmark output to this file")
	flagRedo      = flag.Int("redo", 2, "rounds that may be discarded and run again when other processes disturbed them")
	flagDisturbed = flag.Float64("disturbed", 0.25, "a round is disturbed when other processes used more than this fraction of one core")
	flagTimeout   = flag.Duration("timeout", 5*time.Minute, "bound on each round")
)

func main() {
	flag.Parse()
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "gobench:", err)
		os.Exit(1)
	}
}

// results maps a benchmark name (without the -GOMAXPROCS suffix) to each
// unit's values, one per round.
type results map[string]map[string][]float64

func run() error {
	root, err := filepath.Abs(*flagRoot)
	if err != nil {
		return err
	}
	tmp, err := os.MkdirTemp("", "gobench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	bin := filepath.Join(tmp, "pkg.test")
	build := exec.Command("go", "test", "-c", "-o", bin, *flagPkg)
	build.Dir, build.Stderr = root, os.Stderr
	if err := build.Run(); err != nil {
		return fmt.Errorf("go test -c %s: %w", *flagPkg, err)
	}
	args := []string{"-test.run", "^$", "-test.bench", *flagBench, "-test.benchtime", *flagBenchtime, "-test.benchmem", "-test.count", "1"}
	var raw *os.File
	if *flagRaw != "" {
		if raw, err = os.OpenFile(*flagRaw, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644); err != nil {
			return err
		}
		defer raw.Close()
	}

	res := results{}
	var order []string
	var rounds []string
	redo := *flagRedo
	for r := 1; r <= *flagRounds; r++ {
		quiet := *flagQuietWait <= 0 || machine.WaitQuiet(*flagQuietWait)
		ctx, cancel := context.WithTimeout(context.Background(), *flagTimeout)
		cmd := exec.CommandContext(ctx, bin, args...)
		cmd.Dir = filepath.Join(root, *flagPkg)
		cmd.Stderr = os.Stderr
		busy0, t0 := machine.Busy(), time.Now()
		out, err := cmd.Output()
		cancel()
		if err != nil {
			return fmt.Errorf("round %d: %w\n%s", r, err, out)
		}
		elapsed := time.Since(t0)
		foreign := max(machine.Busy()-busy0-machine.RusageCPU(cmd.ProcessState.SysUsage()), 0)
		note := ""
		if !quiet {
			note = fmt.Sprintf(" (the machine stayed busy for %v before it; measured anyway)", *flagQuietWait)
		}
		if foreign.Seconds() > *flagDisturbed*elapsed.Seconds() && redo > 0 {
			redo--
			rounds = append(rounds, fmt.Sprintf("discarded, run again: other processes used %.0f%% of one core%s", 100*foreign.Seconds()/elapsed.Seconds(), note))
			r--
			continue
		}
		rounds = append(rounds, fmt.Sprintf("round %d: %.1fs, other processes used %.0f%% of one core%s", r, elapsed.Seconds(), 100*foreign.Seconds()/elapsed.Seconds(), note))
		if raw != nil {
			fmt.Fprintf(raw, "# round %d\n%s", r, out)
		}
		sc := bufio.NewScanner(strings.NewReader(string(out)))
		for sc.Scan() {
			name, vals, ok := parseLine(sc.Text())
			if !ok {
				continue
			}
			if res[name] == nil {
				res[name] = map[string][]float64{}
				order = append(order, name)
			}
			for unit, v := range vals {
				res[name][unit] = append(res[name][unit], v)
			}
		}
	}
	if len(order) == 0 {
		return fmt.Errorf("no benchmark matched %q in %s", *flagBench, *flagPkg)
	}

	fmt.Printf("<!-- gobench: %s, %d rounds of -test.benchtime %s, GOMAXPROCS default -->\n\n", *flagPkg, *flagRounds, *flagBenchtime)
	switch *flagLayout {
	case "memory":
		memoryTables(res)
	case "redis":
		redisTable(res, order)
	default:
		plainTable(res, order)
	}
	fmt.Printf("Command (each round): `cd %s && go test -c -o pkg.test . && ./pkg.test %s`\n\n", *flagPkg, strings.Join(quoteAll(args), " "))
	for _, r := range rounds {
		fmt.Printf("- %s\n", r)
	}
	fmt.Println()
	return nil
}

// parseLine reads "BenchmarkX/y-2  1000  123 ns/op  0 B/op ...".
func parseLine(line string) (string, map[string]float64, bool) {
	f := strings.Fields(line)
	if len(f) < 4 || !strings.HasPrefix(f[0], "Benchmark") {
		return "", nil, false
	}
	name := strings.TrimPrefix(f[0], "Benchmark")
	if i := strings.LastIndexByte(name, '-'); i > 0 {
		if _, err := strconv.Atoi(name[i+1:]); err == nil {
			name = name[:i]
		}
	}
	vals := map[string]float64{}
	for i := 2; i+1 < len(f); i += 2 {
		v, err := strconv.ParseFloat(f[i], 64)
		if err != nil {
			return "", nil, false
		}
		vals[f[i+1]] = v
	}
	return name, vals, true
}

func median(vs []float64) float64 {
	if len(vs) == 0 {
		return 0
	}
	s := slices.Clone(vs)
	sort.Float64s(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// bestOf is the fastest round.
func bestOf(vs []float64) float64 {
	if len(vs) == 0 {
		return 0
	}
	return slices.Min(vs)
}

func spread(vs []float64) string {
	if len(vs) == 0 {
		return "–"
	}
	return fmt.Sprintf("%.0f–%.0f", slices.Min(vs), slices.Max(vs))
}

func quoteAll(args []string) []string {
	out := make([]string, len(args))
	for i, a := range args {
		if strings.ContainsAny(a, "^$*()|[] ") || a == "" {
			a = "'" + a + "'"
		}
		out[i] = a
	}
	return out
}

func plainTable(res results, order []string) {
	fmt.Println("| benchmark | ns/op (median) | range | B/op | allocs/op | allowed/op |")
	fmt.Println("|---|--:|--:|--:|--:|--:|")
	for _, name := range order {
		u := res[name]
		fmt.Printf("| %s | %.0f | %s | %.0f | %.0f | %s |\n", name, median(u["ns/op"]), spread(u["ns/op"]), median(u["B/op"]), median(u["allocs/op"]), allowedOf(u))
	}
	fmt.Println()
}

func allowedOf(u map[string][]float64) string {
	if vs, ok := u["allowed/op"]; ok {
		return fmt.Sprintf("%.3g", median(vs))
	}
	return "–"
}

// memoryTables lays out Decide/<algo>/clock=<c>/<mode>: one row per
// algorithm and clock, with the parallel speedups.
func memoryTables(res results) {
	type row struct{ algo, clock string }
	var rows []row
	seen := map[row]bool{}
	names := make([]string, 0, len(res))
	for n := range res {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		p := strings.Split(n, "/")
		if len(p) != 4 || p[0] != "Decide" {
			continue
		}
		r := row{p[1], strings.TrimPrefix(p[2], "clock=")}
		if !seen[r] {
			seen[r] = true
			rows = append(rows, r)
		}
	}
	algoOrder := map[string]int{"gcra": 0, "gcra-denied": 1, "token_bucket": 2, "fixed_window": 3, "gate": 4}
	slices.SortStableFunc(rows, func(a, b row) int {
		if d := algoOrder[a.algo] - algoOrder[b.algo]; d != 0 {
			return d
		}
		return strings.Compare(b.clock, a.clock) // store before req
	})
	fmt.Println("Each figure is the median of the rounds, with the best round in parentheses (the least disturbed by other work on the machine); speedups divide medians by medians (bests by bests).")
	fmt.Println()
	fmt.Println("| algorithm | clock | 1 goroutine, 1 key: ns/op | allocs/op | 1 goroutine, 1024 keys: ns/op | parallel, 1024 keys: ns/op | speedup vs 1 goroutine, 1024 keys | speedup vs 1 goroutine, 1 key | parallel, 1 hot key: ns/op | speedup vs 1 goroutine, 1 key | allocs/op (max of all) | allowed/op (1 goroutine) |")
	fmt.Println("|---|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|")
	for _, r := range rows {
		get := func(mode string) map[string][]float64 {
			return res["Decide/"+r.algo+"/clock="+r.clock+"/"+mode]
		}
		one, keys, par, hot := get("1goroutine"), get("1goroutine-keys"), get("parallel-keys"), get("parallel-hotkey")
		ns := func(u map[string][]float64) float64 { return median(u["ns/op"]) }
		best := func(u map[string][]float64) float64 { return bestOf(u["ns/op"]) }
		both := func(u map[string][]float64) string { return fmt.Sprintf("%.1f (%.1f)", ns(u), best(u)) }
		ratio := func(a, b map[string][]float64) string {
			return fmt.Sprintf("%.2fx (%.2fx)", ns(a)/ns(b), best(a)/best(b))
		}
		maxAllocs := 0.0
		for _, u := range []map[string][]float64{one, keys, par, hot} {
			for _, v := range u["allocs/op"] {
				maxAllocs = max(maxAllocs, v)
			}
		}
		fmt.Printf("| %s | %s | %s | %.0f | %s | %s | %s | %s | %s | %s | %.0f | %s |\n",
			r.algo, r.clock, both(one), median(one["allocs/op"]), both(keys), both(par), ratio(keys, par), ratio(one, par), both(hot), ratio(one, hot), maxAllocs, allowedOf(one))
	}
	fmt.Println()
	fmt.Println("ns/op of a parallel benchmark is wall time per decision over all goroutines, so speedup = serial ns/op ÷ parallel ns/op = parallel throughput ÷ serial throughput.")
	fmt.Println()
	if u := res["Decide/time.Now"]; u != nil {
		fmt.Printf("A clock read (time.Now, one goroutine) took %.1f ns (best round %.1f) in the same run; every decision makes one.\n\n", median(u["ns/op"]), bestOf(u["ns/op"]))
	}
	diag := "Decide/gcra/clock=store/"
	if base := median(res[diag+"1goroutine-keys"]["ns/op"]); base > 0 && res[diag+"parallel-private-stores"] != nil {
		fmt.Println("Where the parallel speedup goes (gcra, store clock, 1024 keys; speedup against one goroutine over the same keys):")
		fmt.Println()
		fmt.Println("| case | what the goroutines share | ns/op | speedup | best round: ns/op | speedup |")
		fmt.Println("|---|---|--:|--:|--:|--:|")
		bestBase := bestOf(res[diag+"1goroutine-keys"]["ns/op"])
		for _, c := range []struct{ mode, shares string }{
			{"1goroutine-keys", "(one goroutine)"},
			{"parallel-private-stores", "nothing: each goroutine its own store and keys"},
			{"parallel-disjoint-keys", "the store's shards (locks): each goroutine its own keys"},
			{"parallel-keys", "shards and keys' states: every goroutine goes over every key"},
			{"parallel-hotkey", "one key: one shard lock, one state"},
		} {
			ns, bs := median(res[diag+c.mode]["ns/op"]), bestOf(res[diag+c.mode]["ns/op"])
			fmt.Printf("| %s | %s | %.1f | %.2fx | %.1f | %.2fx |\n", c.mode, c.shares, ns, base/ns, bs, bestBase/bs)
		}
		fmt.Println()
	}
	fmt.Println("<details><summary>Every benchmark: median ns/op and range over the rounds</summary>")
	fmt.Println()
	plainTable(res, names)
	fmt.Println("</details>")
	fmt.Println()
}

// redisTable lays out store/redis's BenchmarkDecide with decisions/s.
func redisTable(res results, order []string) {
	fmt.Println("| benchmark | ns/op (median) | decisions/s | range of ns/op | B/op | allocs/op | allowed/op |")
	fmt.Println("|---|--:|--:|--:|--:|--:|--:|")
	for _, name := range order {
		u := res[name]
		ns := median(u["ns/op"])
		fmt.Printf("| %s | %.0f | %.0f | %s | %.0f | %.0f | %s |\n", name, ns, 1e9/ns, spread(u["ns/op"]), median(u["B/op"]), median(u["allocs/op"]), allowedOf(u))
	}
	fmt.Println()
}
