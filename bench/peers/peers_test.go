// Package peers measures Sluice's embedded store and limiter handle next to
// the in-process Go rate limiters people reach for, in one `go test -bench`
// run, each used the way its README shows:
//
//	go test -bench . -benchtime 300ms -count 3 ./peers     (from bench/)
//
// Every case decides over 1024 keys (or one hot key), with limits loose
// enough that every decision is allowed, at the library's own clock:
//
//   - go-limiter: github.com/sethvargo/go-limiter memorystore, Take
//   - xrate: a golang.org/x/time/rate Limiter per key in a mutex-guarded
//     map, Allow
//   - ulule: github.com/ulule/limiter/v3 with its memory store, Get
//   - throttled: github.com/throttled/throttled/v2 GCRA on its memstore,
//     RateLimitCtx
//   - sluice-decide: memory.Store.Decide with the limit value in the
//     request (built from variables, as a configured limit is)
//   - sluice-allow: memory.Store.AllowN (the admission alone) with the
//     limit value in the call
//   - sluice-limiter: a sluice.Limiter handle on the memory store, Allow
//   - sluice-store: Decide through the store.Store interface, where it
//     is not inlined, with the limit compiled once: docs/library.md's
//     example (perUser); GCRA
//
// Sub-benchmarks are named library/algorithm/shape, the shape being
// serial (one goroutine), parallel (GOMAXPROCS goroutines over the keys)
// or hotkey (GOMAXPROCS goroutines on one key).
package peers

import (
	"context"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sethvargo/go-limiter/memorystore"
	"github.com/throttled/throttled/v2"
	tmemstore "github.com/throttled/throttled/v2/store/memstore"
	ulule "github.com/ulule/limiter/v3"
	ulmemory "github.com/ulule/limiter/v3/drivers/store/memory"
	"golang.org/x/time/rate"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/algo"
	"github.com/sluicehq/sluice/store"
	"github.com/sluicehq/sluice/store/memory"
)

const nkeys = 1024

var keys = func() []string {
	k := make([]string, nkeys)
	for i := range k {
		k[i] = "user:" + strconv.Itoa(i)
	}
	return k
}()

// decider is one library's decision on a key.
type decider func(key string) bool

// run measures d serially, in parallel over the keys and in parallel on
// one key, reporting the share of decisions denied (denied/op), which
// should be 0: a library that denies under a limit this loose is wrong, or
// failed under contention.
func run(b *testing.B, d decider) {
	b.Run("serial", func(b *testing.B) {
		b.ReportAllocs()
		denied := 0
		for i := 0; i < b.N; i++ {
			if !d(keys[i&(nkeys-1)]) {
				denied++
			}
		}
		b.ReportMetric(float64(denied)/float64(b.N), "denied/op")
	})
	parallel := func(b *testing.B, hot bool) {
		b.ReportAllocs()
		var seq, denied atomic.Int64
		b.RunParallel(func(pb *testing.PB) {
			i := int(seq.Add(1)) * 7919
			for pb.Next() {
				k := keys[0]
				if !hot {
					k = keys[i&(nkeys-1)]
				}
				if !d(k) {
					denied.Add(1)
				}
				i++
			}
		})
		b.ReportMetric(float64(denied.Load())/float64(b.N), "denied/op")
	}
	b.Run("parallel", func(b *testing.B) { parallel(b, false) })
	b.Run("hotkey", func(b *testing.B) { parallel(b, true) })
}

// Loose limits: bursts of a billion, so nothing is denied in a run
// (Sluice's GCRA and token bucket refill at most once a µs per key).
var (
	burst  = int64(1 << 30)
	count  = int64(1_000_000)
	period = time.Second
)

