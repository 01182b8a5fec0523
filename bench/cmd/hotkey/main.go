// Command hotkey decides one hot key on a Redis store from many
// goroutines, with the store's leased quota (redis.Options.LeaseFor) or
// exactly (one script call per decision), and prints one JSON line:
// decisions and admissions per second, the script calls Redis ran (INFO
// commandstats), and the key's window count in Redis at the end.
//
//	hotkey -redis 127.0.0.1:6379 -limit 1000000000000 -window 1s -d 5s    far from the limit
//	hotkey -redis 127.0.0.1:6379 -limit 2000000 -window 1h -d 5s           runs into the limit
//	hotkey -redis 127.0.0.1:6379 -lease 0 ...                              exact decisions
//	hotkey -redis 127.0.0.1:6379 -once                                     one exact decision (for MONITOR)
//
// Several processes may run at once against one Redis (-key the same):
// each is one instance, with its own leases.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"regexp"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/rueidis"

	"github.com/sluicehq/sluice/algo"
	"github.com/sluicehq/sluice/store"
	"github.com/sluicehq/sluice/store/redis"
)

// Result is hotkey's output line.
type Result struct {
	Name        string  `json:"name"`
	Seconds     float64 `json:"seconds"`
	Decisions   int64   `json:"decisions"`
	Admitted    int64   `json:"admitted"`
	PerSecond   float64 `json:"decisions_per_s"`
	ScriptCalls int64   `json:"script_calls"`
	Limit       int64   `json:"limit"`
	WindowCount int64   `json:"window_count"`
}

func main() {
	addr := flag.String("redis", "127.0.0.1:6379", "Redis address")
	key := flag.String("key", "hot", "the key")
	limit := flag.Int64("limit", 1_000_000_000_000, "the fixed window's limit")
	window := flag.Duration("window", time.Second, "the fixed window")
	lease := flag.Duration("lease", 100*time.Millisecond, "the store's LeaseFor (0: exact decisions)")
	maxLease := flag.Int64("max-lease", 0, "the store's MaxLease (0: its default)")
	workers := flag.Int("c", 64, "goroutines")
	dur := flag.Duration("d", 5*time.Second, "how long")
	name := flag.String("name", "hotkey", "name of the run")
	once := flag.Bool("once", false, "decide once, exactly, and exit")
	flag.Parse()
	if err := run(*addr, *key, *limit, *window, *lease, *maxLease, *workers, *dur, *name, *once); err != nil {
		fmt.Fprintln(os.Stderr, "hotkey:", err)
		os.Exit(1)
	}
}

func run(addr, key string, limit int64, window, lease time.Duration, maxLease int64, workers int, dur time.Duration, name string, once bool) error {
	ctx := context.Background()
	st, err := redis.Open(ctx, "redis://"+addr+"/0", redis.Options{LeaseFor: lease, MaxLease: maxLease})
	if err != nil {
		return err
	}
	req := store.Request{Key: key, Plan: algo.MustCompile(algo.FixedWindow{Count: limit, Window: window}), Cost: 1, Lease: lease > 0}
	if once {
		_, err := st.Decide(ctx, req)
		st.Close()
		return err
	}
	calls0, err := scriptCalls(ctx, st.Client())
	if err != nil {
		return err
	}
	var decisions, admitted atomic.Int64
	var stop atomic.Bool
	var wg sync.WaitGroup
	var firstErr atomic.Value
	start := time.Now()
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var n, a int64
			for !stop.Load() {
				res, err := st.Decide(ctx, req)
				if err != nil {
					firstErr.CompareAndSwap(nil, err)
					break
				}
				n++
				if res.Allowed {
					a++
				}
			}
			decisions.Add(n)
			admitted.Add(a)
		}()
	}
	time.Sleep(dur)
	stop.Store(true)
	wg.Wait()
	elapsed := time.Since(start)
	if err, ok := firstErr.Load().(error); ok {
		return err
	}
	calls1, err := scriptCalls(ctx, st.Client())
	if err != nil {
		return err
	}
	st.Close() // gives the leases' units back
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{addr}, DisableCache: true})
	if err != nil {
		return err
	}
	defer c.Close()
	n, err := c.Do(ctx, c.B().Hget().Key(redis.StateKey(redis.DefaultPrefix, req)).Field("n").Build()).AsInt64()
	if err != nil && !rueidis.IsRedisNil(err) {
		return err
	}
	return json.NewEncoder(os.Stdout).Encode(Result{Name: name, Seconds: elapsed.Seconds(), Decisions: decisions.Load(), Admitted: admitted.Load(),
		PerSecond: float64(decisions.Load()) / elapsed.Seconds(), ScriptCalls: calls1 - calls0, Limit: limit, WindowCount: n})
}

var callsRe = regexp.MustCompile(`cmdstat_evalsha:calls=(\d+)`)

func scriptCalls(ctx context.Context, c rueidis.Client) (int64, error) {
	info, err := c.Do(ctx, c.B().Info().Section("commandstats").Build()).ToString()
	if err != nil {
		return 0, err
	}
	m := callsRe.FindStringSubmatch(info)
	if m == nil {
		return 0, nil
	}
	return strconv.ParseInt(m[1], 10, 64)
}
