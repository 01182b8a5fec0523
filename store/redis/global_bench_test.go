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

// BenchmarkGlobalCheck: checks of two levels on a region's store whose
// home is 40ms away each way (a relay), the upper level regional or global
// (its share refilled in the background), one of each in turn so that
// both meet the same load on the machine; p50 and p99 of one DecideAll of
// each, in ns, and the global p99 over the regional. A global level adds
// no round trip: the region decides from its share. b.N is the pairs.
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
	kinds := [2][]store.Request{
		{{Key: "caller:alex", Plan: caller, Cost: 1}, {Key: "api:regional", Plan: api, Cost: 1}},
		{{Key: "caller:alex", Plan: caller, Cost: 1}, {Key: "api:global", Plan: api, Cost: 1, Global: true}},
	}
	res := make([]algo.Result, 2)
	var lat [2][]time.Duration
	denied := 0
	check := func(k int) {
		t0 := time.Now()
		ok, err := st.DecideAll(ctx, kinds[k], res)
		lat[k] = append(lat[k], time.Since(t0))
		if err != nil {
			b.Fatal(err)
		}
		if !ok && k == 1 {
			denied++
		}
	}
	// Until the share is refilled, a global check is denied; then a
	// second for the share to follow the demand.
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if ok, _ := st.DecideAll(ctx, kinds[1], res); ok {
			break
		}
	}
	for t := time.Now(); time.Since(t) < time.Second; {
		check(0)
		check(1)
	}
	lat[0], lat[1], denied = lat[0][:0], lat[1][:0], 0
	b.ResetTimer()
	for i := range b.N {
		check(i % 2)
		check(1 - i%2)
	}
	b.StopTimer()
	for k, name := range []string{"regional", "global"} {
		slices.Sort(lat[k])
		b.ReportMetric(float64(lat[k][len(lat[k])/2].Nanoseconds()), name+"-p50-ns")
		b.ReportMetric(float64(lat[k][len(lat[k])*99/100].Nanoseconds()), name+"-p99-ns")
	}
	b.ReportMetric(float64(lat[1][len(lat[1])*99/100])/float64(lat[0][len(lat[0])*99/100]), "p99-global/regional")
	b.ReportMetric(float64(denied)/float64(b.N), "global-denied/op")
}
