package redis_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/algo"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/store"
	"github.com/sluicehq/sluice/store/memory"
	"github.com/sluicehq/sluice/store/redis"
)

var callsRe = regexp.MustCompile(`cmdstat_(evalsha|eval):calls=(\d+)`)

// scriptCalls sums EVAL and EVALSHA calls over servers.
func scriptCalls(t *testing.T, servers ...*redistest.Server) int {
	t.Helper()
	n := 0
	for _, node := range servers {
		info, err := node.Do("INFO", "commandstats")
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range callsRe.FindAllStringSubmatch(info, -1) {
			v, _ := strconv.Atoi(m[2])
			n += v
		}
	}
	return n
}

func resetStats(t *testing.T, c *redistest.Cluster) {
	for _, node := range c.Nodes {
		if _, err := node.Do("CONFIG", "RESETSTAT"); err != nil {
			t.Fatal(err)
		}
	}
}

func TestCluster(t *testing.T) {
	c := redistest.StartCluster(t)
	st, err := redis.Open(context.Background(), c.URL(), redis.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	ctx := context.Background()
	gcra := algo.GCRA{Burst: 15, Count: 30, Period: time.Minute}

	t.Run("one slot is one script call", func(t *testing.T) {
		tag := sluice.Key("user", "alex")
		reqs := []store.Request{
			{Key: tag, Tag: tag, Plan: algo.MustCompile(gcra), Cost: 1},
			{Key: tag + ":trade", Tag: tag, Plan: algo.MustCompile(algo.GCRA{Burst: 5, Count: 10, Period: 15 * time.Second}), Cost: 1},
			{Key: tag + ":trade:eu", Tag: tag, Plan: algo.MustCompile(algo.FixedWindow{Count: 100, Window: time.Minute}), Cost: 1},
		}
		st.DecideAll(ctx, reqs, make([]algo.Result, 3)) // loads the script on its node
		resetStats(t, c)
		for i := 0; i < 5; i++ {
			if ok, err := st.DecideAll(ctx, reqs, make([]algo.Result, 3)); err != nil || !ok {
				t.Fatalf("decision %d: %v %v", i, ok, err)
			}
		}
		if n := scriptCalls(t, c.Nodes...); n != 5 {
			t.Fatalf("5 three-level decisions made %d script calls, want 5", n)
		}
	})

	t.Run("spanning slots refunds on denial", func(t *testing.T) {
		shared := store.Request{Key: "tigerfeeding", Tag: "tigerfeeding", Plan: algo.MustCompile(algo.FixedWindow{Count: 100, Window: time.Hour}), Cost: 1}
		caller := sluice.Key("tigerfeeding", "alex")
		mine := store.Request{Key: caller, Tag: caller, Plan: algo.MustCompile(algo.Gate{Interval: time.Hour}), Cost: 1}
		if redis.HashSlot(redis.KeyName(redis.DefaultPrefix, shared.Key, shared.Tag)) == redis.HashSlot(redis.KeyName(redis.DefaultPrefix, mine.Key, mine.Tag)) {
			t.Fatal("test keys share a slot")
		}
		res := make([]algo.Result, 2)
		for i, want := range []bool{true, false, false, false} {
			ok, err := st.DecideAll(ctx, []store.Request{shared, mine}, res)
			if err != nil {
				t.Fatal(err)
			}
			if ok != want {
				t.Fatalf("call %d: pass %v, want %v", i, ok, want)
			}
		}
		// Only the first call's cost stays at the shared level.
		if res[0].Remaining != 99 || !res[0].Allowed {
			t.Fatalf("shared level after three denied calls: %+v, want 99 remaining", res[0])
		}
		peek := shared
		peek.Cost = 0
		r, err := st.Decide(ctx, peek)
		if err != nil || r.Remaining != 99 {
			t.Fatalf("shared level state: %+v %v, want 99 remaining", r, err)
		}
	})

	t.Run("agrees with memory across slots", func(t *testing.T) {
		ms := memory.New()
		defer ms.Close()
		seed := uint64(time.Now().UnixNano())
		t.Logf("seed %d", seed)
		r := rand.New(rand.NewPCG(seed, 3))
		for trace := 0; trace < 20; trace++ {
			n := 2 + r.IntN(3)
			reqs := make([]store.Request, n)
			for i := range reqs {
				key := "x" + strconv.Itoa(trace) + ":" + strconv.Itoa(i) // a slot each, most likely
				if i > 0 && r.IntN(2) == 0 {
					key = reqs[i-1].Tag + ":" + strconv.Itoa(i) // or its parent's slot
				}
				tag := key
				if i > 0 && len(key) > len(reqs[i-1].Tag) && key[:len(reqs[i-1].Tag)] == reqs[i-1].Tag && key != reqs[i-1].Tag {
					tag = reqs[i-1].Tag
				}
				lims := []algo.Limit{
					algo.GCRA{Burst: r.Int64N(4), Count: 1 + r.Int64N(5), Period: time.Duration(1+r.IntN(20)) * 100 * time.Millisecond},
					algo.FixedWindow{Count: 1 + r.Int64N(5), Window: time.Duration(1+r.IntN(20)) * 100 * time.Millisecond},
					algo.Gate{Interval: time.Duration(1+r.IntN(10)) * 100 * time.Millisecond},
					// A debt records its charge whatever the other slots
					// decide: not refunded.
					algo.Debt{Limit: algo.FixedWindow{Count: 1 + r.Int64N(5), Window: time.Duration(1+r.IntN(20)) * 100 * time.Millisecond}},
				}
				reqs[i] = store.Request{Key: key, Tag: tag, Plan: algo.MustCompile(lims[r.IntN(len(lims))]), Shadow: r.IntN(6) == 0}
			}
			at := time.UnixMicro(1800003000334587).Add(time.Duration(r.Int64N(int64(time.Hour))))
			for step := 0; step < 40; step++ {
				at = at.Add(time.Duration(r.Int64N(int64(400 * time.Millisecond))))
				cost := r.Int64N(3)
				for i := range reqs {
					reqs[i].Cost, reqs[i].Time = cost, at
				}
				mr, xr, _ := decideAllOnBoth(t, ms, st, reqs, fmt.Sprintf("trace %d step %d", trace, step))
				for i := range reqs {
					if mr[i] != xr[i] {
						t.Fatalf("trace %d step %d level %d (%s) %#v:\nmemory  %+v\ncluster %+v", trace, step, i, reqs[i].Key, reqs[i].Plan.Limit(), mr[i], xr[i])
					}
				}
			}
		}
	})
}

// decideAllOnBoth runs one DecideAll on the memory store and on the Redis
// (Cluster) store, fails unless both pass or both deny, and returns both
// stores' results for the caller to compare, and whether it passed.
func decideAllOnBoth(t *testing.T, ms, st store.Store, reqs []store.Request, where string) (mr, xr []algo.Result, pass bool) {
	t.Helper()
	ctx := context.Background()
	mr, xr = make([]algo.Result, len(reqs)), make([]algo.Result, len(reqs))
	mp, err := ms.DecideAll(ctx, reqs, mr)
	if err != nil {
		t.Fatalf("%s: memory: %v", where, err)
	}
	xp, err := st.DecideAll(ctx, reqs, xr)
	if err != nil {
		t.Fatalf("%s: cluster: %v", where, err)
	}
	if mp != xp {
		t.Fatalf("%s: memory pass %v, cluster pass %v", where, mp, xp)
	}
	return mr, xr, mp
}
