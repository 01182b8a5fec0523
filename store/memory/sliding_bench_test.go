package memory_test

// Benchmarks of the windowed algorithms on the memory store (issue 3),
// reported in bench/NOTES.md's "Sliding windows (issue 3)" section:
//
//	go test ./store/memory -run '^$' -bench BenchmarkWindowed -benchtime 2s
//
// Every decision is on an existing key in its steady state. "serial" is
// one goroutine on one key and "parallel-keys" GOMAXPROCS goroutines on
// keys of their own (16 each, warmed before the timer); both advance the request time by 1ms per
// decision and key, so an exact log holds about 1000 entries per key in its
// 1s window. "hotkey" is every goroutine on one key under the store's
// clock. The limits admit everything except in the denied cases, where a
// caller hammers a full log; allowed/op reports the fraction admitted.
// They measure; they never fail on a timing.

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/algo"
	"github.com/sluicehq/sluice/store"
	"github.com/sluicehq/sluice/store/memory"
)

var windowedBenchLimits = []struct {
	name  string
	limit algo.Limit
}{
	{"gcra", algo.GCRA{Burst: 1_000_000_000, Count: 1_000_000, Period: time.Second}},
	{"sliding_log/exact", algo.SlidingLog{Limits: []algo.Window{{Count: 100_000, Window: time.Second}, {Count: 1_000_000, Window: time.Minute}}}},
	{"sliding_log/exact-gap", algo.SlidingLog{Limits: []algo.Window{{Count: 100_000, Window: time.Second}}, MinGap: time.Microsecond}},
	{"sliding_log/sampled", algo.SlidingLog{Limits: []algo.Window{{Count: 100_000, Window: time.Second}, {Count: 1_000_000, Window: time.Minute}}, Buckets: 60}},
	{"sliding_log/exact-denied", algo.SlidingLog{Limits: []algo.Window{{Count: 100, Window: time.Second}}}},
	{"sliding_log/uniform-denied", algo.SlidingLog{Limits: []algo.Window{{Count: 100, Window: time.Second}}, Buckets: 60, Mode: algo.Uniform}},
	{"window_counter", algo.WindowCounter{Limits: []algo.Window{{Count: 1_000_000, Window: time.Second}, {Count: 5_000_000, Window: 10 * time.Second}, {Count: 7_000_000, Window: 15 * time.Second}}}},
}

func BenchmarkWindowed(b *testing.B) {
	for _, l := range windowedBenchLimits {
		b.Run(l.name+"/serial", func(b *testing.B) { windowedSerial(b, l.limit) })
		b.Run(l.name+"/parallel-keys", func(b *testing.B) { windowedParallel(b, l.limit, false) })
		b.Run(l.name+"/hotkey", func(b *testing.B) { windowedParallel(b, l.limit, true) })
	}
}

// warm makes 3000 decisions on key, 1ms apart, ending at the returned time.
func warm(b *testing.B, st *memory.Store, lim algo.Limit, key string) time.Time {
	at := benchT0
	for range 3000 {
		at = at.Add(time.Millisecond)
		if _, err := st.Decide(context.Background(), store.Request{Key: key, Plan: algo.MustCompile(lim), Cost: 1, Time: at}); err != nil {
			b.Fatal(err)
		}
	}
	return at
}

func report(b *testing.B, n, allowed int64) {
	b.ReportMetric(float64(n)/b.Elapsed().Seconds(), "decisions/s")
	b.ReportMetric(float64(allowed)/float64(n), "allowed/op")
}

func windowedSerial(b *testing.B, lim algo.Limit) {
	st := memory.New()
	defer st.Close()
	ctx := context.Background()
	req := store.Request{Key: "k", Plan: algo.MustCompile(lim), Cost: 1, Time: warm(b, st, lim, "k")}
	var n, allowed int64
	b.ReportAllocs()
	for b.Loop() {
		req.Time = req.Time.Add(time.Millisecond)
		r, err := st.Decide(ctx, req)
		if err != nil {
			b.Fatal(err)
		}
		n++
		if r.Allowed {
			allowed++
		}
	}
	report(b, n, allowed)
}

func windowedParallel(b *testing.B, lim algo.Limit, hot bool) {
	st := memory.New()
	defer st.Close()
	// Keys of their own for up to 64 goroutines, warmed before the timer.
	const workers, perWorker = 64, 16
	var keys [workers][perWorker]string
	var times [workers][perWorker]time.Time
	if hot {
		if _, err := st.Decide(context.Background(), store.Request{Key: "hot", Plan: algo.MustCompile(lim), Cost: 1}); err != nil {
			b.Fatal(err)
		}
	} else {
		for w := range keys {
			for i := range keys[w] {
				keys[w][i] = "w" + strconv.Itoa(w) + ":" + strconv.Itoa(i)
				times[w][i] = warm(b, st, lim, keys[w][i])
			}
		}
	}
	var worker, total, allowed atomic.Int64
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		ctx := context.Background()
		w := int(worker.Add(1)-1) % workers
		req := store.Request{Key: "hot", Plan: algo.MustCompile(lim), Cost: 1}
		var n, ok int64
		for i := 0; pb.Next(); i = (i + 1) % perWorker {
			if !hot {
				times[w][i] = times[w][i].Add(time.Millisecond)
				req.Key, req.Time = keys[w][i], times[w][i]
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
	report(b, total.Load(), allowed.Load())
}
