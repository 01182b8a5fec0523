package conformance_test

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/sluicehq/sluice/algo"
	"github.com/sluicehq/sluice/conformance"
	"github.com/sluicehq/sluice/store"
)

// TestDebtKeyTwice: a key with debt twice in one DecideAll is decided
// twice, in order, as envoyproxy/ratelimit increments a descriptor that
// comes twice: the first copy is answered with the count after its own
// cost, the second after both, and its denial denies the batch. Both
// stores. (Before, the second copy was checked on the state before the
// batch: admitted, and the batch passed.)
func TestDebtKeyTwice(t *testing.T) {
	for name, st := range stores(t) {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			r := store.Request{Key: "twice", Plan: algo.MustCompile(algo.Debt{Limit: algo.FixedWindow{Count: 10, Window: time.Hour}}), Cost: 9, Time: conformance.T0}
			if res, err := st.Decide(ctx, r); err != nil || !res.Allowed {
				t.Fatalf("9 of 10: %s %v", conformance.Format(res), err)
			}
			r.Cost = 1
			res := make([]algo.Result, 2)
			pass, err := st.DecideAll(ctx, []store.Request{r, r}, res)
			if err != nil || pass || !res[0].Allowed || res[0].Remaining != 0 || res[1].Allowed {
				t.Fatalf("1 and 1 more on 9 of 10: pass %v (want false), %s (want allowed, 0 left), %s (want denied) %v", pass, conformance.Format(res[0]), conformance.Format(res[1]), err)
			}
			if got := count(t, st, r); got != 11 {
				t.Fatalf("counted %d, want 11: both copies recorded", got)
			}
		})
	}
}

// count returns what r's key (a fixed window of an hour) counts: what
// a peek by a window of the same length with a larger limit, on the same
// state, leaves of it; nothing is changed.
func count(t *testing.T, st store.Store, r store.Request) int64 {
	t.Helper()
	const big = 1 << 20
	peek := store.Request{Key: r.Key, Plan: algo.MustCompile(algo.FixedWindow{Count: big, Window: time.Hour}), Time: r.Time}
	res, err := st.Decide(context.Background(), peek)
	if err != nil || !res.Allowed {
		t.Fatalf("peek: %s %v", conformance.Format(res), err)
	}
	return big - res.Remaining
}

// TestStopInBatch: requests that Stop record an admitted cost only when
// every request of the batch (a shadow one too) is admitted; one that
// goes over records its cost in full, as envoyproxy/ratelimit counts with
// STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT=true. Both stores.
func TestStopInBatch(t *testing.T) {
	for name, st := range stores(t) {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			plan := func(n int64) *algo.Plan {
				return algo.MustCompile(algo.Debt{Limit: algo.FixedWindow{Count: n, Window: time.Hour}})
			}
			a := store.Request{Key: "stop:a", Plan: plan(10), Cost: 3, Time: conformance.T0, Stop: true}
			b := store.Request{Key: "stop:b", Plan: plan(5), Cost: 3, Time: conformance.T0, Stop: true}
			s := store.Request{Key: "stop:s", Plan: plan(2), Cost: 3, Time: conformance.T0, Stop: true, Shadow: true}
			res := make([]algo.Result, 3)
			step := func(reqs []store.Request, wantPass bool, want ...int64) {
				t.Helper()
				pass, err := st.DecideAll(ctx, reqs, res[:len(reqs)])
				if err != nil || pass != wantPass {
					t.Fatalf("%d requests: pass %v, want %v: %v", len(reqs), pass, wantPass, err)
				}
				for i, w := range want {
					if got := count(t, st, reqs[i]); got != w {
						t.Fatalf("%s counted %d, want %d (%s)", reqs[i].Key, got, w, conformance.Format(res[i]))
					}
				}
			}
			step([]store.Request{a, b}, true, 3, 3)  // both admitted: both count
			step([]store.Request{a, b}, false, 3, 6) // b goes over: only b counts
			step([]store.Request{s, a}, true, 3, 3)  // the shadow goes over: a does not count
			if !res[1].Allowed || res[1].Remaining != 7 {
				t.Fatalf("a, stopped: %s, want admitted with 7 left (its count before)", conformance.Format(res[1]))
			}
			a.Cost = 8
			// a twice, the first copy over: the second is reported after it.
			step([]store.Request{a, {Key: a.Key, Plan: a.Plan, Cost: 1, Time: a.Time, Stop: true}}, false, 11)
			if res[1].Allowed {
				t.Fatalf("the second copy after the first went over: %s, want denied", conformance.Format(res[1]))
			}
		})
	}
}

