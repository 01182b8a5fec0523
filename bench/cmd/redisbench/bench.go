package main

import (
	"cmp"
	"context"
	"encoding/csv"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-redis/redis_rate/v10"
	goredis "github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"

	"github.com/sluicehq/sluice/algo"
	"github.com/sluicehq/sluice/bench/internal/machine"
	"github.com/sluicehq/sluice/store"
	sredis "github.com/sluicehq/sluice/store/redis"
)

// The limits measured. GCRA is redis-cell's CL.THROTTLE k 15 30 60
// (T = 2s, tau = 32s): a hot key is limited after its first 16 decisions,
// random keys are mostly allowed. rateLimit is the same limit for
// redis_rate (burst 16, 30 per minute: the same T and tau).
var (
	gcra      = algo.GCRA{Burst: 15, Count: 30, Period: time.Minute}
	rateLimit = redis_rate.Limit{Rate: 30, Burst: 16, Period: time.Minute}
	algos     = []struct {
		name  string
		limit algo.Limit
	}{
		{"gcra", gcra},
		{"token_bucket", algo.TokenBucket{Burst: 16, Count: 30, Period: time.Minute}},
		{"fixed_window", algo.FixedWindow{Count: 100, Window: time.Minute}},
		{"gate", algo.Gate{Interval: time.Second}},
	}
)

// rateLimitPrefix is the prefix redis_rate puts before every key.
const rateLimitPrefix = "rate:"

type bench struct {
	srv         *server
	admin       *conn
	store       *sredis.Store
	tuned       *sredis.Store // on a rueidis client with -flush-delay
	tunedClient rueidis.Client
	rdb         *goredis.Client // go-redis default pool (10 per GOMAXPROCS)
	rdb64       *goredis.Client // go-redis with a pool of -goroutines connections
	rl          *redis_rate.Limiter
	rl64        *redis_rate.Limiter
	keys        []string
	rbPath      string
}

func newBench(ctx context.Context, srv *server) (*bench, error) {
	b := &bench{srv: srv}
	var err error
	if b.admin, err = dial(srv.addr); err != nil {
		return nil, err
	}
	if b.store, err = sredis.Open(ctx, "redis://"+srv.addr+"/0", sredis.Options{}); err != nil {
		return nil, err
	}
	if *flagFlushDelay > 0 {
		c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{srv.addr}, DisableCache: true, MaxFlushDelay: *flagFlushDelay})
		if err != nil {
			return nil, err
		}
		if b.tuned, err = sredis.New(c, sredis.Options{}); err != nil {
			return nil, err
		}
		b.tunedClient = c
	}
	b.rdb = goredis.NewClient(&goredis.Options{Addr: srv.addr})
	b.rdb64 = goredis.NewClient(&goredis.Options{Addr: srv.addr, PoolSize: *flagGoroutines})
	b.rl, b.rl64 = redis_rate.NewLimiter(b.rdb), redis_rate.NewLimiter(b.rdb64)
	b.keys = make([]string, *flagKeys)
	for i := range b.keys {
		b.keys[i] = "user:" + strconv.Itoa(i)
	}
	if b.rbPath, err = exec.LookPath("redis-benchmark"); err != nil {
		return nil, fmt.Errorf("redis-benchmark is not installed (apt-get install -y redis-tools): %w", err)
	}
	return b, nil
}

func (b *bench) close() {
	b.store.Close()
	if b.tuned != nil {
		b.tuned.Close()
		b.tunedClient.Close()
	}
	b.rdb.Close()
	b.rdb64.Close()
	b.admin.Close()
}

func gomaxprocs() int { return runtime.GOMAXPROCS(0) }

// decider makes one decision on key and reports whether it was allowed.
type decider func(ctx context.Context, key string) (bool, error)

func (b *bench) sluice(lim algo.Limit, reqTime bool) decider { return sluiceOn(b.store, lim, reqTime) }

func sluiceOn(st *sredis.Store, lim algo.Limit, reqTime bool) decider {
	return func(ctx context.Context, key string) (bool, error) {
		req := store.Request{Key: key, Plan: algo.MustCompile(lim), Cost: 1}
		if reqTime {
			req.Time = time.Now()
		}
		r, err := st.Decide(ctx, req)
		return r.Allowed, err
	}
}

func rateDecider(l *redis_rate.Limiter) decider {
	return func(ctx context.Context, key string) (bool, error) {
		r, err := l.Allow(ctx, key, rateLimit)
		if err != nil {
			return false, err
		}
		return r.Allowed > 0, nil
	}
}

// sample is one measured run.
type sample struct {
	ops, allowed, errs int64
	firstErr           error
	elapsed            time.Duration
	rate               float64 // decisions/s
	redisCPU           time.Duration
	clientCPU          time.Duration
	foreignCPU         time.Duration // CPU used by other processes meanwhile
	evalUsec           float64       // usec_per_call of EVALSHA during the run
	innerCalls         float64       // commands the script ran, per script call
}

// quiet waits for the machine to be quiet before a measured run.
func (b *bench) quiet() {
	if *flagQuietWait > 0 && !waitQuiet(*flagQuietWait) {
		fmt.Fprintf(os.Stderr, "redisbench: the machine stayed busy for %v; measuring anyway\n", *flagQuietWait)
	}
}

// reset empties the server and its statistics before a run.
func (b *bench) reset() error {
	if _, err := b.admin.str("FLUSHALL"); err != nil {
		return err
	}
	_, err := b.admin.str("CONFIG", "RESETSTAT")
	return err
}

type meter struct {
	start                time.Time
	redis, client, total time.Duration
}

func (b *bench) meterStart(clientCPU func() time.Duration) meter {
	return meter{time.Now(), procCPU(b.srv.pid()), clientCPU(), machineBusy()}
}