func BenchmarkPeers(b *testing.B) {
	ctx := context.Background()
	b.Run("go-limiter/token_bucket", func(b *testing.B) {
		st, err := memorystore.New(&memorystore.Config{Tokens: uint64(burst), Interval: time.Hour})
		if err != nil {
			b.Fatal(err)
		}
		defer st.Close(ctx)
		run(b, func(key string) bool {
			_, _, _, ok, err := st.Take(ctx, key)
			return ok && err == nil
		})
	})
	b.Run("xrate/token_bucket", func(b *testing.B) {
		var mu sync.Mutex
		m := map[string]*rate.Limiter{}
		run(b, func(key string) bool {
			mu.Lock()
			l, ok := m[key]
			if !ok {
				l = rate.NewLimiter(rate.Limit(count), int(burst))
				m[key] = l
			}
			mu.Unlock()
			return l.Allow()
		})
	})
	b.Run("ulule/fixed_window", func(b *testing.B) {
		l := ulule.New(ulmemory.NewStore(), ulule.Rate{Period: time.Hour, Limit: burst})
		run(b, func(key string) bool {
			c, err := l.Get(ctx, key)
			return err == nil && !c.Reached
		})
	})
	b.Run("throttled/gcra", func(b *testing.B) {
		st, err := tmemstore.NewCtx(65536)
		if err != nil {
			b.Fatal(err)
		}
		rl, err := throttled.NewGCRARateLimiterCtx(st, throttled.RateQuota{MaxRate: throttled.PerSec(int(count)), MaxBurst: int(burst)})
		if err != nil {
			b.Fatal(err)
		}
		run(b, func(key string) bool {
			limited, _, err := rl.RateLimitCtx(ctx, key, 1)
			return err == nil && !limited
		})
	})
	limits := []struct {
		name  string
		limit func() algo.Limit
	}{
		{"gcra", func() algo.Limit { return algo.GCRA{Burst: burst, Count: count, Period: period} }},
		{"token_bucket", func() algo.Limit { return algo.TokenBucket{Burst: burst, Count: count, Period: period} }},
		{"fixed_window", func() algo.Limit { return algo.FixedWindow{Count: burst, Window: time.Hour} }},
	}
	for _, l := range limits {
		b.Run("sluice-decide/"+l.name, func(b *testing.B) {
			st := memory.New()
			defer st.Close()
			// The limit's value built in the call from configured numbers
			// and compiled there (algo.Compile): what a caller that keeps
			// no plan pays.
			var d decider
			switch l.name {
			case "gcra":
				d = func(key string) bool {
					p, _ := algo.Compile(algo.GCRA{Burst: burst, Count: count, Period: period})
					r, err := st.Decide(ctx, store.Request{Key: key, Plan: &p, Cost: 1})
					return err == nil && r.Allowed
				}
			case "token_bucket":
				d = func(key string) bool {
					p, _ := algo.Compile(algo.TokenBucket{Burst: burst, Count: count, Period: period})
					r, err := st.Decide(ctx, store.Request{Key: key, Plan: &p, Cost: 1})
					return err == nil && r.Allowed
				}
			case "fixed_window":
				d = func(key string) bool {
					p, _ := algo.Compile(algo.FixedWindow{Count: burst, Window: time.Hour})
					r, err := st.Decide(ctx, store.Request{Key: key, Plan: &p, Cost: 1})
					return err == nil && r.Allowed
				}
			}
			run(b, d)
		})
		b.Run("sluice-allow/"+l.name, func(b *testing.B) {
			st := memory.New()
			defer st.Close()
			var d decider
			switch l.name {
			case "gcra":
				d = func(key string) bool {
					p, _ := algo.Compile(algo.GCRA{Burst: burst, Count: count, Period: period})
					ok, err := st.AllowN(ctx, key, &p, time.Time{}, 1, nil)
					return err == nil && ok
				}
			case "token_bucket":
				d = func(key string) bool {
					p, _ := algo.Compile(algo.TokenBucket{Burst: burst, Count: count, Period: period})
					ok, err := st.AllowN(ctx, key, &p, time.Time{}, 1, nil)
					return err == nil && ok
				}
			case "fixed_window":
				d = func(key string) bool {
					p, _ := algo.Compile(algo.FixedWindow{Count: burst, Window: time.Hour})
					ok, err := st.AllowN(ctx, key, &p, time.Time{}, 1, nil)
					return err == nil && ok
				}
			}
			run(b, d)
		})
		b.Run("sluice-limiter/"+l.name, func(b *testing.B) {
			st := memory.New()
			defer st.Close()
			lim, err := sluice.NewLimiter(st, l.limit())
			if err != nil {
				b.Fatal(err)
			}
			run(b, func(key string) bool {
				ok, err := lim.Allow(ctx, key)
				return err == nil && ok
			})
		})
	}
	b.Run("sluice-store/gcra", func(b *testing.B) {
		var st store.Store = memory.New()
		defer st.Close()
		p := algo.MustCompile(algo.GCRA{Burst: burst, Count: count, Period: period})
		run(b, func(key string) bool {
			r, err := st.Decide(ctx, store.Request{Key: key, Plan: p, Cost: 1})
			return err == nil && r.Allowed
		})
	})
}
