package main

import (
	"context"
	_ "embed"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/go-redis/redis_rate/v10"

	"github.com/sluicehq/sluice/algo"
	"github.com/sluicehq/sluice/store"
	sredis "github.com/sluicehq/sluice/store/redis"
)

var (
	//go:embed ref/time.lua
	refTime string
	//go:embed ref/time_get.lua
	refTimeGet string
	//go:embed ref/gcra_single.lua
	refGCRA string
	//go:embed ref/time_get_set_px.lua
	refTimeGetSetPX string
	//go:embed ref/time_get_set_keepttl.lua
	refTimeGetSetKeepTTL string
	//go:embed ref/gcra_lean.lua
	refGCRALean string
	//go:embed ref/table_reply.lua
	refTableReply string
)

// sluiceKey is the Redis key the store uses for a request key.
func sluiceKey(key string) string {
	return sredis.StateKey(sredis.DefaultPrefix, store.Request{Key: key})
}

// captureSluice returns the command the store sends for one decision.
func (b *bench) captureSluice(ctx context.Context, lim algo.Limit, reqTime bool) ([]string, error) {
	if err := b.reset(); err != nil { // the capture keys may hold another algorithm's state
		return nil, err
	}
	d := b.sluice(lim, reqTime)
	if _, err := d(ctx, "warm"); err != nil { // loads the script
		return nil, err
	}
	cmd, err := capture(b.srv.addr, sluiceKey("capture"), func() error {
		_, err := d(ctx, "capture")
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("capture Sluice's command: %w", err)
	}
	return cmd, nil
}

// captureBatch captures a coalesce.lua call of GCRA decisions (64 goroutines
// decide until the store coalesces some) and makes it a call of n decisions
// on random keys.
func (b *bench) captureBatch(ctx context.Context, lim algo.Limit, n int) ([]string, error) {
	if err := b.reset(); err != nil {
		return nil, err
	}
	d := b.sluice(lim, false)
	if _, err := d(ctx, "warm"); err != nil {
		return nil, err
	}
	cmd, err := captureWhere(b.srv.addr, func() error {
		var wg sync.WaitGroup
		for g := range 64 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range 50 {
					d(ctx, "batch"+strconv.Itoa(g))
				}
			}()
		}
		wg.Wait()
		return nil
	}, func(args []string) bool { return len(args) > 4 && args[2] != "1" && args[2] != "0" })
	if err != nil {
		return nil, fmt.Errorf("capture a batch: %w", err)
	}
	keys, _ := strconv.Atoi(cmd[2])
	argv := cmd[3+keys:] // count, then per decision: now, levels, level
	per := (len(argv) - 1) / keys
	out := []string{"EVALSHA", cmd[1], strconv.Itoa(n)}
	for range n {
		out = append(out, sluiceKey(randKey))
	}
	out = append(out, strconv.Itoa(n))
	for range n {
		out = append(out, argv[1:1+per]...)
	}
	return out, nil
}

