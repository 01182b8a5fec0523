package redis_test

// Benchmarks of the Redis store's Decide against a real redis-server that
// internal/redistest starts on 127.0.0.1. bench/run.sh runs them and
// BENCHMARKS.md reports them; they measure, they never fail on a timing.
//
//   - 1goroutine: one decision at a time, so ns/op is a round trip.
//   - parallel:   b.RunParallel with 32 goroutines per GOMAXPROCS (64 on
//     2 cores), which rueidis pipelines over its connections.
//
// Keys are random among 100k (mostly allowed: the script writes) or one hot
// key (limited after 16: the script only reads). The store's clock (Redis
// TIME) is used. bench/cmd/redisbench compares the same store with other
// clients and with redis-benchmark.

import (
	"context"
	"math/rand/v2"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/algo"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/store"
	"github.com/sluicehq/sluice/store/redis"
)

var benchLimits = []struct {
	name  string
	limit algo.Limit
}{
	{"gcra", algo.GCRA{Burst: 15, Count: 30, Period: time.Minute}},
	{"token_bucket", algo.TokenBucket{Burst: 16, Count: 30, Period: time.Minute}},
	{"fixed_window", algo.FixedWindow{Count: 100, Window: time.Minute}},
	{"gate", algo.Gate{Interval: time.Second}},
}

const benchKeys = 100_000

func BenchmarkDecide(b *testing.B) {
	srv := redistest.Start(b)
	st, err := redis.Open(context.Background(), srv.URL(), redis.Options{})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { st.Close() })
	keys := make([]string, benchKeys)
	for i := range keys {
		keys[i] = "user:" + strconv.Itoa(i)
	}
	for _, l := range benchLimits {
		b.Run(l.name+"/1goroutine/random-keys", func(b *testing.B) { benchRedis(b, st, l.limit, keys, false) })
		b.Run(l.name+"/parallel/random-keys", func(b *testing.B) { benchRedis(b, st, l.limit, keys, true) })
		if l.name == "gcra" {
			b.Run(l.name+"/1goroutine/hot-key", func(b *testing.B) { benchRedis(b, st, l.limit, keys[:1], false) })
			b.Run(l.name+"/parallel/hot-key", func(b *testing.B) { benchRedis(b, st, l.limit, keys[:1], true) })
		}
		// Start the next algorithm on empty keys: each keeps its own kind
		// of value.
		if _, err := srv.Do("FLUSHALL"); err != nil {
			b.Fatal(err)
		}
	}
}

func benchRedis(b *testing.B, st *redis.Store, lim algo.Limit, keys []string, parallel bool) {
	ctx := context.Background()
	var seed, total, allowed atomic.Int64
	work := func(next func() bool) {
		r := rand.New(rand.NewPCG(uint64(seed.Add(1)), 2))
		req := store.Request{Plan: algo.MustCompile(lim), Cost: 1}
		var n, ok int64
		for next() {
			req.Key = keys[r.IntN(len(keys))]
			res, err := st.Decide(ctx, req)
			if err != nil {
				b.Error(err)
				break
			}
			n++
			if res.Allowed {
				ok++
			}
		}
		total.Add(n)
		allowed.Add(ok)
	}
	b.ReportAllocs()
	if parallel {
		b.SetParallelism(32)
		b.RunParallel(func(pb *testing.PB) { work(pb.Next) })
	} else {
		work(b.Loop)
	}
	if n := total.Load(); n > 0 {
		b.ReportMetric(float64(allowed.Load())/float64(n), "allowed/op")
	}
}

// BenchmarkBlockedCheck: a check of a key under a block, with the
// over-limit cache (no round trip: the cache repeats the block's denial)
// and without it (Redis answers from the block key), next to a check of a
// key that is not blocked, in one run:
//
//	go test -run '^$' -bench BenchmarkBlockedCheck -benchmem ./store/redis
func BenchmarkBlockedCheck(b *testing.B) {
	srv := redistest.Start(b)
	ctx := context.Background()
	lim := algo.Blocking{Limit: algo.GCRA{Burst: 1_000_000, Count: 1_000_000, Period: time.Second}, Block: algo.Block{For: time.Hour}}
	for _, c := range []struct {
		name  string
		cache int
		block bool
	}{{"unblocked", 0, false}, {"blocked/over-limit-cache", 1000, true}, {"blocked/no-cache", 0, true}} {
		b.Run(c.name, func(b *testing.B) {
			st, err := redis.Open(ctx, srv.URL(), redis.Options{OverLimitCache: c.cache, Prefix: "bench:" + c.name + ":"})
			if err != nil {
				b.Fatal(err)
			}
			defer st.Close()
			req := store.Request{Key: "k", Plan: algo.MustCompile(lim), Cost: 1}
			if c.block { // start the block: one cost over the limit
				if r, err := st.Decide(ctx, store.Request{Key: "k", Plan: algo.MustCompile(lim), Cost: 2_000_000}); err != nil || r.DeniedBy != algo.DeniedByBlock {
					b.Fatal(r, err)
				}
			}
			before := st.OverLimitStats().Hits
			for b.Loop() {
				r, err := st.Decide(ctx, req)
				if err != nil || r.Allowed == c.block {
					b.Fatal(r, err)
				}
			}
			b.ReportMetric(float64(st.OverLimitStats().Hits-before)/float64(b.N), "cache-hits/op")
		})
	}
}

// BenchmarkSettle: a settle (settle.lua: take the ticket, give back on one
// fixed window, tell the over-limit caches) against a check (decide.lua)
// of the same key, one at a time: each is one round trip. The tickets are
// issued before the timer starts.
func BenchmarkSettle(b *testing.B) {
	srv := redistest.Start(b)
	st, err := redis.Open(context.Background(), srv.URL(), redis.Options{})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { st.Close() })
	ctx := context.Background()
	req := store.Request{Key: "budget:acme", Plan: algo.MustCompile(algo.FixedWindow{Count: algo.MaxCount, Window: time.Hour}), Cost: 1}
	b.Run("check", func(b *testing.B) {
		for b.Loop() {
			if _, err := st.Decide(ctx, req); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("settle", func(b *testing.B) {
		tickets := make([]store.Request, b.N)
		for i := range tickets {
			// Tags of 5,000 tickets each: one holds at most MaxOpenTickets.
			tag := "budget:acme#" + strconv.Itoa(i/5000)
			tickets[i] = store.Request{Key: tag + "#" + strconv.Itoa(i), Tag: tag}
			if err := st.Issue(ctx, tickets[i], time.Hour); err != nil {
				b.Fatal(err)
			}
		}
		back := req // given back in the window it was counted in
		back.Time = time.Now()
		reqs := []store.Request{back}
		b.ResetTimer()
		for i := range b.N {
			if ok, err := st.Settle(ctx, tickets[i], reqs, algo.Reward); err != nil || !ok {
				b.Fatal(ok, err)
			}
		}
	})
}
