package redis_test

import (
	"context"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/algo"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/store"
	"github.com/sluicehq/sluice/store/redis"
)

// TestCoalesced: concurrent decisions go to Redis in fewer script calls than
// decisions, each decided on its own: 64 goroutines on 64 keys with a
// limit of 10 each admit exactly 10 per key. A key whose state Redis cannot
// read (another type under its name) fails its own decisions only, not
// those coalesced with it.
func TestCoalesced(t *testing.T) {
	srv := redistest.Start(t)
	st := open(t, srv, redis.Options{})
	ctx := context.Background()
	lim := algo.FixedWindow{Count: 10, Window: noBoundary}
	poisoned := store.Request{Key: "poisoned", Plan: algo.MustCompile(lim), Cost: 1}
	if _, err := srv.Do("SET", redis.StateKey(redis.DefaultPrefix, poisoned), "not a hash"); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	admitted := map[string]int{}
	coalesced(t, srv, st, store.Request{Key: "warm", Plan: algo.MustCompile(lim), Cost: 1}, 64, 64*30*2, func(g int) {
		key := "k" + strconv.Itoa(g)
		for range 30 {
			res, err := st.Decide(ctx, store.Request{Key: key, Plan: algo.MustCompile(lim), Cost: 1})
			if err != nil {
				t.Error(err)
				return
			}
			if res.Allowed {
				mu.Lock()
				admitted[key]++
				mu.Unlock()
			}
			if _, err := st.Decide(ctx, poisoned); err == nil || !strings.Contains(err.Error(), "WRONGTYPE") {
				t.Errorf("a decision on a key of another type: %v", err)
				return
			}
		}
	})
	for g := range 64 {
		if n := admitted["k"+strconv.Itoa(g)]; n != 10 {
			t.Fatalf("key k%d: %d admitted, want 10", g, n)
		}
	}
}

// coalesced runs each(0) to each(n-1) at once, after warm loads the
// script, and fails t unless their decisions (so many in all) went to srv
// in fewer script calls.
func coalesced(t *testing.T, srv *redistest.Server, st *redis.Store, warm store.Request, n, decisions int, each func(g int)) {
	t.Helper()
	st.Decide(context.Background(), warm)
	before := scriptCalls(t, srv)
	var wg sync.WaitGroup
	for g := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			each(g)
		}()
	}
	wg.Wait()
	calls := scriptCalls(t, srv) - before
	t.Logf("%d decisions in %d script calls", decisions, calls)
	if calls >= decisions {
		t.Fatalf("%d script calls for %d decisions: nothing coalesced", calls, decisions)
	}
}

// TestEscalationCoalesced: decisions with a level that watches others (a
// node's escalate) coalesced with others into one script call (coalesce.lua)
// escalate as one alone (decide.lua) does: on 32 addresses at once, the
// third username blocked blocks its address, and the next username is
// denied by the address's block.
func TestEscalationCoalesced(t *testing.T) {
	srv := redistest.Start(t)
	st := open(t, srv, redis.Options{})
	ctx := context.Background()
	esc := algo.MustCompile(algo.Blocking{Limit: algo.FixedWindow{Count: 2, Window: time.Hour}, Block: algo.Block{For: time.Hour}})
	user := algo.MustCompile(algo.Blocking{Limit: algo.FixedWindow{Count: 1, Window: time.Hour}, Block: algo.Block{For: 15 * time.Minute}})
	at := time.Date(2026, 11, 26, 10, 0, 0, 0, time.UTC)
	coalesced(t, srv, st, store.Request{Key: "warm", Plan: user, Cost: 1}, 32, 32*7, func(g int) {
		ip := "ip" + strconv.Itoa(g)
		for step, u := range []string{"u1", "u1", "u2", "u2", "u3", "u3", "u4"} {
			res := make([]algo.Result, 2)
			_, err := st.DecideAll(ctx, []store.Request{
				{Key: ip, Plan: esc, Time: at.Add(time.Duration(step) * time.Second), Watch: 1},
				{Key: ip + ":" + u, Plan: user, Cost: 1, Time: at.Add(time.Duration(step) * time.Second)},
			}, res)
			if err != nil {
				t.Error(err)
				return
			}
			if blocked := res[0].DeniedBy == algo.DeniedByBlock; blocked != (step >= 5) {
				t.Errorf("%s step %d: the address's level %+v, want blocked from step 6", ip, step+1, res[0])
				return
			}
		}
	})
}

// TestEachCountsCoalesced: batches of levels with debt coalesced into one
// script call (coalesce.lua) count as each alone (decide.lua) does: a key
// twice decided in order, and Stop recording an admitted cost only when
// no level goes over; 32 callers at once, each on keys of its own.
func TestEachCountsCoalesced(t *testing.T) {
	srv := redistest.Start(t)
	st := open(t, srv, redis.Options{})
	ctx := context.Background()
	plan := func(n int64) *algo.Plan {
		return algo.MustCompile(algo.Debt{Limit: algo.FixedWindow{Count: n, Window: noBoundary}})
	}
	probe := algo.MustCompile(algo.FixedWindow{Count: 1 << 20, Window: noBoundary})
	count := func(key string) int64 {
		res, err := st.Decide(ctx, store.Request{Key: key, Plan: probe})
		if err != nil {
			t.Error(err)
		}
		return 1<<20 - res.Remaining
	}
	coalesced(t, srv, st, store.Request{Key: "warm", Plan: plan(1), Cost: 1}, 32, 32*8, func(g int) {
		k := "c" + strconv.Itoa(g)
		a := store.Request{Key: k + ":a", Plan: plan(10), Stop: g%2 == 1}
		b := store.Request{Key: k + ":b", Plan: plan(5), Stop: g%2 == 1}
		res := make([]algo.Result, 2)
		for round := range 5 {
			a.Cost, b.Cost = 2, 2
			if pass, err := st.DecideAll(ctx, []store.Request{a, b}, res); err != nil || pass != (round < 2) {
				t.Errorf("%s round %d: pass %v %v", k, round, pass, err)
				return
			}
		}
		// Rounds 0 and 1 admitted (4 of 5 on b); 2 to 4 go over on b.
		wantA, wantB := int64(10), int64(10)
		if a.Stop {
			wantA, wantB = 4, 10 // a stopped once b went over
		}
		if ga, gb := count(a.Key), count(b.Key); ga != wantA || gb != wantB {
			t.Errorf("%s (stop %v): a counted %d, b %d, want %d, %d", k, a.Stop, ga, gb, wantA, wantB)
		}
		a.Cost = 1
		if pass, err := st.DecideAll(ctx, []store.Request{a, a}, res); err != nil || pass != (wantA+2 <= 10) || res[0].Remaining != max(10-wantA-1, 0) || res[1].Allowed != (wantA+2 <= 10) {
			t.Errorf("%s: a twice: pass %v, %+v %v", k, pass, res, err)
		}
	})
}