func (b *bench) captureRate(ctx context.Context) ([]string, error) {
	if err := b.reset(); err != nil {
		return nil, err
	}
	d := rateDecider(b.rl)
	if _, err := d(ctx, "warm"); err != nil {
		return nil, err
	}
	cmd, err := capture(b.srv.addr, rateLimitPrefix+"capture", func() error {
		_, err := d(ctx, "capture")
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("capture redis_rate's command: %w", err)
	}
	return cmd, nil
}

// randKey is the key redis-benchmark -r turns into 100k keys.
const randKey = "user:__rand_int__"

func (b *bench) throughput(ctx context.Context) error {
	sCmd, err := b.captureSluice(ctx, gcra, false)
	if err != nil {
		return err
	}
	rCmd, err := b.captureRate(ctx)
	if err != nil {
		return err
	}
	sCap, rCap := sluiceKey("capture"), rateLimitPrefix+"capture"
	type contender struct {
		name string
		go_  decider
		rb   func(random bool) []string
	}
	cs := []contender{
		{name: "Sluice (redis.Open defaults: rueidis)", go_: b.sluice(gcra, false)},
		{name: fmt.Sprintf("redis_rate v10 (go-redis v9, default pool: %d conns)", 10*gomaxprocs()), go_: rateDecider(b.rl)},
		{name: fmt.Sprintf("redis_rate v10 (go-redis v9, pool of %d conns)", *flagGoroutines), go_: rateDecider(b.rl64)},
		{name: fmt.Sprintf("redis-benchmark -P %d, Sluice's command", *flagPipeline), rb: func(random bool) []string {
			if random {
				return withKey(sCmd, sCap, sluiceKey(randKey))
			}
			return withKey(sCmd, sCap, sluiceKey("hot"))
		}},
		{name: fmt.Sprintf("redis-benchmark -P %d, redis_rate's command", *flagPipeline), rb: func(random bool) []string {
			if random {
				return withKey(rCmd, rCap, rateLimitPrefix+randKey)
			}
			return withKey(rCmd, rCap, rateLimitPrefix+"hot")
		}},
	}
	if b.tuned != nil {
		cs = append(cs, contender{name: fmt.Sprintf("Sluice (redis.New on rueidis with MaxFlushDelay %v)", *flagFlushDelay), go_: sluiceOn(b.tuned, gcra, false)})
	}
	// Warm up every Go contender (connections, scripts, the Go runtime).
	saved := *flagDuration
	*flagDuration = 300 * time.Millisecond
	for _, c := range cs {
		if c.go_ != nil {
			if _, err := b.loadGo(ctx, c.go_, true); err != nil {
				return err
			}
		}
	}
	*flagDuration = saved

	fmt.Printf("### Throughput: GCRA, %d goroutines / connections\n\n", *flagGoroutines)
	fmt.Printf("Limit: GCRA burst 15, 30 per minute (CL.THROTTLE k 15 30 60; redis_rate Limit{Rate: 30, Burst: 16, Period: time.Minute}), cost 1, Redis TIME as the clock. "+
		"Go contenders run %d goroutines for %v per round; redis-benchmark runs -c %d -P %d -n %d. "+
		"%d rounds, contenders interleaved, FLUSHALL and CONFIG RESETSTAT before each run; the table shows the median round and the range over rounds.\n\n",
		*flagGoroutines, *flagDuration, *flagGoroutines, *flagPipeline, *flagRBRequests, *flagRounds)
	type result struct{ samples [][]sample }
	results := map[bool][][]sample{}
	discarded := map[bool]int{}
	for _, random := range []bool{false, true} {
		results[random] = make([][]sample, len(cs))
		redo := *flagRedo
		for round := 0; round < *flagRounds; round++ {
			b.quiet()
			ss := make([]sample, len(cs))
			for i, c := range cs {
				var s sample
				var err error
				if c.go_ != nil {
					s, err = b.loadGo(ctx, c.go_, random)
				} else {
					s, err = b.loadRB(c.rb(random), *flagGoroutines, *flagPipeline, *flagRBRequests, random)
				}
				if err != nil {
					return fmt.Errorf("%s: %w", c.name, err)
				}
				if s.errs > 0 {
					return fmt.Errorf("%s: %d of %d decisions failed, first: %v", c.name, s.errs, s.ops, s.firstErr)
				}
				ss[i] = s
			}
			if disturbed(ss) && redo > 0 {
				redo--
				discarded[random]++
				round--
				continue
			}
			for i := range cs {
				results[random][i] = append(results[random][i], ss[i])
			}
		}
	}
	for _, random := range []bool{false, true} {
		scenario := "one hot key"
		if random {
			scenario = fmt.Sprintf("%d random keys", len(b.keys))
		}
		fmt.Printf("#### %s\n\n", scenario)
		if discarded[random] > 0 {
			fmt.Printf("%d round(s) discarded and run again: other processes used more than %.0f%% of one core during a run.\n\n", discarded[random], 100**flagDisturbed)
		}
		fmt.Println("| contender | decisions/s | range over rounds | allowed | Redis CPU µs/decision | client CPU µs/decision | EVALSHA usec_per_call | commands run by the script per call | CPU of other processes |")
		fmt.Println("|---|--:|--:|--:|--:|--:|--:|--:|--:|")
		med := make([]sample, len(cs))
		for i, c := range cs {
			ss := results[random][i]
			m := median(ss, rate)
			med[i] = m
			lo, hi := rangeOf(ss)
			allowed := "n/a"
			if c.go_ != nil {
				allowed = fmt.Sprintf("%.2f%%", 100*float64(m.allowed)/float64(m.ops))
			}
			fmt.Printf("| %s | %s | %s–%s | %s | %s | %s | %.2f | %.1f | %s |\n", c.name, thousands(m.rate), thousands(lo), thousands(hi), allowed,
				per(m.redisCPU, m.ops), per(m.clientCPU, m.ops), m.evalUsec, m.innerCalls, pct(m.foreignCPU, m.elapsed))
		}
		best := max(med[1].rate, med[2].rate)
		fmt.Printf("\nSluice / redis_rate: **%.2fx** the default pool, **%.2fx** the pool of %d (target: at least 2x). "+
			"Sluice / redis-benchmark -P %d of its own command: **%.0f%%** (target: at least 60%%).\n\n",
			med[0].rate/med[1].rate, med[0].rate/med[2].rate, *flagGoroutines, *flagPipeline, 100*med[0].rate/med[3].rate)
		_ = best
		if len(med) > 5 {
			fmt.Printf("Sluice with MaxFlushDelay %v: **%.2fx** / **%.2fx** redis_rate, **%.0f%%** of redis-benchmark.\n\n", *flagFlushDelay, med[5].rate/med[1].rate, med[5].rate/med[2].rate, 100*med[5].rate/med[3].rate)
		}
	}
	fmt.Printf("redis-benchmark commands (PORT is the server's port):\n\n```\n")
	for _, random := range []bool{false, true} {
		for _, c := range cs {
			if c.rb == nil {
				continue
			}
			args := b.rbArgs(c.rb(random), *flagGoroutines, *flagPipeline, *flagRBRequests, random)
			fmt.Printf("redis-benchmark %s\n", portless(quote(args), b.srv.port))
		}
	}
	fmt.Printf("```\n\n")
	return nil
}

func portless(s string, port int) string {
	return replaceWord(s, strconv.Itoa(port), "$PORT")
}

func replaceWord(s, old, new string) string {
	out := ""
	for _, w := range splitSpaces(s) {
		if out != "" {
			out += " "
		}
		if w == old {
			w = new
		}
		out += w
	}
	return out
}

func splitSpaces(s string) []string {
	var out []string
	start := -1
	inQuote := false
	for i := 0; i < len(s); i++ {
		switch {
		case s[i] == '\'':
			inQuote = !inQuote
			if start < 0 {
				start = i
			}
		case s[i] == ' ' && !inQuote:
			if start >= 0 {
				out = append(out, s[start:i])
				start = -1
			}
		default:
			if start < 0 {
				start = i
			}
		}
	}
	if start >= 0 {
		out = append(out, s[start:])
	}
	return out
}

// cpu measures INFO commandstats usec_per_call per script call.
func (b *bench) cpu(ctx context.Context) error {
	type cpuCase struct {
		name   string
		cmd    []string
		random bool
		per    int // decisions per call, for a batch (0: one)
	}
	var cases []cpuCase
	cap := sluiceKey("capture")
	var gcraCmd []string
	for _, a := range algos {
		cmd, err := b.captureSluice(ctx, a.limit, false)
		if err != nil {
			return err
		}
		if a.name == "gcra" {
			gcraCmd = cmd
		}
		cases = append(cases, cpuCase{a.name + ", random keys", withKey(cmd, cap, sluiceKey(randKey)), true, 0})
		if a.name == "gcra" {
			cases = append(cases, cpuCase{"gcra, one hot key (limited: no write)", withKey(cmd, cap, sluiceKey("hot")), false, 0})
			tcmd, err := b.captureSluice(ctx, a.limit, true)
			if err != nil {
				return err
			}
			cases = append(cases, cpuCase{"gcra, random keys, Request.Time set (no TIME call)", withKey(tcmd, cap, sluiceKey(randKey)), true, 0})
		}
	}
	// Coalesced calls: coalesce.lua, which the store sends when it coalesces concurrent
	// decisions into one call, made into 8 and into 32 (the most a batch
	// takes) GCRA decisions on as many random keys. Each case makes 8
	// times the decisions of a call alone, on keys of its own, so that no
	// key is driven into its limit: a denied decision writes nothing and
	// would flatter the figure.
	for _, n := range []int{8, 32} {
		batch, err := b.captureBatch(ctx, gcra, n)
		if err != nil {
			return err
		}
		batch = withKey(batch, sluiceKey(randKey), sluiceKey(fmt.Sprintf("batch%d:%s", n, randKey)))
		cases = append(cases, cpuCase{fmt.Sprintf("gcra, random keys, %d decisions per call (a batch), per decision", n), batch, true, n})
	}
	rCmd, err := b.captureRate(ctx)
	if err != nil {
		return err
	}
	cases = append(cases, cpuCase{"redis_rate v10 allow_n, random keys", withKey(rCmd, rateLimitPrefix+"capture", rateLimitPrefix+randKey), true, 0})
	// References, given the same key (and, but for the single-purpose
	// script, the same arguments) as Sluice's GCRA command: the floor of a
	// script call, and what its Redis commands cost.
	gcraRand := withKey(gcraCmd, cap, sluiceKey(randKey))
	var refs []cpuCase
	for _, r := range []struct {
		name, src string
		args      []string
	}{
		{"trivial `return 1`", "return 1", nil},
		{"reference: a table reply `return {1, 2, 3}`", refTableReply, nil},
		{"reference: TIME", refTime, nil},
		{"reference: TIME, GET", refTimeGet, nil},
		{"reference: TIME, GET, SET PX (constants)", refTimeGetSetPX, nil},
		{"reference: TIME, GET, SET KEEPTTL (constants)", refTimeGetSetKeepTTL, nil},
		{"reference: single-purpose GCRA script (TIME, GET, SET PX), as of d2d6579", refGCRA, []string{"", "2000000", "32000000"}},
		{"reference: the leanest GCRA step (TIME, GET, SET PX, a string reply)", refGCRALean, nil},
	} {
		sha, err := admin(b.srv.addr, "SCRIPT", "LOAD", r.src)
		if err != nil {
			return err
		}
		cmd := slices.Clone(gcraRand)
		cmd[0], cmd[1] = "EVALSHA", sha
		if r.args != nil {
			cmd = append(cmd[:4], r.args...)
		}
		refs = append(refs, cpuCase{r.name + ", random keys", cmd, true, 0})
	}
	cases = append(refs, cases...)

	const clients, pipeline = 16, 16
	calls := func(per int) int { // the calls of a case: a batch's make 8x the decisions
		if per == 0 {
			return *flagCPURequest
		}
		return *flagCPURequest * 8 / per
	}
	samples := make([][]sample, len(cases))
	redo, discarded := *flagRedo, 0
	for round := 0; round < *flagRounds; round++ {
		b.quiet()
		ss := make([]sample, len(cases))
		for i, c := range cases {
			s, err := b.loadRB(c.cmd, clients, pipeline, calls(c.per), c.random)
			if err != nil {
				return fmt.Errorf("%s: %w", c.name, err)
			}
			ss[i] = s
		}
		if disturbed(ss) && redo > 0 {
			redo--
			discarded++
			round--
			continue
		}
		for i := range cases {
			samples[i] = append(samples[i], ss[i])
		}
	}
	fmt.Printf("### Redis CPU per decision\n\n")
	fmt.Printf("Each case replays the exact command the client sends (captured through MONITOR) with redis-benchmark -c %d -P %d -n %d; "+
		"CONFIG RESETSTAT before each, then INFO commandstats: usec_per_call of EVALSHA (the whole script, with the commands it runs). "+
		"Median of %d rounds, cases interleaved.\n\n", clients, pipeline, *flagCPURequest, *flagRounds)
	if discarded > 0 {
		fmt.Printf("%d round(s) discarded and run again: other processes used more than %.0f%% of one core during a run.\n\n", discarded, 100**flagDisturbed)
	}
	fmt.Println("| case | EVALSHA usec_per_call | × trivial | range over rounds | commands run by the script per call | calls/s |")
	fmt.Println("|---|--:|--:|--:|--:|--:|")
	base := median(samples[0], evalUsec).evalUsec
	for i, c := range cases {
		m := median(samples[i], evalUsec)
		lo, hi := samples[i][0].evalUsec, samples[i][0].evalUsec
		for _, s := range samples[i] {
			lo, hi = min(lo, s.evalUsec), max(hi, s.evalUsec)
		}
		per := float64(max(c.per, 1))
		fmt.Printf("| %s | %.2f | %.2fx | %.2f–%.2f | %.1f | %s |\n", c.name, m.evalUsec/per, m.evalUsec/per/base, lo/per, hi/per, m.innerCalls/per, thousands(m.rate*per))
	}
	fmt.Printf("\nCommands (PORT is the server's port):\n\n```\n")
	for _, c := range cases {
		fmt.Printf("redis-benchmark %s\n", portless(quote(b.rbArgs(c.cmd, clients, pipeline, calls(c.per), c.random)), b.srv.port))
	}
	fmt.Printf("```\n\n")
	return nil
}

// memory measures what one key costs Redis.
func (b *bench) memory(ctx context.Context) error {
	type memCase struct {
		name   string
		decide decider
		rkey   func(key string) string
	}
	// Limits whose state outlives the run (an hour), so that no key expires
	// while the keys are written; the state's size does not depend on them.
	long := []struct {
		name  string
		limit algo.Limit
	}{
		{"gcra", algo.GCRA{Burst: 15, Count: 1, Period: time.Hour}},
		{"token_bucket", algo.TokenBucket{Burst: 16, Count: 1, Period: time.Hour}},
		{"fixed_window", algo.FixedWindow{Count: 100, Window: 24 * time.Hour}},
		{"gate", algo.Gate{Interval: time.Hour}},
		{"window_counter", algo.WindowCounter{Slice: time.Minute, Limits: []algo.Window{{Count: 100, Window: time.Hour}}}},
		{"sliding_log (1 entry)", algo.SlidingLog{Limits: []algo.Window{{Count: 100, Window: time.Hour}}}},
		{"concurrency (1 slot held)", algo.Concurrency{Count: 10, HoldFor: time.Hour}},
	}
	var cases []memCase
	for _, a := range long {
		plan := algo.MustCompile(a.limit)
		cases = append(cases, memCase{a.name, b.sluice(a.limit, false), func(k string) string {
			return sredis.StateKey(sredis.DefaultPrefix, store.Request{Key: k, Plan: plan})
		}})
	}
	hourly := redis_rate.Limit{Rate: 1, Burst: 16, Period: time.Hour}
	cases = append(cases, memCase{"redis_rate v10 (peer)", func(ctx context.Context, key string) (bool, error) {
		r, err := b.rl64.Allow(ctx, key, hourly)
		if err != nil {
			return false, err
		}
		return r.Allowed > 0, nil
	}, func(k string) string { return rateLimitPrefix + k }})

	fmt.Printf("### Redis memory per key\n\n")
	fmt.Printf("MEMORY USAGE (SAMPLES 0) of one key after one allowed decision (key `user:1`; limits whose state lives an hour: GCRA 15 per hour, token bucket 16 at 1 per hour, fixed window of a day, gate of an hour, a window counter and a sliding log of 100 an hour, 10 concurrency slots held an hour, redis_rate 1 per hour burst 16), and the growth of INFO used_memory over %d keys after one decision each, divided by the keys (includes the main and expires dictionaries).\n\n", *flagMemKeys)
	fmt.Println("| algorithm | Redis key | type | MEMORY USAGE bytes | used_memory bytes per key |")
	fmt.Println("|---|---|---|--:|--:|")
	for _, c := range cases {
		if err := b.reset(); err != nil {
			return err
		}
		ok, err := c.decide(ctx, "user:1")
		if err != nil {
			return err
		}
		if !ok {
			return fmt.Errorf("%s: first decision denied", c.name)
		}
		rkey := c.rkey("user:1")
		usage, err := b.admin.integer("MEMORY", "USAGE", rkey, "SAMPLES", "0")
		if err != nil {
			return fmt.Errorf("%s: %w", c.name, err)
		}
		typ, _ := b.admin.str("TYPE", rkey)
		enc, _ := b.admin.do("OBJECT", "ENCODING", rkey)

		if err := b.reset(); err != nil {
			return err
		}
		before, err := b.usedMemory()
		if err != nil {
			return err
		}
		if err := b.fill(ctx, c.decide, *flagMemKeys); err != nil {
			return fmt.Errorf("%s: %w", c.name, err)
		}
		after, err := b.usedMemory()
		if err != nil {
			return err
		}
		n, err := b.admin.integer("DBSIZE")
		if err != nil {
			return err
		}
		if n != int64(*flagMemKeys) {
			return fmt.Errorf("%s: DBSIZE %d after %d keys", c.name, n, *flagMemKeys)
		}
		fmt.Printf("| %s | `%s` | %s (%v) | %d | %.1f |\n", c.name, rkey, typ, enc, usage, float64(after-before)/float64(n))
	}
	fmt.Println()
	return nil
}

func (b *bench) usedMemory() (int64, error) {
	m, err := b.admin.info("memory")
	if err != nil {
		return 0, err
	}
	return strconv.ParseInt(m["used_memory"], 10, 64)
}

// fill makes one decision on each of n keys, from -goroutines goroutines.
func (b *bench) fill(ctx context.Context, d decider, n int) error {
	var wg sync.WaitGroup
	errs := make([]error, *flagGoroutines)
	for g := 0; g < *flagGoroutines; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			for i := g; i < n; i += *flagGoroutines {
				if _, err := d(ctx, "user:"+strconv.Itoa(i)); err != nil {
					errs[g] = err
					return
				}
			}
		}(g)
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

var _ = store.Request{}

// disturbed reports whether other processes used more than -disturbed of
// one core during any run of a round.
func disturbed(ss []sample) bool {
	for _, s := range ss {
		if s.elapsed > 0 && s.foreignCPU.Seconds() > *flagDisturbed*s.elapsed.Seconds() {
			return true
		}
	}
	return false
}