// TestEachCountsStoresAgree plays random batches of fixed windows with
// debt, keys twice in a batch, shadow levels, peeks (decided without
// debt, as policy's counts: each decides them) and Stop, on both stores,
// and checks each result against a model of envoyproxy/ratelimit's fixed
// cache (src/redis/fixed_cache_impl.go: INCRBY per descriptor, in order;
// with STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT, GET first, and only the
// keys that go over are incremented when one does).
func TestEachCountsStoresAgree(t *testing.T) {
	st := stores(t)
	r := randomSource(t, 56)
	ctx := context.Background()
	over, stopped := 0, 0
	for trace := range 100 {
		stop := trace%2 == 1
		limits := []int64{1 + r.Int64N(5), 2 + r.Int64N(8), 3 + r.Int64N(10)}
		debt, plain := make([]*algo.Plan, 3), make([]*algo.Plan, 3)
		for k, n := range limits {
			fw := algo.FixedWindow{Count: n, Window: time.Hour}
			debt[k], plain[k] = algo.MustCompile(algo.Debt{Limit: fw}), algo.MustCompile(fw)
		}
		key := func(k int) string { return "each:" + strconv.Itoa(trace) + ":" + strconv.Itoa(k) }
		counts := make([]int64, 3) // the model's
		at := conformance.T0
		for step := range 30 {
			where := fmt.Sprintf("trace %d (stop %v) step %d", trace, stop, step)
			n := 1 + r.IntN(3)
			ks := make([]int, n)
			seen := map[int]int{}
			for i := range ks {
				ks[i] = r.IntN(3)
				seen[ks[i]]++
			}
			reqs := make([]store.Request, n)
			for i, k := range ks {
				cost := 1 + r.Int64N(limits[k]+2)
				if seen[k] == 1 && r.IntN(5) == 0 {
					cost = 0 // a peek (on a key the batch holds once)
				}
				reqs[i] = store.Request{Key: key(k), Plan: debt[k], Cost: cost, Time: at, Shadow: r.IntN(5) == 0, Stop: stop}
				if cost == 0 {
					reqs[i].Plan, reqs[i].Stop = plain[k], false
				}
			}
			res := decideAllOnBoth(t, ctx, st, reqs, where)

			// The model.
			before := append([]int64(nil), counts...)
			goesOver := make([]bool, n)
			anyOver := false
			for i, k := range ks {
				goesOver[i] = before[k]+reqs[i].Cost > limits[k]
				anyOver = anyOver || goesOver[i]
			}
			for i, k := range ks {
				record := reqs[i].Cost > 0 && (!stop || !anyOver || goesOver[i])
				if record {
					counts[k] += reqs[i].Cost
				}
				c := counts[k]
				allowed, remaining := c <= limits[k], limits[k]-c
				if !record && reqs[i].Cost > 0 {
					// Stopped: reported as a check of its cost that records
					// nothing (Envoy: its count alone; the two differ only
					// when a copy before it went over).
					stopped++
					allowed = c+reqs[i].Cost <= limits[k]
				}
				if !allowed {
					remaining = 0
					over++
				}
				if res[i].Allowed != allowed || res[i].Remaining != remaining {
					t.Fatalf("%s: request %d (%s, limit %d, cost %d, shadow %v): %s, want allowed %v with %d left", where, i, reqs[i].Key, limits[k], reqs[i].Cost, reqs[i].Shadow, conformance.Format(res[i]), allowed, remaining)
				}
			}
			at = at.Add(time.Millisecond)
		}
	}
	if over == 0 || stopped == 0 {
		t.Fatalf("%d denials, %d stopped requests: the traces test neither", over, stopped)
	}
}
