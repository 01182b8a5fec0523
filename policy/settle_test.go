package policy_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/policy"
	"github.com/sluicehq/sluice/store"
)

const settlePolicy = `schema:
  llm:
    limits: {algorithm: fixed_window, limit: 100000, window: 1h}
    children:
      "*":
        limits: {algorithm: token_bucket, burst: 1000, rate: 1000, per: 1h}
`

// TestEstimateSettle: an estimate is admitted only if it fits, and its
// settle gives back the unused part or records the excess on every level,
// once; a forged, altered or malformed id changes nothing. On the memory
// store, Redis and a Redis Cluster (where the tenant's level and the
// shared one lie in different slots).
func TestEstimateSettle(t *testing.T) {
	for name, st := range stores(t) {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			c := checker(t, settlePolicy, st)
			at := time.Date(2027, 1, 1, 10, 0, 0, 0, time.UTC)
			left := func() (int64, int64) {
				t.Helper()
				var d policy.Decision
				if err := c.Decide(ctx, &policy.Query{Time: at, Paths: []policy.PathQuery{{Path: []string{"llm", "acme"}}}}, &d); err != nil {
					t.Fatal(err)
				}
				return d.Levels[0].Result.Remaining, d.Levels[1].Result.Remaining
			}
			estimate := func(cost int64) string {
				t.Helper()
				var d policy.Decision
				id, err := c.Estimate(ctx, &policy.Query{Time: at, Paths: []policy.PathQuery{{Path: []string{"llm", "acme"}, Cost: cost}}}, &d, time.Minute)
				if err != nil {
					t.Fatal(err)
				}
				if (id != "") != d.Allowed {
					t.Fatalf("estimate of %d: id %q, allowed %v", cost, id, d.Allowed)
				}
				return id
			}
			settle := func(id string, cost int64) bool {
				t.Helper()
				ok, err := c.Settle(ctx, at, id, cost)
				if err != nil {
					t.Fatal(err)
				}
				return ok
			}
			id := estimate(800)
			if shared, own := left(); shared != 99200 || own != 200 {
				t.Fatalf("after an estimate of 800: %d, %d", shared, own)
			}
			if estimate(300) != "" {
				t.Fatal("an estimate that does not fit was admitted")
			}
			if !settle(id, 250) || settle(id, 0) {
				t.Fatal("settle once, then no more")
			}
			if shared, own := left(); shared != 99750 || own != 750 {
				t.Fatalf("after settling 800 at 250: %d, %d (want 99750, 750)", shared, own)
			}
			// An altered id (its estimate raised to give more back) names
			// no ticket.
			id = estimate(500)
			forged := strings.Replace(id, ".500.", ".5000.", 1)
			if settle(forged, 0) {
				t.Fatal("an altered id settled")
			}
			// The excess of a real cost over its estimate is recorded, past
			// the limit if need be.
			if !settle(id, 1400) {
				t.Fatal("settle")
			}
			if shared, own := left(); shared != 98350 || own != 0 {
				t.Fatalf("after settling 500 at 1400: %d, %d (want 98350, 0)", shared, own)
			}
			for _, bad := range []string{"", "x", "e1.a.1.p.bGxt", id + "x", strings.Replace(id, ".p.", ".q.", 1)} {
				if _, err := c.Settle(ctx, at, bad, 1); !errors.Is(err, store.ErrBadRequest) {
					t.Errorf("settle %q: %v", bad, err)
				}
			}
			if _, err := c.Settle(ctx, at, id, -1); !errors.Is(err, store.ErrBadRequest) {
				t.Errorf("a negative cost: %v", err)
			}
			var d policy.Decision
			if _, err := c.Estimate(ctx, &policy.Query{Time: at, Paths: []policy.PathQuery{{Path: []string{"llm", "a"}, Cost: 1}, {Path: []string{"llm", "b"}, Cost: 1}}}, &d, time.Minute); !errors.Is(err, store.ErrBadRequest) {
				t.Errorf("an estimate of two paths: %v", err)
			}
		})
	}
}
