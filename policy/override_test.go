package policy_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/algo"
	"github.com/sluicehq/sluice/policy"
	"github.com/sluicehq/sluice/store"
)

const overridePolicy = `schema:
  key:
    children:
      "*": {limits: {algorithm: fixed_window, limit: 3, window: 1h}}
`

// TestOverrides: an override changes one key's limit, or the keys a glob
// matches (a factor), at once for the instance that sets it and at its
// next Refresh for another on the same store; it ends at its time (by the
// decision's clock) and when removed; an invalid one is refused as
// limits.yaml's are. On the memory store, Redis and a Redis Cluster.
func TestOverrides(t *testing.T) {
	for name, st := range stores(t) {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			c := checker(t, overridePolicy, st)
			other := checker(t, overridePolicy, st) // another instance
			t0 := time.Date(2027, 6, 1, 10, 0, 0, 0, time.UTC)
			admitted := func(c *policy.Checker, key string, at time.Time) int {
				t.Helper()
				n := 0
				for range 50 {
					var d policy.Decision
					if err := c.Decide(ctx, &policy.Query{Time: at, Paths: []policy.PathQuery{{Path: []string{"key", key}, Cost: 1}}}, &d); err != nil {
						t.Fatal(err)
					}
					if d.Allowed {
						n++
					}
				}
				return n
			}
			key := func(k string) string { return c.Policy.Load().Match([]string{"key", k}).Hits[0].Key }
			if err := c.SetOverride(ctx, policy.Override{Node: "key/*", Key: key("acme"), Until: t0.Add(90 * time.Minute),
				Limits: []algo.Spec{{Algorithm: "fixed_window", Limit: 5, Window: time.Hour}}}); err != nil {
				t.Fatal(err)
			}
			if err := c.SetOverride(ctx, policy.Override{Node: "key/*", Key: "key:trial-*", Factor: 10}); err != nil {
				t.Fatal(err)
			}
			if n := admitted(c, "acme", t0); n != 5 {
				t.Fatalf("acme under its override: %d admitted, want 5", n)
			}
			if n := admitted(c, "bravo", t0); n != 3 {
				t.Fatalf("bravo, no override: %d, want 3", n)
			}
			if n := admitted(c, "trial-7", t0); n != 30 {
				t.Fatalf("trial-7 under 10x: %d, want 30", n)
			}
			// The other instance has not refreshed: the configured limit;
			// after Refresh, the overrides.
			if n := admitted(other, "trial-8", t0); n != 3 {
				t.Fatalf("trial-8 on an instance that has not refreshed: %d, want 3", n)
			}
			if err := other.Refresh(ctx); err != nil {
				t.Fatal(err)
			}
			if n := admitted(other, "trial-9", t0); n != 30 {
				t.Fatalf("trial-9 after Refresh: %d, want 30", n)
			}
			// Past its time, acme's override no longer applies (in the next
			// hour's window: 3).
			if n := admitted(c, "acme", t0.Add(2*time.Hour)); n != 3 {
				t.Fatalf("acme after its override ended: %d, want 3", n)
			}
			// Removed: the glob's keys have the node's limit again.
			if err := c.RemoveOverride(ctx, "key/*", "key:trial-*"); err != nil {
				t.Fatal(err)
			}
			if n := admitted(c, "trial-10", t0); n != 3 {
				t.Fatalf("trial-10 after the removal: %d, want 3", n)
			}
			if list, err := c.Overrides(ctx); err != nil || len(list) != 1 || list[0].Key != key("acme") {
				t.Fatalf("Overrides: %+v %v", list, err)
			}
			// An expired override is removed by the next SetOverride. (Its
			// Until must be after the store's time when it is set: a run
			// so slow that 50ms passed first sets it again.)
			var gone time.Time
			for start := time.Now(); ; {
				gone = time.Now().Add(50 * time.Millisecond)
				err := c.SetOverride(ctx, policy.Override{Node: "key/*", Key: key("gone"), Factor: 2, Until: gone})
				if err == nil {
					break
				}
				if !errors.Is(err, store.ErrBadRequest) || !strings.Contains(err.Error(), "want after the store's time") || time.Since(start) > time.Minute {
					t.Fatal(err)
				}
			}
			time.Sleep(time.Until(gone) + 10*time.Millisecond) // the stores' clocks are this machine's
			if err := c.SetOverride(ctx, policy.Override{Node: "key/*", Key: key("next"), Factor: 2}); err != nil {
				t.Fatal(err)
			}
			if list, _ := c.Overrides(ctx); len(list) != 2 || list[0].Key != key("acme") || list[1].Key != key("next") {
				t.Fatalf("after an expired override and another: %+v", list)
			}
			for _, bad := range []policy.Override{
				{Node: "nope/*", Key: "x", Factor: 2},
				{Node: "key/*", Factor: 2},
				{Node: "key/*", Key: "k", Factor: 2, Limits: []algo.Spec{{Algorithm: "gate", Interval: time.Second}}},
				{Node: "key/*", Key: "k", Factor: -1},
				{Node: "key/*", Key: "k", Limits: []algo.Spec{{Algorithm: "gcra", Burst: -1, Count: 1, Period: time.Second}}},
				{Node: "key/*", Key: "k["},
				{Node: "key/*", Key: "k", Factor: 2, Until: time.Now().Add(-time.Minute)}, // over: it would change nothing
				{Node: "key/*", Key: "k", Factor: 2, Until: time.Now().Add(algo.MaxHorizon + time.Hour)},
			} {
				if err := c.SetOverride(ctx, bad); !errors.Is(err, store.ErrBadRequest) {
					t.Errorf("%+v: %v", bad, err)
				}
			}
		})
	}
}

