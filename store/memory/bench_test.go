package memory_test

// Benchmarks of the memory store's Decide on existing keys. bench/run.sh
// runs them and BENCHMARKS.md reports them; they measure, they never fail
// on a timing.
//
// Every limit is an algo.Limit interface value built once, outside the
// timed loop (converting a struct to an interface inside the loop would
// allocate on every decision and be the benchmark's fault, not the
// store's). The limits are generous so that decisions take the admitting
// path, which writes the state (the gate, whose interval is 1µs, admits
// only some under the store clock); the allowed/op metric reports the
// fraction admitted. gcra-denied measures the limiting path.
//
// Each case runs:
//   - 1goroutine:      one goroutine, one existing key
//   - 1goroutine-keys: one goroutine over 1024 existing keys spread over
//     the shards, in turn (the serial baseline of parallel-keys)
//   - parallel-keys:   b.RunParallel (GOMAXPROCS goroutines) over the same
//     1024 keys, each goroutine starting at another place in the list
//   - parallel-hotkey: b.RunParallel on one existing key, so every
//     decision takes the same shard's mutex
//
// and, for gcra with the store clock only, two diagnostics of the parallel
// speedup:
//   - parallel-disjoint-keys: one store, but each goroutine keeps to its
//     own share of the 1024 keys (the shards' locks are still shared)
//   - parallel-private-stores: each goroutine its own store and keys,
//     sharing no memory (what the cores give with nothing to share)
//
// and a counter-example, gcra/clock=store/1goroutine-limit-in-loop: the
// same decision with a limit that changes every time (a GCRA whose burst
// grows), which the plan cache cannot hold: each is compiled, and the
// cache's places, filled and emptied every 4096 misses, cost about 9 B a
// decision.
//
// clock=store leaves Request.Time zero (the store reads the monotonic clock); clock=req
// sets Request.Time, advancing 1µs per decision in each goroutine.

import (
	"context"
	"fmt"
	"runtime"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/algo"
	"github.com/sluicehq/sluice/store"
	"github.com/sluicehq/sluice/store/memory"
)

var benchLimits = []struct {
	name  string
	limit algo.Limit
}{
	// T = 1µs and a tolerance of about 1000s: never limited in a run.
	{"gcra", algo.GCRA{Burst: 1_000_000_000, Count: 1_000_000, Period: time.Second}},
	{"token_bucket", algo.TokenBucket{Burst: 1_000_000_000, Count: 1_000_000, Period: time.Second}},
	{"fixed_window", algo.FixedWindow{Count: 1 << 50, Window: time.Hour}},
	{"gate", algo.Gate{Interval: time.Microsecond}},
	// CL.THROTTLE k 15 30 60: after the first 16, a key is limited.
	{"gcra-denied", algo.GCRA{Burst: 15, Count: 30, Period: time.Minute}},
}

const benchKeys = 1024

var benchT0 = time.UnixMicro(1800003000334587)

// How the goroutines of a parallel benchmark share keys and stores.
type sharing int

const (
	sharedKeys    sharing = iota // one store; every goroutine goes over every key
	disjointKeys                 // one store; each goroutine its own share of the keys
	privateStores                // each goroutine its own store with every key
)

func BenchmarkDecide(b *testing.B) {
	keys := make([]string, benchKeys)
	for i := range keys {
		keys[i] = "user:" + strconv.Itoa(i)
	}
	for _, l := range benchLimits {
		for _, clock := range []string{"store", "req"} {
			reqTime := clock == "req"
			prefix := l.name + "/clock=" + clock + "/"
			b.Run(prefix+"1goroutine", func(b *testing.B) { benchSerial(b, l.limit, reqTime, keys[:1]) })
			b.Run(prefix+"1goroutine-keys", func(b *testing.B) { benchSerial(b, l.limit, reqTime, keys) })
			b.Run(prefix+"parallel-keys", func(b *testing.B) { benchParallel(b, l.limit, reqTime, keys, sharedKeys) })
			b.Run(prefix+"parallel-hotkey", func(b *testing.B) { benchParallel(b, l.limit, reqTime, keys[:1], sharedKeys) })
			if l.name == "gcra" && clock == "store" {
				b.Run(prefix+"parallel-disjoint-keys", func(b *testing.B) { benchParallel(b, l.limit, reqTime, keys, disjointKeys) })
				b.Run(prefix+"parallel-private-stores", func(b *testing.B) { benchParallel(b, l.limit, reqTime, keys, privateStores) })
				b.Run(prefix+"1goroutine-limit-in-loop", benchLimitInLoop)
			}
		}
	}
}

// newStore returns a store holding every key, each after one decision at
// benchT0 (reqTime) or at the store's clock. The caller closes it.
func newStore(lim algo.Limit, reqTime bool, keys []string) (*memory.Store, error) {
	st := memory.New()
	var at time.Time
	if reqTime {
		at = benchT0
	}
	for _, k := range keys {
		if _, err := st.Decide(context.Background(), store.Request{Key: k, Plan: algo.MustCompile(lim), Cost: 1, Time: at}); err != nil {
			st.Close()
			return nil, err
		}
	}
	if st.Len() != len(keys) {
		st.Close()
		return nil, fmt.Errorf("store holds %d keys, want %d", st.Len(), len(keys))
	}
	return st, nil
}

