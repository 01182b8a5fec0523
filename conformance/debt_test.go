package conformance_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"testing"
	"time"

	"github.com/sluicehq/sluice/algo"
	"github.com/sluicehq/sluice/conformance"
	"github.com/sluicehq/sluice/store"
)

// randomDebt returns a limit with debt of each kind that takes one in
// turn (gcra, token_bucket, fixed_window, window_counter, a binary
// sliding log, exact or sampled), small enough that charges go past it
// often.
func randomDebt(r *rand.Rand, i int) algo.Limit {
	switch i % 5 {
	case 3:
		return algo.Debt{Limit: randomWindowed(r, 1)} // a window counter
	case 4:
		l := randomWindowed(r, 0).(algo.SlidingLog)
		l.Mode = algo.Binary
		return algo.Debt{Limit: l}
	}
	return algo.Debt{Limit: randomLimit(r, i%5)}
}

// TestDebtStoresAgree plays random traces of charges (some above the
// limit), peeks, penalties and rewards on limits with debt, alone and in
// batches beside limits without, on both stores, and requires identical
// results; the charges denied are recorded alike.
func TestDebtStoresAgree(t *testing.T) {
	st := stores(t)
	r := randomSource(t, 41)
	ctx := context.Background()
	denied := 0
	for trace := range 50 {
		n := 1 + r.IntN(3)
		reqs := make([]store.Request, n)
		for i := range reqs {
			l := randomDebt(r, trace)
			if i > 0 && r.IntN(2) == 0 {
				l = randomLimit(r, r.IntN(3)) // a level without debt
			}
			reqs[i] = store.Request{Key: "debt:" + strconv.Itoa(trace) + ":" + strconv.Itoa(i), Plan: algo.MustCompile(l), Shadow: i > 0 && r.IntN(6) == 0}
		}
		at := gridStart(r).Add(time.Duration(r.Int64N(int64(time.Hour/grid))) * grid)
		for step := range 60 {
			at = at.Add(time.Duration(r.Int64N(4)) * grid)
			where := fmt.Sprintf("trace %d step %d", trace, step)
			cost := []int64{0, 1, 2, 5, 12}[r.IntN(5)]
			for i := range reqs {
				reqs[i].Cost, reqs[i].Time = cost, at
			}
			if step%7 == 6 { // a penalty or a reward on the first level
				op := []algo.Adjust{algo.Penalize, algo.Reward}[r.IntN(2)]
				req := reqs[0]
				req.Cost = 1 + r.Int64N(8)
				for _, name := range []string{"memory", "redis"} {
					if err := st[name].(store.Adjuster).Adjust(ctx, req, op); err != nil {
						t.Fatalf("%s on %s: %v %v", where, name, op, err)
					}
				}
				continue
			}
			if n == 1 {
				if res := decideOnBoth(t, ctx, st, reqs[0], where); !res.Allowed && cost > 0 {
					denied++
				}
				continue
			}
			decideAllOnBoth(t, ctx, st, reqs, where)
		}
	}
	if denied == 0 {
		t.Fatal("no charge was denied: the traces test no debt")
	}
}

// TestDebtInBatch: a level with debt records a charge the other level
// denies, and the level without debt records nothing; both stores.
func TestDebtInBatch(t *testing.T) {
	for name, st := range stores(t) {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			budget := store.Request{Key: "dib:budget", Tag: "dib", Plan: algo.MustCompile(algo.Debt{Limit: algo.FixedWindow{Count: 100, Window: time.Hour}}), Cost: 30, Time: conformance.T0}
			perCall := store.Request{Key: "dib:calls", Tag: "dib", Plan: algo.MustCompile(algo.FixedWindow{Count: 1, Window: time.Hour}), Cost: 30, Time: conformance.T0}
			res := make([]algo.Result, 2)
			for i, want := range []bool{false, false} { // cost 30 > 1: the per-call level denies both
				if pass, err := st.DecideAll(ctx, []store.Request{budget, perCall}, res); err != nil || pass != want {
					t.Fatalf("call %d: pass %v, %v", i, pass, err)
				}
			}
			budget.Cost = 0
			perCall.Cost = 0
			r0, _ := st.Decide(ctx, budget)
			r1, _ := st.Decide(ctx, perCall)
			if r0.Remaining != 40 || r1.Remaining != 1 {
				t.Fatalf("after two denied charges of 30: budget %s (want 40 left: both recorded), calls %s (want 1: none)", conformance.Format(r0), conformance.Format(r1))
			}
		})
	}
}

