package policy_test

import (
	"context"
	"testing"
	"time"

	"github.com/sluicehq/sluice/algo"
	"github.com/sluicehq/sluice/conformance"
	"github.com/sluicehq/sluice/policy"
	"github.com/sluicehq/sluice/store/memory"
)

// TestBlocksOnAPath: a path whose own level blocks, under a shared level,
// on the memory store, Redis and a Redis Cluster (the levels in two
// slots, each block key in its level's): a denial blocks the caller and
// not the shared level, the block holds all or nothing over the path, and
// the path's changes (penalty, reward, block, unblock) reach the own level
// alone unless Shared.
func TestBlocksOnAPath(t *testing.T) {
	ctx := context.Background()
	const src = `
schema:
  login:
    limits: [{algorithm: fixed_window, limit: 100, window: 1h}]
    children:
      "*": {limits: [{algorithm: fixed_window, limit: 2, window: 1h, block: {for: 1m, growth: 2}}]}
`
	path := []string{"login", "alex"}
	for name, st := range stores(t) {
		t.Run(name, func(t *testing.T) {
			c := checker(t, src, st)
			at := conformance.T0
			var d policy.Decision
			check := func(after time.Duration, cost int64) *policy.Decision {
				t.Helper()
				if err := c.CheckAt(ctx, at.Add(after), path, cost, &d); err != nil {
					t.Fatal(err)
				}
				return &d
			}
			check(0, 1)
			check(0, 1)
			if d := check(time.Second, 1); d.Allowed || d.Levels[1].Result.DeniedBy != algo.DeniedByBlock || d.Levels[1].Result.RetryAfter != time.Minute || d.Levels[0].Result.Remaining != 98 {
				t.Fatalf("over: %+v", d)
			}
			if d := check(30*time.Second, 1); d.Allowed || d.Summary.RetryAfter != 31*time.Second || d.Levels[0].Result.Remaining != 98 {
				t.Fatalf("blocked: %+v", d)
			}
			keys, err := c.Change(ctx, at.Add(40*time.Second), path, policy.Change{Unblock: true})
			if err != nil || len(keys) != 1 || keys[0] != "login:alex" {
				t.Fatalf("unblock: %v %v", keys, err)
			}
			if _, err := c.Change(ctx, at.Add(40*time.Second), path, policy.Change{Op: algo.Reward, Units: 2}); err != nil {
				t.Fatal(err)
			}
			if d := check(41*time.Second, 1); !d.Allowed || d.Levels[0].Result.Remaining != 97 {
				t.Fatalf("after unblock and reward: %+v", d)
			}
			if _, err := c.Change(ctx, at.Add(42*time.Second), path, policy.Change{Op: algo.Penalize, Units: 10, Shared: true}); err != nil {
				t.Fatal(err)
			}
			if d := check(43*time.Second, 0); d.Levels[0].Result.Remaining != 87 || d.Levels[1].Result.Remaining != 0 {
				t.Fatalf("after a penalty on every level: %+v", d)
			}
		})
	}
}

// TestBlockOnADelayNode: a node that delays and blocks: what it would
// admit within its delay it holds; beyond, the denial starts a block,
// which the answer reports as the block's.
func TestBlockOnADelayNode(t *testing.T) {
	st := memory.New()
	defer st.Close()
	c := checker(t, `
schema:
  ip:
    children:
      "*":
        limits: {algorithm: gcra, burst: 0, count: 1, period: 1s, block: {for: 1m}}
        delay: {max: 1500ms}
`, st)
	at := conformance.T0
	var d policy.Decision
	for i, want := range []time.Duration{0, time.Second, 0} {
		if err := c.CheckAt(context.Background(), at, []string{"ip", "a"}, 1, &d); err != nil {
			t.Fatal(err)
		}
		if i < 2 && (!d.Allowed || d.Delay != want) {
			t.Fatalf("request %d: %+v", i, d)
		}
		if i == 2 && (d.Allowed || d.Levels[0].Result.DeniedBy != algo.DeniedByBlock || d.Summary.RetryAfter != time.Minute) {
			t.Fatalf("request %d, beyond the delay: %+v", i, d)
		}
	}
}
