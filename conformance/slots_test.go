package conformance_test

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/sluicehq/sluice/algo"
	"github.com/sluicehq/sluice/conformance"
	"github.com/sluicehq/sluice/store"
)

// TestConcurrencyStoresAgree plays random traces of acquires, renewals
// and releases, with permit ids and without, on both stores, alone and in
// all-or-nothing batches beside a GCRA level, with times that sometimes
// step back; every result must be identical. Leases are short so that
// they end within traces.
func TestConcurrencyStoresAgree(t *testing.T) {
	st := stores(t)
	r := randomSource(t, 27)
	ctx := context.Background()
	g := newTTLGuard(st)
	ops, holders := map[algo.SlotOp]int{}, 0
	for trace := range 40 {
		c := algo.Concurrency{Count: 1 + r.Int64N(5), HoldFor: time.Duration(1+r.IntN(20)) * 100 * time.Millisecond}
		base, err := algo.Compile(c)
		if err != nil {
			t.Fatal(err)
		}
		// A rate level that admits 21 and then denies (the trace's batches
		// see both), and whose state outlives the trace, so that a time
		// stepping back never finds it dropped by one store only.
		rate := algo.GCRA{Burst: 20, Count: 1, Period: time.Hour}
		at := conformance.T0.Add(time.Duration(r.Int64N(int64(time.Hour))))
		key, gen := "slots:"+strconv.Itoa(trace), 0
		var floor time.Time
		for step := range 80 {
			at = nextTime(r, at, floor, 500*time.Millisecond, 400*time.Millisecond)
			if !g.ok(t, at, store.Request{Key: key, Plan: algo.MustCompile(c)}) {
				gen++
				key, floor = "slots:"+strconv.Itoa(trace)+"."+strconv.Itoa(gen), time.Time{}
			}
			if e, ok := g.expire[key]; ok && !at.Before(e) && e.After(floor) {
				floor = e
			}
			id, op := r.Int64N(4), algo.SlotOp(r.IntN(3))
			if op == algo.Renew && id == 0 {
				id = 1
			}
			p := base
			if err := algo.ForPermit(&p, id, op); err != nil {
				t.Fatal(err)
			}
			ops[op]++
			// A key seen with no slot held may hold only leases that have
			// ended, which the memory store may then forget and Redis
			// keeps until a write sweeps them: the clock steps back no
			// further than that, where Redis would see them again.
			seen := func(res algo.Result) {
				g.saw(key, at, res)
				if res.Remaining == res.Quota && at.After(floor) {
					floor = at
				}
			}
			req := store.Request{Key: key, Plan: &p, Cost: r.Int64N(4), Time: at}
			if op != algo.Acquire || r.IntN(2) == 0 {
				m := decideOnBoth(t, ctx, st, req, fmt.Sprintf("trace %d step %d", trace, step))
				seen(m)
				continue
			}
			// An acquire beside a rate level: all or nothing.
			reqs := []store.Request{{Key: key + ":rate", Plan: algo.MustCompile(rate), Cost: 1, Time: at}, req}
			res := decideAllOnBoth(t, ctx, st, reqs, "trace "+strconv.Itoa(trace)+" step "+strconv.Itoa(step))
			seen(res[1])
		}
		// Both stores list the same holders (store.HolderLister), in an
		// order that may differ among equal lease ends.
		var lists [2][]algo.Holder
		for i, name := range []string{"memory", "redis"} {
			hs, err := st[name].(store.HolderLister).Holders(ctx, store.Request{Key: key, Plan: algo.MustCompile(c), Time: at})
			if err != nil {
				t.Fatal(err)
			}
			slices.SortFunc(hs, func(a, b algo.Holder) int {
				return cmp.Or(cmp.Compare(a.End, b.End), cmp.Compare(a.Permit, b.Permit), cmp.Compare(a.Units, b.Units))
			})
			lists[i] = hs
		}
		if !slices.Equal(lists[0], lists[1]) {
			t.Fatalf("trace %d: holders at %v: memory %+v, redis %+v", trace, at.Sub(conformance.T0), lists[0], lists[1])
		}
		holders += len(lists[0])
	}
	if holders == 0 || ops[algo.Renew] == 0 || ops[algo.Release] == 0 {
		t.Fatalf("the traces listed %d holders, with ops %v: too few to compare", holders, ops)
	}
	t.Log(ops, holders, "holders listed")
}

// TestConcurrencyAllOrNothing: a request denied by a rate level takes no
// slot, and one denied by a concurrency level consumes no rate.
func TestConcurrencyAllOrNothing(t *testing.T) {
	ctx := context.Background()
	slots := algo.Concurrency{Count: 1, HoldFor: time.Minute}
	rate := algo.FixedWindow{Count: 1, Window: time.Hour}
	for name, st := range stores(t) {
		t.Run(name, func(t *testing.T) {
			at := conformance.T0
			res := make([]algo.Result, 2)
			// The rate level denies (its one unit taken first): no slot taken.
			if r, err := st.Decide(ctx, store.Request{Key: "aon:rate", Plan: algo.MustCompile(rate), Cost: 1, Time: at}); err != nil || !r.Allowed {
				t.Fatal(r, err)
			}
			pass, err := st.DecideAll(ctx, []store.Request{{Key: "aon:rate", Plan: algo.MustCompile(rate), Cost: 1, Time: at}, {Key: "aon:slots", Plan: algo.MustCompile(slots), Cost: 1, Time: at}}, res)
			if err != nil || pass || res[1].Remaining != 1 || res[1].Admitted != 0 {
				t.Fatalf("rate denies: pass %v %v, slots %s", pass, err, conformance.Format(res[1]))
			}
			// The slot level denies: the rate level consumes nothing.
			if r, err := st.Decide(ctx, store.Request{Key: "aon:slots2", Plan: algo.MustCompile(slots), Cost: 1, Time: at}); err != nil || !r.Allowed {
				t.Fatal(r, err)
			}
			pass, err = st.DecideAll(ctx, []store.Request{{Key: "aon:rate2", Plan: algo.MustCompile(rate), Cost: 1, Time: at}, {Key: "aon:slots2", Plan: algo.MustCompile(slots), Cost: 1, Time: at}}, res)
			if err != nil || pass || res[0].Remaining != 1 || res[1].Allowed {
				t.Fatalf("slots deny: pass %v %v, rate %s slots %s", pass, err, conformance.Format(res[0]), conformance.Format(res[1]))
			}
			if r, err := st.Decide(ctx, store.Request{Key: "aon:rate2", Plan: algo.MustCompile(rate), Cost: 1, Time: at}); err != nil || !r.Allowed {
				t.Fatalf("the rate level was consumed: %s %v", conformance.Format(r), err)
			}
		})
	}
}
