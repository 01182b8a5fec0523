package redis_test

import (
	"context"
	"math/rand/v2"
	"strconv"
	"testing"
	"time"

	"github.com/sluicehq/sluice/algo"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/policy"
	"github.com/sluicehq/sluice/store"
	"github.com/sluicehq/sluice/store/redis"
)

// traceLimits are limits of every kind, those whose denials record
// among them.
var traceLimits = []algo.Limit{
	algo.GCRA{Burst: 2, Count: 3, Period: time.Second},
	algo.TokenBucket{Burst: 4, Count: 2, Period: time.Second},
	algo.FixedWindow{Count: 3, Window: time.Second},
	algo.Gate{Interval: 300 * time.Millisecond},
	algo.SlidingLog{Limits: []algo.Window{{Count: 3, Window: time.Second}, {Count: 5, Window: 3 * time.Second}}, MinGap: 50 * time.Millisecond},
	algo.SlidingLog{Limits: []algo.Window{{Count: 4, Window: time.Second}}, Buckets: 4},
	algo.SlidingLog{Limits: []algo.Window{{Count: 3, Window: time.Second}}, Mode: algo.Uniform},
	algo.SlidingLog{Limits: []algo.Window{{Count: 3, Window: time.Second}}, Mode: algo.Nary},
	algo.WindowCounter{Slice: 100 * time.Millisecond, Limits: []algo.Window{{Count: 4, Window: time.Second}}},
}

// TestOverLimitCacheSameDecisions: one random trace, on a store with the
// over-limit cache and on one without (one Redis, two prefixes), gives the
// same decisions at every step. With one request of cost 1 at a time the
// results are the same too, but for Remaining, which the cache gives as it
// was at the denial (no more than the store's); with several levels and
// costs, a denial from the cache waits no longer than the store's. The cache answers a good
// share of the trace.
func TestOverLimitCacheSameDecisions(t *testing.T) {
	srv := redistest.Start(t)
	ctx := context.Background()
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	for _, single := range []bool{true, false} {
		r := rand.New(rand.NewPCG(seed, 5))
		cached := open(t, srv, redis.Options{Prefix: "c" + strconv.FormatBool(single) + ":", OverLimitCache: 1000})
		plain := open(t, srv, redis.Options{Prefix: "p" + strconv.FormatBool(single) + ":"})
		now := time.Unix(1_800_000_000, 0)
		hits := int64(0)
		for step := range 3000 {
			now = now.Add(time.Duration(r.IntN(10_000)) * time.Microsecond)
			n := 1
			if !single {
				n = 1 + r.IntN(3)
			}
			reqs := make([]store.Request, n)
			for i := range reqs {
				l := r.IntN(len(traceLimits))
				reqs[i] = store.Request{Key: "k" + strconv.Itoa(l) + "-" + strconv.Itoa(r.IntN(2)), Plan: algo.MustCompile(traceLimits[l]), Cost: 1, Time: now}
				if !single {
					reqs[i].Cost = r.Int64N(4)
					reqs[i].Shadow = r.IntN(8) == 0
				}
			}
			got, want := make([]algo.Result, n), make([]algo.Result, n)
			gotPass, err1 := cached.DecideAll(ctx, reqs, got)
			wantPass, err2 := plain.DecideAll(ctx, reqs, want)
			if err1 != nil || err2 != nil {
				t.Fatal(err1, err2)
			}
			hit := cached.OverLimitStats().Hits > hits
			hits = cached.OverLimitStats().Hits
			if gotPass != wantPass {
				t.Fatalf("single %v step %d %+v: cached store says %v, store %v (cache hit %v)", single, step, reqs, gotPass, wantPass, hit)
			}
			if single {
				// Remaining from the cache is the store's at the denial: a
				// window may have freed some since (a sliding log denied by
				// its minimum gap), never enough for the cost.
				g, w := got[0], want[0]
				g.Remaining, w.Remaining = 0, 0
				if g != w || got[0].Remaining > want[0].Remaining {
					t.Fatalf("step %d %+v: cached store %+v, store %+v (cache hit %v)", step, reqs[0], got[0], want[0], hit)
				}
			}
			if !hit {
				continue
			}
			g, w := summary(reqs, got), summary(reqs, want)
			if g.RetryAfter <= 0 || w.RetryAfter != algo.Never && g.RetryAfter > w.RetryAfter {
				t.Fatalf("step %d %+v: cached denial waits %v, the store's %v", step, reqs, g.RetryAfter, w.RetryAfter)
			}
		}
		t.Logf("single %v: %d of 3000 decisions from the cache", single, hits)
		if hits < 300 {
			t.Fatalf("single %v: only %d decisions from the cache", single, hits)
		}
	}
}

