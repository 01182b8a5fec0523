package redis_test

// Benchmarks of the windowed algorithms on the Redis store (issue 3),
// reported in bench/NOTES.md's "Sliding windows (issue 3)" section:
//
//	go test ./store/redis -run '^$' -bench BenchmarkWindowed -benchtime 3s
//
// Each benchmark starts its own redis-server (127.0.0.1, no persistence).
// "serial" is one goroutine on one key; "parallel-keys" is 64 goroutines
// on a key of their own each; both advance the request time by 1ms per
// decision and key, so an exact log holds about 1000 entries per key in
// its 1s window, as in the memory store's benchmark. "hotkey" is 64
// goroutines on one key under Redis TIME. decisions/s is the client's
// throughput; server-µs/op is INFO commandstats' usec_per_call of EVALSHA,
// the script's CPU per decision in Redis. They measure; they never fail on
// a timing.

import (
	"context"
	"regexp"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/algo"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/store"
	"github.com/sluicehq/sluice/store/redis"
)

var windowedBenchLimits = []struct {
	name  string
	limit algo.Limit
}{
	{"gcra", algo.GCRA{Burst: 1_000_000_000, Count: 1_000_000, Period: time.Second}},
	{"sliding_log/exact", algo.SlidingLog{Limits: []algo.Window{{Count: 100_000, Window: time.Second}, {Count: 1_000_000, Window: time.Minute}}}},
	{"sliding_log/sampled", algo.SlidingLog{Limits: []algo.Window{{Count: 100_000, Window: time.Second}, {Count: 1_000_000, Window: time.Minute}}, Buckets: 60}},
	{"sliding_log/exact-denied", algo.SlidingLog{Limits: []algo.Window{{Count: 100, Window: time.Second}}}},
	{"sliding_log/uniform-denied", algo.SlidingLog{Limits: []algo.Window{{Count: 100, Window: time.Second}}, Buckets: 60, Mode: algo.Uniform}},
	{"window_counter", algo.WindowCounter{Limits: []algo.Window{{Count: 1_000_000, Window: time.Second}, {Count: 5_000_000, Window: 10 * time.Second}, {Count: 7_000_000, Window: 15 * time.Second}}}},
}

var benchT0 = time.UnixMicro(1800003000334587)

func BenchmarkWindowed(b *testing.B) {
	srv := redistest.Start(b)
	st, err := redis.Open(context.Background(), srv.URL(), redis.Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close()
	for _, l := range windowedBenchLimits {
		for _, m := range []struct {
			name       string
			goroutines int
			hot        bool
		}{{"serial", 1, false}, {"parallel-keys", 64, false}, {"hotkey", 64, true}} {
			if _, err := srv.Do("FLUSHALL"); err != nil {
				b.Fatal(err)
			}
			f := newFixture(b, st, l.limit, m.goroutines, m.hot)
			b.Run(l.name+"/"+m.name, func(b *testing.B) { f.run(b, srv) })
		}
	}
}

var usecRe = regexp.MustCompile(`cmdstat_evalsha:calls=(\d+),usec=(\d+)`)

// fixture is one benchmark's keys, each goroutine's own (its time
// advancing 1ms per decision) or one hot key under Redis TIME.
type fixture struct {
	st    *redis.Store
	lim   algo.Limit
	hot   bool
	keys  []string
	times []time.Time
}

// newFixture makes the keys and, unless hot, warms each with a full
// window of decisions 1ms apart, all keys at once.
func newFixture(b *testing.B, st *redis.Store, lim algo.Limit, goroutines int, hot bool) *fixture {
	f := &fixture{st: st, lim: lim, hot: hot, keys: make([]string, goroutines), times: make([]time.Time, goroutines)}
	var wg sync.WaitGroup
	for w := range f.keys {
		f.keys[w], f.times[w] = "w"+strconv.Itoa(w), benchT0
		if hot {
			f.keys[w] = "hot"
			continue
		}
		wg.Add(1)
		plan := algo.MustCompile(lim)
		go func() {
			defer wg.Done()
			for range 1100 {
				f.times[w] = f.times[w].Add(time.Millisecond)
				if _, err := st.Decide(context.Background(), store.Request{Key: f.keys[w], Plan: plan, Cost: 1, Time: f.times[w]}); err != nil {
					b.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	return f
}

func (f *fixture) run(b *testing.B, srv *redistest.Server) {
	if _, err := srv.Do("CONFIG", "RESETSTAT"); err != nil {
		b.Fatal(err)
	}
	var worker, total, allowed atomic.Int64
	one := func(next func() bool, w int) {
		ctx := context.Background()
		req := store.Request{Key: f.keys[w], Plan: algo.MustCompile(f.lim), Cost: 1}
		var n, ok int64
		for next() {
			if !f.hot {
				f.times[w] = f.times[w].Add(time.Millisecond)
				req.Time = f.times[w]
			}
			r, err := f.st.Decide(ctx, req)
			if err != nil {
				b.Error(err)
				return
			}
			n++
			if r.Allowed {
				ok++
			}
		}
		total.Add(n)
		allowed.Add(ok)
	}
	b.ResetTimer()
	if len(f.keys) == 1 {
		one(b.Loop, 0)
	} else {
		b.SetParallelism((len(f.keys) + runtime.GOMAXPROCS(0) - 1) / runtime.GOMAXPROCS(0))
		b.RunParallel(func(pb *testing.PB) { one(pb.Next, int(worker.Add(1)-1)%len(f.keys)) })
	}
	b.StopTimer()
	n := total.Load()
	b.ReportMetric(float64(n)/b.Elapsed().Seconds(), "decisions/s")
	b.ReportMetric(float64(allowed.Load())/float64(n), "allowed/op")
	info, err := srv.Do("INFO", "commandstats")
	if err != nil {
		b.Fatal(err)
	}
	if m := usecRe.FindStringSubmatch(info); m != nil {
		calls, _ := strconv.ParseFloat(m[1], 64)
		usec, _ := strconv.ParseFloat(m[2], 64)
		b.ReportMetric(usec/calls, "server-µs/op")
	}
}