// TestRefundTraces: rewards (what Envoy's is_negative_hits gives back) by
// hand on every kind that takes them, on both stores: units come back,
// never beyond an empty state.
func TestRefundTraces(t *testing.T) {
	s, us := time.Second, time.Microsecond
	type op struct {
		at     time.Duration
		reward bool // else a decision
		cost   int64
		want   int64 // remaining after a decision
	}
	for _, tr := range []struct {
		name  string
		limit algo.Limit
		ops   []op
	}{
		{"gcra", algo.GCRA{Burst: 9, Count: 10, Period: 10 * s}, []op{
			{0, false, 6, 4}, {0, true, 2, 0}, {0, false, 0, 6}, {0, true, 100, 0}, {0, false, 0, 10}, {0, false, 10, 0},
		}},
		{"token_bucket", algo.TokenBucket{Burst: 10, Count: 5, Period: s}, []op{
			{0, false, 10, 0}, {0, true, 4, 0}, {0, false, 0, 4}, {s, true, 100, 0}, {s, false, 0, 10},
		}},
		{"fixed_window", algo.FixedWindow{Count: 3, Window: 10 * s}, []op{
			{0, false, 3, 0}, {0, true, 1, 0}, {0, false, 0, 1}, {0, true, 10, 0}, {0, false, 0, 3}, {0, false, 3, 0},
		}},
		{"fixed_window/debt", algo.Debt{Limit: algo.FixedWindow{Count: 3, Window: 10 * s}}, []op{
			// The largest debt is MaxCount: MaxCount - 3 back leaves 3.
			{0, false, algo.MaxCount, 0}, {0, true, algo.MaxCount - 3, 0}, {0, false, 0, 0}, {0, true, 1, 0}, {0, false, 1, 0},
		}},
		{"sliding_log", algo.SlidingLog{Limits: []algo.Window{{Count: 5, Window: 3 * s}}}, []op{
			// 3 at 0, 2 at 1s; 3 back: the 2 newest, then 1 of the 3; the
			// other 2 leave the window at 3s.
			{0, false, 3, 2}, {s, false, 2, 0}, {s, true, 3, 0}, {s, false, 0, 3}, {3 * s, false, 0, 5}, {3 * s, true, 9, 0}, {3 * s, false, 5, 0},
		}},
		{"sliding_log/sampled", algo.SlidingLog{Buckets: 3, Limits: []algo.Window{{Count: 5, Window: 3 * s}}}, []op{
			// buckets of 1s, 4 counted: 3 in T0's, 2 in the next; 3 back: the
			// 2, then 1 of the 3, which leave when T0's bucket does, 4
			// buckets on.
			{0, false, 3, 2}, {s, false, 2, 0}, {s, true, 3, 0}, {s, false, 0, 3}, {3665413 * us, false, 0, 5}, {3665413 * us, true, 9, 0}, {3665413 * us, false, 5, 0},
		}},
		{"window_counter", algo.WindowCounter{Slice: s, Limits: []algo.Window{{Count: 5, Window: 3 * s}}}, []op{
			// 3 in T0's slice, 2 in the next; 3 back: the 2, then 1 of the 3.
			{0, false, 3, 2}, {s, false, 2, 0}, {s, true, 3, 0}, {s, false, 0, 3}, {2665413 * us, false, 0, 5}, {2665413 * us, true, 9, 0}, {2665413 * us, false, 5, 0},
		}},
	} {
		for name, st := range stores(t) {
			t.Run(tr.name+"/"+name, func(t *testing.T) {
				ctx := context.Background()
				p := algo.MustCompile(tr.limit)
				for i, o := range tr.ops {
					req := store.Request{Key: "refund:" + tr.name, Plan: p, Cost: o.cost, Time: conformance.T0.Add(o.at)}
					if o.reward {
						if err := st.(store.Adjuster).Adjust(ctx, req, algo.Reward); err != nil {
							t.Fatalf("op %d: %v", i, err)
						}
						continue
					}
					r, err := st.Decide(ctx, req)
					if err != nil {
						t.Fatalf("op %d: %v", i, err)
					}
					if r.Remaining != o.want {
						t.Fatalf("op %d (at %v, cost %d): %s, want %d remaining", i, o.at, o.cost, conformance.Format(r), o.want)
					}
				}
			})
		}
	}
}
