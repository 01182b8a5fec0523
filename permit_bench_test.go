package sluice_test

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/algo"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/store"
	"github.com/sluicehq/sluice/store/memory"
	"github.com/sluicehq/sluice/store/redis"
)

// BenchmarkSlots: an acquire and its release against a GCRA check, on
// each store, 32 goroutines on keys of their own (1024 in all), nothing
// denied. acquire+release is Limiter.Acquire (which hands the permit to
// the Limiter's renewer) then Permit.Release; at+release is the
// explicit-time pair, which is not renewed. ns/op is per pair or per
// check; pairs/s and checks/s are reported.
//
//	go test -run '^$' -bench BenchmarkSlots -benchtime 2s .
func BenchmarkSlots(b *testing.B) {
	rs, err := redis.Open(context.Background(), redistest.Start(b).URL(), redis.Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer rs.Close()
	ms := memory.New()
	defer ms.Close()
	slots := algo.Concurrency{Count: 1 << 16, HoldFor: time.Minute}
	gcra := algo.GCRA{Burst: 1 << 30, Count: 1_000_000, Period: time.Second}
	for _, st := range []struct {
		name string
		s    store.Store
	}{{"memory", ms}, {"redis", rs}} {
		sl, err := sluice.NewLimiter(st.s, slots)
		if err != nil {
			b.Fatal(err)
		}
		gl, err := sluice.NewLimiter(st.s, gcra)
		if err != nil {
			b.Fatal(err)
		}
		for _, op := range []string{"gcra-check", "acquire+release", "at+release"} {
			b.Run(st.name+"/"+op, func(b *testing.B) {
				ctx := context.Background()
				var next atomic.Int64
				b.SetParallelism(16) // 32 goroutines: Redis calls in flight together
				b.RunParallel(func(pb *testing.PB) {
					keys := make([]string, 64)
					for i := range keys {
						keys[i] = "bench:" + strconv.FormatInt(next.Add(1)%1024, 10)
					}
					i := 0
					for pb.Next() {
						key := keys[i%len(keys)]
						i++
						switch op {
						case "gcra-check":
							if ok, err := gl.Allow(ctx, key); err != nil || !ok {
								b.Fatal(ok, err)
							}
						case "acquire+release":
							p, err := sl.Acquire(ctx, key)
							if err != nil {
								b.Fatal(err)
							}
							if err := p.Release(ctx); err != nil {
								b.Fatal(err)
							}
						case "at+release":
							p, err := sl.AcquireAt(ctx, key, time.Time{}, 1)
							if err != nil || !p.OK() {
								b.Fatal(err)
							}
							if err := p.ReleaseAt(ctx, time.Time{}); err != nil {
								b.Fatal(err)
							}
						}
					}
				})
				unit := "pairs/s"
				if op == "gcra-check" {
					unit = "checks/s"
				}
				b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), unit)
			})
		}
	}
}