func summary(reqs []store.Request, res []algo.Result) algo.Result {
	levels := make([]policy.Level, len(reqs))
	for i := range reqs {
		levels[i] = policy.Level{Key: reqs[i].Key, Shadow: reqs[i].Shadow, Result: res[i]}
	}
	return policy.Summarize(levels)
}

// TestOverLimitCacheSkipsRedis: on Redis's clock, a denied key is denied
// again without a script call until its retry-after; a reset or a refund
// through the store forgets it at once.
func TestOverLimitCacheSkipsRedis(t *testing.T) {
	srv := redistest.Start(t)
	st := open(t, srv, redis.Options{OverLimitCache: 100})
	ctx := context.Background()
	req := store.Request{Key: "alex", Plan: algo.MustCompile(algo.GCRA{Burst: 0, Count: 1, Period: time.Hour}), Cost: 1}
	decide := func() algo.Result {
		t.Helper()
		res, err := st.Decide(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	if !decide().Allowed || decide().Allowed {
		t.Fatal("want allowed, then denied")
	}
	before := scriptCalls(t, srv)
	for range 100 {
		if res := decide(); res.Allowed || res.RetryAfter <= 0 || res.RetryAfter > time.Hour {
			t.Fatalf("from the cache: %+v", res)
		}
	}
	if calls := scriptCalls(t, srv) - before; calls != 0 {
		t.Fatalf("%d script calls for 100 cached denials", calls)
	}
	if err := st.Reset(ctx, []store.Request{req}); err != nil {
		t.Fatal(err)
	}
	if !decide().Allowed {
		t.Fatal("denied after a reset")
	}
	if err := st.Adjust(ctx, req, algo.Reward); err != nil {
		t.Fatal(err)
	}
	if !decide().Allowed || decide().Allowed {
		t.Fatal("want one admission after one refund, then a denial")
	}
	if err := st.Adjust(ctx, req, algo.Reward); err != nil {
		t.Fatal(err)
	}
	if !decide().Allowed {
		t.Fatal("denied after a refund")
	}
	st.ClearOverLimit()
	if n := st.OverLimitStats().Entries; n != 0 {
		t.Fatalf("%d entries after ClearOverLimit", n)
	}
}

// TestOverLimitCacheRace: 100 goroutines race for a key with the cache on;
// exactly the limit is admitted, and the rest is denied (much of it by the
// cache).
func TestOverLimitCacheRace(t *testing.T) {
	srv := redistest.Start(t)
	st := open(t, srv, redis.Options{OverLimitCache: 100})
	req := store.Request{Key: "race", Plan: algo.MustCompile(algo.GCRA{Burst: 9, Count: 1, Period: time.Hour}), Cost: 1}
	allowed := make(chan bool, 100*20)
	done := make(chan struct{})
	for range 100 {
		go func() {
			defer func() { done <- struct{}{} }()
			for range 20 {
				res, err := st.Decide(context.Background(), req)
				if err != nil {
					t.Error(err)
					return
				}
				allowed <- res.Allowed
			}
		}()
	}
	for range 100 {
		<-done
	}
	close(allowed)
	n := 0
	for a := range allowed {
		if a {
			n++
		}
	}
	if n != 10 {
		t.Fatalf("%d admitted, want 10", n)
	}
	t.Logf("%d of 2000 from the cache", st.OverLimitStats().Hits)
}

// TestResetReachesOtherCaches: two stores (service instances) on one
// Redis, each caching a key's denial of an hour. A reset through one lets
// the other admit again within redis.ForgetPoll and a round trip (before,
// it kept its cached denial for the hour), and so does a refund; a forget
// whose message was lost is caught by the generation counter. The test
// waits for each without a deadline of its own: it fails by exceeding
// the whole run's, and logs how long each took.
func TestResetReachesOtherCaches(t *testing.T) {
	srv := redistest.Start(t)
	a := open(t, srv, redis.Options{OverLimitCache: 100})
	b := open(t, srv, redis.Options{OverLimitCache: 100})
	ctx := context.Background()
	req := store.Request{Key: "alex", Plan: algo.MustCompile(algo.GCRA{Burst: 0, Count: 1, Period: time.Hour}), Cost: 1}
	decide := func(st *redis.Store) bool {
		t.Helper()
		res, err := st.Decide(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		return res.Allowed
	}
	// denied fills the key and has both stores cache its denial.
	denied := func() {
		t.Helper()
		decide(a)
		if decide(a) || decide(b) {
			t.Fatal("want the key full")
		}
		if a.OverLimitStats().Entries != 1 || b.OverLimitStats().Entries != 1 {
			t.Fatalf("cached denials: %d and %d", a.OverLimitStats().Entries, b.OverLimitStats().Entries)
		}
	}
	// until waits for b to forget its denial, without deciding (which
	// would cache it again), and reports how long it took.
	until := func(what string) {
		t.Helper()
		start := time.Now()
		for b.OverLimitStats().Entries != 0 {
			time.Sleep(5 * time.Millisecond)
		}
		t.Logf("%s reached the other store's cache in %v", what, time.Since(start))
		if !decide(b) {
			t.Fatalf("after %s the other store still denies", what)
		}
	}
	denied()
	if err := a.Reset(ctx, []store.Request{req}); err != nil {
		t.Fatal(err)
	}
	until("a reset")

	denied()
	if err := a.Adjust(ctx, req, algo.Reward); err != nil {
		t.Fatal(err)
	}
	until("a reward")

	denied()
	ticket := store.Request{Key: "alex#ticket", Tag: "alex"}
	if err := a.Issue(ctx, ticket, time.Minute); err != nil {
		t.Fatal(err)
	}
	back := req // given back from just after the key's charge: all of it
	var err error
	if back.Time, err = a.Now(ctx); err != nil {
		t.Fatal(err)
	}
	if ok, err := a.Settle(ctx, ticket, []store.Request{back}, algo.Reward); !ok || err != nil {
		t.Fatal(ok, err)
	}
	until("a settle that gives back")

	// A forget whose message no store received: the counter moves alone.
	denied()
	if _, err := srv.Do("DEL", redis.StateKey(redis.DefaultPrefix, req)); err != nil {
		t.Fatal(err)
	}
	if _, err := srv.Do("INCR", redis.DefaultPrefix+"%forget:gen"); err != nil {
		t.Fatal(err)
	}
	until("a lost message")
}

// TestOverLimitCacheLeavesSlotsToRedis: a concurrency limit's denial is
// not cached, since a release frees a slot at any moment: with the cache
// on, an acquire denied on a full key is admitted as soon as a holder
// releases, and no decision on the key is answered from the cache.
func TestOverLimitCacheLeavesSlotsToRedis(t *testing.T) {
	st := open(t, redistest.Start(t), redis.Options{OverLimitCache: 1000})
	ctx := context.Background()
	c := algo.Concurrency{Count: 1, HoldFor: time.Minute}
	base, _ := algo.Compile(c)
	holder, release := base, base
	if algo.ForPermit(&holder, 7, algo.Acquire) != nil || algo.ForPermit(&release, 7, algo.Release) != nil {
		t.Fatal("a permit refused")
	}
	if r, err := st.Decide(ctx, store.Request{Key: "slots", Plan: &holder, Cost: 1}); err != nil || !r.Allowed {
		t.Fatal(r, err)
	}
	for range 3 {
		if r, err := st.Decide(ctx, store.Request{Key: "slots", Plan: algo.MustCompile(c), Cost: 1}); err != nil || r.Allowed {
			t.Fatal(r, err)
		}
	}
	if r, err := st.Decide(ctx, store.Request{Key: "slots", Plan: &release}); err != nil || r.Admitted != 1 {
		t.Fatal(r, err)
	}
	if r, err := st.Decide(ctx, store.Request{Key: "slots", Plan: algo.MustCompile(c), Cost: 1}); err != nil || !r.Allowed {
		t.Fatalf("after the release: %+v, %v", r, err)
	}
	if s := st.OverLimitStats(); s.Hits != 0 || s.Entries != 0 {
		t.Fatalf("the cache answered or kept a slot's denial: %+v", s)
	}
}

// TestOverLimitCacheHonoursBlocks: a blocking limit's trace decided with
// the cache on and off (two stores on one Redis, each with its own keys)
// gives the same answers at every step: the cache repeats a block's
// denial, aged, until the block's end and not after, with no script call
// while it does; a reset ends the block in Redis and in the cache.
func TestOverLimitCacheHonoursBlocks(t *testing.T) {
	srv := redistest.Start(t)
	cached := open(t, srv, redis.Options{OverLimitCache: 100, Prefix: "cached:"})
	plain := open(t, srv, redis.Options{Prefix: "plain:"})
	ctx := context.Background()
	lim := algo.Blocking{Limit: algo.GCRA{Burst: 1, Count: 1, Period: 2 * time.Second}, Block: algo.Block{For: 10 * time.Second, Growth: 2}}
	t0 := time.Unix(1_800_000_000, 0)
	decide := func(st *redis.Store, at time.Duration, cost int64) algo.Result {
		t.Helper()
		r, err := st.Decide(ctx, store.Request{Key: "k", Plan: algo.MustCompile(lim), Cost: cost, Time: t0.Add(at)})
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	var calls int
	for i, s := range []struct {
		at   time.Duration
		cost int64
	}{
		{0, 1}, {0, 1}, {time.Second, 1}, // over: a 10s block to 11s
		{2 * time.Second, 1}, {5 * time.Second, 1}, {5 * time.Second, 2}, {10 * time.Second, 1}, // in the block
		{11 * time.Second, 1},                                               // ended; the GCRA admits again
		{11 * time.Second, 1}, {11 * time.Second, 1}, {12 * time.Second, 1}, // over again: 20s, to 31s
		{20 * time.Second, 1}, {30 * time.Second, 1}, {31 * time.Second, 1},
	} {
		before := scriptCalls(t, srv)
		c := decide(cached, s.at, s.cost)
		calls = scriptCalls(t, srv) - before
		p := decide(plain, s.at, s.cost)
		if c != p {
			t.Fatalf("step %d at %v cost %d: cached %+v, plain %+v", i, s.at, s.cost, c, p)
		}
		inBlock := c.DeniedBy == algo.DeniedByBlock && i != 2 && i != 9 // not the two that start one
		if inBlock && s.cost == 1 && calls != 0 {
			t.Errorf("step %d: a blocked check took %d script calls", i, calls)
		}
	}
	if hits := cached.OverLimitStats().Hits; hits < 4 {
		t.Fatalf("%d cache hits", hits)
	}
	// A reset ends the block, in Redis and in the cache.
	decide(cached, 40*time.Second, 1)
	decide(cached, 40*time.Second, 1)
	for i, at := range []time.Duration{40 * time.Second, 41 * time.Second} { // a third block, 40s, to 80s
		if r := decide(cached, at, 1); r.DeniedBy != algo.DeniedByBlock || i == 1 && r.RetryAfter != 39*time.Second {
			t.Fatalf("the third block at %v: %+v", at, r)
		}
	}
	if err := cached.Reset(ctx, []store.Request{{Key: "k", Plan: algo.MustCompile(lim)}}); err != nil {
		t.Fatal(err)
	}
	if r := decide(cached, 42*time.Second, 1); !r.Allowed {
		t.Fatalf("after a reset: %+v", r)
	}
}
