package policy_test

import (
	"context"
	"strings"
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
				if err := check(c, ctx, at.Add(after), path, cost, &d); err != nil {
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
		if err := check(c, context.Background(), at, []string{"ip", "a"}, 1, &d); err != nil {
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

// TestEscalateOnAPath: a node's escalate counts the blocks that start
// below it on a path and blocks its own key at the count, on the memory
// store, Redis and a Redis Cluster: the address is blocked by its second
// username's block, then denies every username (which spends nothing) and
// a path that ends at it, for the block's hour; another address is not;
// an allowed escalate adds no level to the decision.
func TestEscalateOnAPath(t *testing.T) {
	ctx := context.Background()
	const src = `
schema:
  login:
    children:
      "*":
        escalate: {blocks: 2, within: 1h, block: {for: 1h}}
        children:
          "*": {limits: {algorithm: fixed_window, limit: 1, window: 1h, block: {for: 10m}}}
`
	for name, st := range stores(t) {
		t.Run(name, func(t *testing.T) {
			c := checker(t, src, st)
			at := conformance.T0
			var d policy.Decision
			check := func(after time.Duration, path ...string) *policy.Decision {
				t.Helper()
				if err := check(c, ctx, at.Add(after), path, 1, &d); err != nil {
					t.Fatal(err)
				}
				return &d
			}
			if d := check(0, "login", "ip1", "u1"); !d.Allowed || len(d.Levels) != 1 || d.Levels[0].Pattern != "login/*/*" {
				t.Fatalf("the first try: %+v", d)
			}
			if d := check(time.Second, "login", "ip1", "u1"); d.Allowed || len(d.Levels) != 1 || d.Summary.RetryAfter != 10*time.Minute {
				t.Fatalf("u1 over: %+v", d)
			}
			check(2*time.Second, "login", "ip1", "u2")
			if d := check(3*time.Second, "login", "ip1", "u2"); d.Allowed || len(d.Levels) != 2 || d.Levels[0].Pattern != "login/*" || d.Levels[0].Key != "login:ip1#escalate" ||
				d.Levels[0].Result.DeniedBy != algo.DeniedByBlock || d.Summary.RetryAfter != time.Hour {
				t.Fatalf("u2 over, the second block: %+v", d)
			}
			if d := check(time.Minute, "login", "ip1", "u3"); d.Allowed || d.Summary.RetryAfter != time.Hour-time.Minute+3*time.Second || !d.Levels[1].Result.Allowed {
				t.Fatalf("a fresh username from the blocked address: %+v", d)
			}
			if d := check(2*time.Minute, "login", "ip1"); d.Allowed || d.Summary.DeniedBy != algo.DeniedByBlock {
				t.Fatalf("the address alone: %+v", d)
			}
			if d := check(2*time.Minute, "login", "ip2", "u1"); !d.Allowed {
				t.Fatalf("another address: %+v", d)
			}
			// The hour over, u3 has its one try: the denied ones spent nothing.
			if d := check(time.Hour+4*time.Second, "login", "ip1", "u3"); !d.Allowed || d.Levels[0].Result.Remaining != 0 {
				t.Fatalf("after the address's block: %+v", d)
			}
		})
	}
}

// TestEscalateErrors: escalate is refused, with its position, without one
// count, without within or block, on a node with no children, when it
// counts blocks and none below has one, and beside a lease.
func TestEscalateErrors(t *testing.T) {
	child := "\n        children:\n          \"*\": {limits: {algorithm: fixed_window, limit: 1, window: 1h, block: {for: 1m}}}\n"
	for _, tc := range []struct{ esc, want string }{
		{"{within: 1h, block: {for: 1h}}", "f.yaml:5:19: schema.a.children.*.escalate: want one of blocks: N"},
		{"{blocks: 2, denials: 2, within: 1h, block: {for: 1h}}", "want one of blocks: N"},
		{"{blocks: 1001, within: 1h, block: {for: 1h}}", "want blocks or denials of 1 to 1000, got 1001"},
		{"{blocks: 2, block: {for: 1h}}", "want within: a positive window"},
		{"{blocks: 2, within: 1h}", "want block: {for: D, ...}"},
		{"{blocks: 2, within: 1h, block: {for: 0s}}", "block for must be"},
		{"{blocks: 2, within: 1h, colour: red, block: {for: 1h}}", "colour"},
	} {
		src := "schema:\n  a:\n    children:\n      \"*\":\n        escalate: " + tc.esc + child
		if _, err := policy.Parse("f.yaml", []byte(src)); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s:\n got %v\nwant %s", tc.esc, err, tc.want)
		}
	}
	for _, tc := range []struct{ src, want string }{
		{"schema:\n  a:\n    escalate: {denials: 2, within: 1h, block: {for: 1h}}\n    limits: [1, 1, 1]\n", "schema.a.escalate: escalate counts what the nodes below do, and the node has no children"},
		{"schema:\n  a:\n    escalate: {blocks: 2, within: 1h, block: {for: 1h}}\n    children:\n      \"*\": {limits: [1, 1, 1]}\n", "no limit below has a block"},
		{"schema:\n  a:\n    escalate: {denials: 2, within: 1h, block: {for: 1h}}\n    children:\n      \"*\": {lease: true, limits: {algorithm: fixed_window, limit: 1, window: 1h}}\n", "a/* below says lease: true"},
	} {
		if _, err := policy.Parse("f.yaml", []byte(tc.src)); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q:\n got %v\nwant %s", tc.src, err, tc.want)
		}
	}
	// Denials need no block below.
	if _, err := policy.Parse("f.yaml", []byte("schema:\n  a:\n    escalate: {denials: 20, within: 15m, block: {for: 1h}}\n    children:\n      \"*\": {limits: [1, 1, 1]}\n")); err != nil {
		t.Errorf("escalate of denials: %v", err)
	}
}
