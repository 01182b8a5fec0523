package redis_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/sluicehq/sluice/algo"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/store"
	"github.com/sluicehq/sluice/store/redis"
)

// BenchmarkGlobalCheck: a check of two levels on a region's store whose
// home is 40ms away each way (a relay), with the upper level regional or
// global (its share refilled in the background); p50 and p99 of one
// DecideAll, in ns. A global level adds no round trip: the region decides
// from its share.
func BenchmarkGlobalCheck(b *testing.B) {
	ctx := context.Background()
	home, reg := redistest.Start(b), redistest.Start(b)
	link := redistest.NewDelayRelay(b, home.Addr, 40*time.Millisecond)
	h, err := redis.Open(ctx, "redis://"+link.Addr+"/0", redis.Options{Timeout: time.Minute})
	if err != nil {
		b.Fatal(err)
	}
	defer h.Close()
	st, err := redis.Open(ctx, reg.URL(), redis.Options{Timeout: time.Minute, Home: h})
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close()
	caller := algo.MustCompile(algo.FixedWindow{Count: algo.MaxCount, Window: time.Hour})
	api := algo.MustCompile(algo.FixedWindow{Count: algo.MaxCount, Window: time.Hour})
	for _, global := range []bool{false, true} {
		name := "regional"
		if global {
			name = "global"
		}
		b.Run(name, func(b *testing.B) {
			reqs := []store.Request{
				{Key: "caller:alex", Plan: caller, Cost: 1},
				{Key: "api:" + name, Plan: api, Cost: 1, Global: global},
			}
			res := make([]algo.Result, 2)
			// Until the share is refilled, a global check is denied.
			for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
				if ok, _ := st.DecideAll(ctx, reqs, res); ok {
					break
				}
			}
			lat := make([]time.Duration, 0, b.N)
			denied := 0
			b.ResetTimer()
			for range b.N {
				t0 := time.Now()
				ok, err := st.DecideAll(ctx, reqs, res)
				lat = append(lat, time.Since(t0))
				if err != nil {
					b.Fatal(err)
				}
				if !ok {
					denied++
				}
			}
			b.StopTimer()
			slices.Sort(lat)
			b.ReportMetric(float64(lat[len(lat)/2].Nanoseconds()), "p50-ns")
			b.ReportMetric(float64(lat[len(lat)*99/100].Nanoseconds()), "p99-ns")
			b.ReportMetric(float64(denied)/float64(b.N), "denied/op")
		})
	}
}