func (b *bench) meterStop(m meter, s *sample, clientCPU time.Duration) error {
	s.elapsed = time.Since(m.start)
	s.redisCPU = procCPU(b.srv.pid()) - m.redis
	s.clientCPU = clientCPU
	s.foreignCPU = max(machineBusy()-m.total-s.redisCPU-s.clientCPU, 0)
	st, err := b.admin.commandstats()
	if err != nil {
		return err
	}
	ev := st["evalsha"]
	if ev.calls == 0 {
		ev = st["evalsha_ro"]
	}
	s.evalUsec = ev.usecPerCall
	var inner int64
	for name, cs := range st {
		switch {
		case strings.HasPrefix(name, "eval"), strings.HasPrefix(name, "config"), strings.HasPrefix(name, "script"),
			strings.HasPrefix(name, "client"), name == "info", name == "flushall", name == "ping", name == "hello":
			// not run by a script: the harness's and the clients' own
		default:
			inner += cs.calls
		}
	}
	if ev.calls > 0 {
		s.innerCalls = float64(inner) / float64(ev.calls)
	}
	return nil
}

// loadGo runs d from -goroutines goroutines for -duration, on the hot key
// or on random keys.
func (b *bench) loadGo(ctx context.Context, d decider, random bool) (sample, error) {
	var s sample
	if err := b.reset(); err != nil {
		return s, err
	}
	const maxOpsPerGoroutine = 50_000_000 // a bound far above any run
	var ops, allowed, errs atomic.Int64
	var errOnce sync.Once
	var wg sync.WaitGroup
	m := b.meterStart(selfCPU)
	deadline := m.start.Add(*flagDuration)
	for g := 0; g < *flagGoroutines; g++ {
		wg.Add(1)
		go func(seed uint64) {
			defer wg.Done()
			r := rand.New(rand.NewPCG(seed, 1))
			var n, ok, bad int64
			for n < maxOpsPerGoroutine {
				if n%16 == 0 && time.Now().After(deadline) {
					break
				}
				key := "hot"
				if random {
					key = b.keys[r.IntN(len(b.keys))]
				}
				a, err := d(ctx, key)
				n++
				if err != nil {
					bad++
					errOnce.Do(func() { s.firstErr = err })
				} else if a {
					ok++
				}
			}
			ops.Add(n)
			allowed.Add(ok)
			errs.Add(bad)
		}(uint64(g))
	}
	wg.Wait()
	self := selfCPU() - m.client
	if err := b.meterStop(m, &s, self); err != nil {
		return s, err
	}
	s.ops, s.allowed, s.errs = ops.Load(), allowed.Load(), errs.Load()
	s.rate = float64(s.ops) / s.elapsed.Seconds()
	return s, nil
}

// rbArgs is the redis-benchmark command line (without the binary) that
// replays cmd.
func (b *bench) rbArgs(cmd []string, clients, pipeline, n int, random bool) []string {
	args := []string{"-h", "127.0.0.1", "-p", strconv.Itoa(b.srv.port),
		"-c", strconv.Itoa(clients), "-P", strconv.Itoa(pipeline), "-n", strconv.Itoa(n)}
	if random {
		args = append(args, "-r", strconv.Itoa(len(b.keys)))
	}
	return append(append(args, "--csv"), cmd...)
}

// loadRB replays cmd with redis-benchmark.
func (b *bench) loadRB(cmd []string, clients, pipeline, n int, random bool) (sample, error) {
	var s sample
	if err := b.reset(); err != nil {
		return s, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	c := exec.CommandContext(ctx, b.rbPath, b.rbArgs(cmd, clients, pipeline, n, random)...)
	m := b.meterStart(func() time.Duration { return 0 })
	out, err := c.Output()
	if err != nil {
		return s, fmt.Errorf("redis-benchmark: %w: %s", err, out)
	}
	child := machine.RusageCPU(c.ProcessState.SysUsage())
	if err := b.meterStop(m, &s, child); err != nil {
		return s, err
	}
	recs, err := csv.NewReader(strings.NewReader(string(out))).ReadAll()
	if err != nil || len(recs) < 2 || len(recs[1]) < 2 {
		return s, fmt.Errorf("redis-benchmark: unexpected output %q", out)
	}
	if s.rate, err = strconv.ParseFloat(recs[1][1], 64); err != nil {
		return s, fmt.Errorf("redis-benchmark: rps %q: %w", recs[1][1], err)
	}
	s.ops = int64(n)
	return s, nil
}

// median returns the sample of median by (its rate, its EVALSHA time).
func median(ss []sample, by func(sample) float64) sample {
	ss = slices.Clone(ss)
	slices.SortFunc(ss, func(a, b sample) int { return cmp.Compare(by(a), by(b)) })
	return ss[len(ss)/2]
}

func rate(s sample) float64     { return s.rate }
func evalUsec(s sample) float64 { return s.evalUsec }

func rangeOf(ss []sample) (lo, hi float64) {
	lo, hi = ss[0].rate, ss[0].rate
	for _, s := range ss[1:] {
		lo, hi = min(lo, s.rate), max(hi, s.rate)
	}
	return lo, hi
}

func per(d time.Duration, ops int64) string {
	if ops == 0 {
		return "–"
	}
	return fmt.Sprintf("%.1f", float64(d.Nanoseconds())/1e3/float64(ops))
}

func pct(cpu, elapsed time.Duration) string {
	return fmt.Sprintf("%.0f%%", 100*cpu.Seconds()/elapsed.Seconds())
}

func thousands(v float64) string {
	s := strconv.FormatInt(int64(v+0.5), 10)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}