// TestOverrideRace: 200 goroutines race for a key whose override allows
// 37 (its node: 3), on Redis: exactly 37 are admitted.
func TestOverrideRace(t *testing.T) {
	st := stores(t)["redis"]
	ctx := context.Background()
	c := checker(t, overridePolicy, st)
	k := c.Policy.Load().Match([]string{"key", "racer"}).Hits[0].Key
	if err := c.SetOverride(ctx, policy.Override{Node: "key/*", Key: k, Limits: []algo.Spec{{Algorithm: "fixed_window", Limit: 37, Window: 1000 * time.Hour}}}); err != nil {
		t.Fatal(err)
	}
	var n atomic.Int64
	var wg sync.WaitGroup
	for range 200 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var d policy.Decision
			if err := c.Decide(ctx, &policy.Query{Paths: []policy.PathQuery{{Path: []string{"key", "racer"}, Cost: 1}}}, &d); err != nil {
				t.Error(err)
			}
			if d.Allowed {
				n.Add(1)
			}
		}()
	}
	wg.Wait()
	if n.Load() != 37 {
		t.Fatalf("%d admitted under an override of 37", n.Load())
	}
}

// TestOverridesByNode: on a path of two levels, an override applies at
// the node it names and only there (overrides are found by the hit's
// node); overrides with the same limits share one compiled copy of them
// yet count their keys apart, and one with other limits keeps its own.
func TestOverridesByNode(t *testing.T) {
	const twoLevels = `schema:
  org:
    children:
      "*":
        limits: {algorithm: fixed_window, limit: 100, window: 1h}
        children:
          api: {limits: {algorithm: fixed_window, limit: 3, window: 1h}}
`
	for name, st := range stores(t) {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			c := checker(t, twoLevels, st)
			t0 := time.Date(2027, 6, 1, 10, 0, 0, 0, time.UTC)
			hits := func(org string) []policy.Hit { return c.Policy.Load().Match([]string{"org", org, "api"}).Hits }
			fw := func(n int64) []algo.Spec {
				return []algo.Spec{{Algorithm: "fixed_window", Limit: n, Window: time.Hour}}
			}
			set := func(o policy.Override) {
				t.Helper()
				if err := c.SetOverride(ctx, o); err != nil {
					t.Fatal(err)
				}
			}
			// acme: 2 at the org level; its api level keeps 3.
			set(policy.Override{Node: "org/*", Key: hits("acme")[0].Key, Limits: fw(2)})
			// bravo and charlie: 5 at the api level, the same limits;
			// delta: 7 there.
			for _, org := range []string{"bravo", "charlie"} {
				set(policy.Override{Node: "org/*/api", Key: hits(org)[1].Key, Limits: fw(5)})
			}
			set(policy.Override{Node: "org/*/api", Key: hits("delta")[1].Key, Limits: fw(7)})
			admitted := func(org string) int {
				n := 0
				for range 20 {
					var d policy.Decision
					if err := c.Decide(ctx, &policy.Query{Time: t0, Paths: []policy.PathQuery{{Path: []string{"org", org, "api"}, Cost: 1}}}, &d); err != nil {
						t.Fatal(err)
					}
					if d.Allowed {
						n++
					}
				}
				return n
			}
			for org, want := range map[string]int{"acme": 2, "bravo": 5, "charlie": 5, "delta": 7, "echo": 3} {
				if n := admitted(org); n != want {
					t.Errorf("%s: %d admitted, want %d", org, n, want)
				}
			}
		})
	}
}
