package redis_test

import (
	"context"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/algo"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/store"
	"github.com/sluicehq/sluice/store/redis"
)

// BenchmarkMillionInFlight puts 1,000,000 decisions in flight at once from
// one process against one local redis-server (1000 keys), each with a
// minute's deadline, and reports how long they took, how many failed and
// the process's peak memory. Run it alone:
//
//	go test -run '^$' -bench BenchmarkMillionInFlight -benchtime 1x ./store/redis
func BenchmarkMillionInFlight(b *testing.B) {
	const n = 1_000_000
	srv := redistest.Start(b)
	st, err := redis.Open(context.Background(), srv.URL(), redis.Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close()
	lim := algo.GCRA{Burst: 1 << 30, Count: 1_000_000, Period: time.Second}
	keys := make([]string, 1000)
	for i := range keys {
		keys[i] = "inflight:" + strconv.Itoa(i)
	}
	for range b.N {
		var failed atomic.Int64
		var wg sync.WaitGroup
		start := time.Now()
		gate := make(chan struct{})
		plan := algo.MustCompile(lim)
		for i := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-gate // all in flight together
				ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				defer cancel()
				if _, err := st.Decide(ctx, store.Request{Key: keys[i%len(keys)], Plan: plan, Cost: 1}); err != nil {
					if failed.Add(1) <= 3 {
						b.Logf("%v", err)
					}
				}
			}()
		}
		launched := time.Since(start)
		close(gate)
		wg.Wait()
		took := time.Since(start)
		b.ReportMetric(float64(failed.Load()), "failed")
		b.ReportMetric(took.Seconds(), "s-total")
		b.ReportMetric(launched.Seconds(), "s-launch")
		b.ReportMetric(float64(peakRSS())/(1<<20), "MB-peak-RSS")
		b.ReportMetric(float64(n)/took.Seconds(), "decisions/s")
	}
}

// peakRSS is the process's peak resident memory (VmHWM), in bytes.
func peakRSS() int64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) >= 2 && f[0] == "VmHWM:" {
			kb, _ := strconv.ParseInt(f[1], 10, 64)
			return kb << 10
		}
	}
	runtime.KeepAlive(b)
	return 0
}
