package policy_test

import (
	"context"
	"testing"
	"time"

	"github.com/sluicehq/sluice/algo"
	"github.com/sluicehq/sluice/conformance"
	"github.com/sluicehq/sluice/policy"
)

const slotsPolicy = `
schema:
  tenant:
    children:
      "*":
        limits: [{algorithm: fixed_window, limit: 5, window: 1h}]
        children:
          export: {limits: [{algorithm: concurrency, limit: 2, hold_for: 1m}]}
`

// TestSlotsOnAPath: a path with a rate level and a concurrency level, on
// the memory store, Redis and a Redis Cluster (whose levels may lie in two
// slots: a denied acquire is then undone in the slot that took it).
// Acquires are all or nothing across both levels; a renewal and a release
// decide the concurrency level alone.
func TestSlotsOnAPath(t *testing.T) {
	ctx := context.Background()
	path := []string{"tenant", "acme", "export"}
	for name, st := range stores(t) {
		t.Run(name, func(t *testing.T) {
			c := checker(t, slotsPolicy, st)
			at := conformance.T0
			var d policy.Decision
			do := func(cost, permit int64, op algo.SlotOp) *policy.Decision {
				t.Helper()
				at = at.Add(time.Second)
				q := &policy.Query{Time: at, Paths: []policy.PathQuery{{Path: path, Cost: cost}}}
				var err error
				switch op {
				case algo.Acquire:
					if permit == 0 {
						err = c.Decide(ctx, q, &d) // no permit: a plain decision
					} else {
						err = slots(c, ctx, policy.Acquire, q, permit, &d)
					}
				case algo.Renew:
					err = slots(c, ctx, policy.Renew, q, permit, &d)
				default:
					err = slots(c, ctx, policy.Release, q, permit, &d)
				}
				if err != nil {
					t.Fatal(err)
				}
				return &d
			}
			level := func(pattern string) algo.Result {
				t.Helper()
				for _, l := range d.Levels {
					if l.Pattern == pattern {
						return l.Result
					}
				}
				t.Fatalf("no level %s in %+v", pattern, d.Levels)
				return algo.Result{}
			}
			if d := do(1, 1, algo.Acquire); !d.Allowed || d.Permit != 1 || len(d.Levels) != 2 {
				t.Fatalf("acquire 1: %+v", d)
			}
			if d := do(1, 2, algo.Acquire); !d.Allowed || d.Permit != 2 {
				t.Fatalf("acquire 2: %+v", d)
			}
			// Full: denied, and the rate level is not charged.
			if d := do(1, 3, algo.Acquire); d.Allowed || d.Permit != 0 || level("tenant/*").Remaining != 3 {
				t.Fatalf("acquire 3 on a full key: %+v", d)
			}
			if d := do(1, 1, algo.Release); !d.Allowed || len(d.Levels) != 1 || level("tenant/*/export").Admitted != 1 {
				t.Fatalf("release 1: %+v", d)
			}
			if d := do(1, 1, algo.Release); !d.Allowed || level("tenant/*/export").Admitted != 0 {
				t.Fatalf("release 1 again: %+v", d)
			}
			if d := do(1, 3, algo.Acquire); !d.Allowed || level("tenant/*").Remaining != 2 || level("tenant/*/export").Remaining != 0 {
				t.Fatalf("acquire 3: %+v", d)
			}
			if d := do(0, 3, algo.Renew); !d.Allowed || len(d.Levels) != 1 {
				t.Fatalf("renew 3: %+v", d)
			}
			if d := do(0, 1, algo.Renew); d.Allowed || d.Summary.RetryAfter != algo.Never {
				t.Fatalf("renew of a released permit: %+v", d)
			}
			do(1, 2, algo.Release)
			do(1, 3, algo.Release)
			// The rate level has 2 left: two acquires pass, the third is
			// denied by it and takes no slot.
			do(1, 4, algo.Acquire)
			do(1, 4, algo.Release)
			do(1, 5, algo.Acquire)
			if d := do(1, 6, algo.Acquire); d.Allowed || level("tenant/*").Allowed || level("tenant/*/export").Remaining != 1 {
				t.Fatalf("acquire over the rate: %+v", d)
			}
			if d := do(0, 0, algo.Acquire); level("tenant/*/export").Remaining != 1 {
				t.Fatalf("a denied acquire took a slot: %+v", d)
			}
			if err := slots(c, ctx, policy.Renew, &policy.Query{Time: at, Paths: []policy.PathQuery{{Path: path}}}, 0, &d); err == nil {
				t.Fatal("a renewal without a permit was decided")
			}
		})
	}
}
