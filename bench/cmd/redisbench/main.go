// Command redisbench measures Sluice's Redis store against a local
// redis-server that it starts itself (127.0.0.1, a free port, no
// persistence, stopped by PID), and prints markdown tables:
//
//   - throughput: GCRA decisions/s from 64 goroutines on one hot key and on
//     100k random keys, for Sluice (rueidis) and github.com/go-redis/redis_rate
//     v10 (go-redis v9) on the same server and keys, next to redis-benchmark
//     -P 16 replaying the exact command each client sends;
//   - cpu: INFO commandstats usec_per_call of each algorithm's script call
//     next to a trivial "return 1" script given the same keys and arguments;
//   - memory: MEMORY USAGE of a key after one decision, per algorithm, and
//     used_memory per key over many keys.
//
// The script commands are not hard-coded: the program captures, through
// MONITOR, the command each client sends for one decision and replays that,
// so it measures whatever scripts the store has when it is run.
//
// Every loop is bounded by a duration and a count; traffic goes to
// 127.0.0.1 only. bench/run.sh runs it.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"
)

var (
	flagSections   = flag.String("sections", "throughput,cpu,memory", "comma-separated sections to run")
	flagDuration   = flag.Duration("duration", 2*time.Second, "how long each Go contender runs, per round")
	flagRounds     = flag.Int("rounds", 3, "rounds of every contender; tables show the median round")
	flagGoroutines = flag.Int("goroutines", 64, "goroutines of each Go contender, and redis-benchmark -c")
	flagKeys       = flag.Int("keys", 100000, "random keys (redis-benchmark -r)")
	flagPipeline   = flag.Int("pipeline", 16, "redis-benchmark -P of the throughput ceiling")
	flagRBRequests = flag.Int("rb-requests", 500000, "redis-benchmark -n of the throughput ceiling")
	flagCPURequest = flag.Int("cpu-requests", 100000, "redis-benchmark -n of each commandstats case")
	flagMemKeys    = flag.Int("mem-keys", 100000, "keys written to measure used_memory per key")
	flagFlushDelay = flag.Duration("flush-delay", 20*time.Microsecond, "also measure Sluice on a rueidis client with this MaxFlushDelay (0: do not)")
	flagRedo       = flag.Int("redo", 2, "rounds that may be discarded and run again, per table, when other processes disturbed them")
	flagDisturbed  = flag.Float64("disturbed", 0.25, "a run is disturbed when other processes used more than this fraction of one core")
	flagQuietWait  = flag.Duration("quiet-wait", 10*time.Second, "before each round, wait up to this long for other processes to leave the machine idle (0: do not wait)")
)

func main() {
	flag.Parse()
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "redisbench:", err)
		os.Exit(1)
	}
}

func run() error {
	srv, err := startServer()
	if err != nil {
		return err
	}
	defer srv.stop()
	// Stop the server on ^C or SIGTERM too (it also dies with us: Pdeathsig).
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, os.Interrupt, syscall.SIGTERM)
	go func() {
		<-sig
		srv.stop()
		os.Exit(130)
	}()

	ctx := context.Background()
	b, err := newBench(ctx, srv)
	if err != nil {
		return err
	}
	defer b.close()

	version, _ := b.admin.info("server")
	fmt.Printf("<!-- redisbench: redis %s on %s, GOMAXPROCS %d, %d goroutines -->\n\n",
		version["redis_version"], srv.addr, gomaxprocs(), *flagGoroutines)
	for _, s := range strings.Split(*flagSections, ",") {
		var err error
		switch strings.TrimSpace(s) {
		case "throughput":
			err = b.throughput(ctx)
		case "cpu":
			err = b.cpu(ctx)
		case "memory":
			err = b.memory(ctx)
		case "":
		default:
			err = fmt.Errorf("unknown section %q", s)
		}
		if err != nil {
			return err
		}
	}
	return nil
}