func benchSerial(b *testing.B, lim algo.Limit, reqTime bool, keys []string) {
	st, err := newStore(lim, reqTime, keys)
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close()
	ctx := context.Background()
	req := store.Request{Plan: algo.MustCompile(lim), Cost: 1}
	at := benchT0
	var i, n, allowed int
	b.ReportAllocs()
	for b.Loop() {
		req.Key = keys[i]
		if i++; i == len(keys) {
			i = 0
		}
		if reqTime {
			at = at.Add(time.Microsecond)
			req.Time = at
		}
		r, err := st.Decide(ctx, req)
		if err != nil {
			b.Fatal(err)
		}
		n++
		if r.Allowed {
			allowed++
		}
	}
	b.StopTimer()
	if st.Len() != len(keys) {
		b.Fatalf("store holds %d keys after the run, want %d", st.Len(), len(keys))
	}
	b.ReportMetric(float64(allowed)/float64(n), "allowed/op")
}

func benchParallel(b *testing.B, lim algo.Limit, reqTime bool, keys []string, mode sharing) {
	procs := runtime.GOMAXPROCS(0) // the goroutines of b.RunParallel
	stores := make([]*memory.Store, 1)
	if mode == privateStores {
		stores = make([]*memory.Store, procs)
	}
	for i := range stores {
		st, err := newStore(lim, reqTime, keys)
		if err != nil {
			b.Fatal(err)
		}
		defer st.Close()
		stores[i] = st
	}
	var worker, total, allowed atomic.Int64
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		ctx := context.Background()
		w := int(worker.Add(1)) - 1
		st, mine, i := stores[0], keys, w*389%len(keys) // start far apart in the list
		switch mode {
		case disjointKeys:
			share := max(len(keys)/procs, 1)
			lo := min(w*share, len(keys)-share)
			mine, i = keys[lo:lo+share], 0
		case privateStores:
			st = stores[w%len(stores)]
		}
		req := store.Request{Plan: algo.MustCompile(lim), Cost: 1}
		at := benchT0
		var n, ok int64
		for pb.Next() {
			req.Key = mine[i]
			if i++; i == len(mine) {
				i = 0
			}
			if reqTime {
				at = at.Add(time.Microsecond)
				req.Time = at
			}
			r, err := st.Decide(ctx, req)
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
	})
	b.StopTimer()
	for _, st := range stores {
		if st.Len() != len(keys) {
			b.Fatalf("store holds %d keys after the run, want %d", st.Len(), len(keys))
		}
	}
	if t := total.Load(); t > 0 {
		b.ReportMetric(float64(allowed.Load())/float64(t), "allowed/op")
	}
}

// benchLimitInLoop builds the limit inside the loop: the benchmark's own
// allocation, not the store's.
func benchLimitInLoop(b *testing.B) {
	g := benchLimits[0].limit.(algo.GCRA)
	st, err := newStore(g, false, []string{"user:0"})
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close()
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		g.Burst++ // a limit that changes, as one built per request would
		p, _ := algo.Compile(g)
		if _, err := st.Decide(ctx, store.Request{Key: "user:0", Plan: &p, Cost: 1}); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkTenMillionKeys decides 10,000,000 distinct keys (GCRA, each
// state expiring 1 s after its decision, in virtual time over 100 s), then
// lets them expire and sweeps, and reports the heap per live key at the
// peak and the heap after the sweep. Run it alone:
//
//	go test -run '^$' -bench BenchmarkTenMillionKeys -benchtime 1x ./store/memory
func BenchmarkTenMillionKeys(b *testing.B) {
	const n = 10_000_000
	heap := func() uint64 {
		runtime.GC()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		return m.HeapAlloc
	}
	lim := algo.GCRA{Burst: 0, Count: 1, Period: time.Second}
	for range b.N {
		st := memory.New(memory.WithSweepEvery(0))
		base := heap()
		plan := algo.MustCompile(lim)
		t0 := time.Unix(1_800_000_000, 0)
		key := make([]byte, 0, 16)
		start := time.Now()
		for i := range n {
			key = strconv.AppendInt(append(key[:0], 'k'), int64(i), 10)
			// 100,000 keys per virtual second, for 100 s.
			at := t0.Add(time.Duration(i) * 10 * time.Microsecond)
			if _, err := st.Decide(context.Background(), store.Request{Key: string(key), Plan: plan, Cost: 1, Time: at}); err != nil {
				b.Fatal(err)
			}
		}
		took := time.Since(start)
		peak := heap()
		// Two minutes later every state has expired: one decision per
		// shard's worth of keys moves the shards' clocks, then a sweep.
		for i := range 10_000 {
			if _, err := st.Decide(context.Background(), store.Request{Key: "late" + strconv.Itoa(i), Plan: plan, Cost: 1, Time: t0.Add(220 * time.Second)}); err != nil {
				b.Fatal(err)
			}
		}
		st.Sweep()
		after := heap()
		b.ReportMetric(float64(peak-base)/n, "B/key-at-peak")
		b.ReportMetric(float64(after-base)/(1<<20), "MB-after-expiry")
		b.ReportMetric(float64(peak-base)/(1<<20), "MB-at-peak")
		b.ReportMetric(float64(n)/took.Seconds(), "new-keys/s")
		st.Close()
	}
}
