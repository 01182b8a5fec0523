package redis_test

import (
	"context"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/algo"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/store"
	"github.com/sluicehq/sluice/store/redis"
)

// region is one region of TestGlobalAcrossRegions: its Redis, its link to
// home, its instances (stores), and its clock's skew.
type region struct {
	name      string
	srv       *redistest.Server
	link      *redistest.Relay
	instances []*redis.Store
	skew      time.Duration
	active    bool // sprays this tick
}

// globalPlans are the two levels every request of the test passes: a
// regional one per caller (fixed window), and the global limit.
type globalPlans struct {
	caller, mallory, global *algo.Plan
}

const (
	globalLimit  = 1000
	globalWindow = 20 * time.Second
	globalTick   = time.Second // the test's clock moves a tick at a time
)

// TestGlobalAcrossRegions: three regions, two instances each, each region
// on its own redis-server, and a home redis-server reached from each
// region through a relay that adds 40ms each way and can be cut. Every
// instance sprays one global key (limit 1000 a 20s window) at three times
// the limit, through a regional level in the same DecideAll; the test's
// clock is explicit (requests and refills carry it, a tick of 1s at a
// time), so no window depends on the machine's speed. Window by window:
// all links up; all traffic moved to one region mid-window; two regions
// cut off from home and healed (one denies once its share is spent, one
// has an allowance of 50 a window); one region's clock 7s ahead. In every
// window (by each region's own clock) the regions together admit at most
// the limit plus the allowances of the regions cut off, and at least 95%
// of the limit where every link was up; a region's share counts exactly
// what it admitted (a request denied by its regional level spends none).
func TestGlobalAcrossRegions(t *testing.T) {
	ctx := context.Background()
	home := redistest.Start(t)
	plans := globalPlans{
		caller:  algo.MustCompile(algo.FixedWindow{Count: 100_000, Window: globalWindow}),
		mallory: algo.MustCompile(algo.FixedWindow{Count: 1, Window: globalWindow}),
		global:  algo.MustCompile(algo.FixedWindow{Count: globalLimit, Window: globalWindow}),
	}
	allowance := map[string]int64{"c": 50}
	var regions []*region
	for _, name := range []string{"a", "b", "c"} {
		r := &region{name: name, srv: redistest.Start(t), active: true}
		r.link = redistest.NewDelayRelay(t, home.Addr, 40*time.Millisecond)
		for range 2 {
			h, err := redis.Open(ctx, "redis://"+r.link.Addr+"/0", redis.Options{Timeout: time.Minute})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { h.Close() })
			s, err := redis.OpenRegion(ctx, r.srv.URL(), redis.Options{Timeout: time.Minute, Home: h, GlobalAllowance: allowance[name]})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { s.Close() })
			r.instances = append(r.instances, s)
		}
		regions = append(regions, r)
	}
	w := globalWindow.Microseconds()
	// An hour ahead of the machine's clock: home's counts live until a
	// window past their end on home's clock, so none expires during the
	// test however slowly it runs.
	base := time.UnixMicro((time.Now().Add(time.Hour).UnixMicro()/w + 1) * w)
	label := func(t time.Time) int64 { us := t.UnixMicro(); return us - us%w + w }

	var mu sync.Mutex
	admitted := map[int64]int64{}  // by window end
	byRegion := map[string]int64{} // region + window end
	bound := map[int64]int64{}     // by window end: the limit plus allowances
	full := map[int64]bool{}       // windows whose every link was up
	demand := map[int64]int64{}    // units asked, by window end
	run := func(window int, each func(tick int)) {
		for tick := range int(globalWindow / globalTick) {
			each(tick)
			at := base.Add(time.Duration(window)*globalWindow + time.Duration(tick)*globalTick)
			var wg sync.WaitGroup
			for _, r := range regions {
				if !r.active {
					continue
				}
				now := at.Add(r.skew)
				for i, s := range r.instances {
					for g := range 5 {
						wg.Add(1)
						go func() {
							defer wg.Done()
							for j := range 5 {
								caller, plan := "ok", plans.caller
								if j == 4 && g == 0 {
									caller, plan = "mallory:"+r.name, plans.mallory // denied by its regional level after its first
								}
								reqs := []store.Request{
									{Key: "caller:" + caller, Plan: plan, Cost: 1, Time: now},
									{Key: "api", Plan: plans.global, Cost: 1, Time: now, Global: true},
								}
								res := make([]algo.Result, 2)
								ok, err := s.DecideAll(ctx, reqs, res)
								if err != nil {
									t.Errorf("region %s instance %d: %v", r.name, i, err)
									return
								}
								mu.Lock()
								demand[label(now)]++
								if ok {
									admitted[label(now)]++
									byRegion[r.name+strconv.FormatInt(label(now), 10)]++
								}
								mu.Unlock()
							}
						}()
					}
				}
			}
			wg.Wait()
			for _, r := range regions {
				for _, s := range r.instances {
					wg.Add(1)
					go func() {
						defer wg.Done()
						s.RefillAt(ctx, at.Add(r.skew), 2*globalTick)
					}()
				}
			}
			wg.Wait()
			// A region's share counts exactly what the region admitted in
			// its window, read before the next window starts.
			if tick == int(globalWindow/globalTick)-1 && regions[0].skew == 0 {
				for _, r := range regions {
					e := label(at)
					n, _ := r.srv.Do("HGET", redis.StateKey(redis.DefaultPrefix, store.Request{Key: "api", Plan: plans.global}), "n")
					mu.Lock()
					want := byRegion[r.name+strconv.FormatInt(e, 10)]
					mu.Unlock()
					if got, _ := strconv.ParseInt(n, 10, 64); got != want {
						t.Errorf("window %d region %s: the share counts %d admitted, the instances admitted %d", window, r.name, got, want)
					}
				}
			}
		}
	}
	end := func(window int) int64 { return label(base.Add(time.Duration(window) * globalWindow)) }

	// 0: every link up, every region spraying.
	bound[end(0)], full[end(0)] = globalLimit, true
	run(0, func(int) {})
	// 1: all traffic moves to region b at tick 4, while a and c hold shares.
	bound[end(1)], full[end(1)] = globalLimit, true
	run(1, func(tick int) {
		regions[0].active, regions[2].active = tick < 4, tick < 4
	})
	regions[0].active, regions[2].active = true, true
	// 2: regions a (deny once spent) and c (an allowance of 50) cut off
	// from home at tick 5, healed at tick 12.
	bound[end(2)] = globalLimit + allowance["c"]
	run(2, func(tick int) {
		switch tick {
		case 5:
			regions[0].link.Down()
			regions[2].link.Down()
		case 12:
			regions[0].link.Up()
			regions[2].link.Up()
		}
	})
	// 3, 4: region a's clock 7s ahead: it counts in the window of its clock.
	bound[end(3)], bound[end(4)], bound[end(5)] = globalLimit, globalLimit, globalLimit
	regions[0].skew = 7 * time.Second
	run(3, func(int) {})
	run(4, func(int) {})

	for _, e := range []int64{end(0), end(1), end(2), end(3), end(4)} {
		got := admitted[e]
		t.Logf("window ending %s: asked %d, admitted %d of %d (bound %d)", time.UnixMicro(e).UTC().Format(time.TimeOnly), demand[e], got, globalLimit, bound[e])
		if got > bound[e] {
			t.Errorf("window ending %d: admitted %d, over its bound %d", e, got, bound[e])
		}
		if full[e] && got < globalLimit*95/100 {
			t.Errorf("window ending %d: admitted %d, under 95%% of %d with every link up and %d asked", e, got, globalLimit, demand[e])
		}
	}
	if admitted[end(5)] > globalLimit {
		t.Errorf("the window region a's clock reached first admitted %d", admitted[end(5)])
	}
}
