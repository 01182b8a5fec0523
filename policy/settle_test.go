package policy_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/policy"
	"github.com/sluicehq/sluice/store"
	"github.com/sluicehq/sluice/store/memory"
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

// TestSettleBucketWhereItBegan: a bucket's estimate gives back the part of
// its n·T that lies ahead of the settle, from where it began: all of it
// while the bucket was busy ahead of it (it began at the TAT it found),
// none once it has passed (before: a bucket that had refilled past the
// estimate gave back what others had spent since). On every store.
func TestSettleBucketWhereItBegan(t *testing.T) {
	const src = `schema:
  llm:
    children:
      "*":
        limits: {algorithm: token_bucket, burst: 1000, rate: 1000, per: 1h}
`
	T := 3600 * time.Millisecond // one unit's refill
	for name, st := range stores(t) {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			c := checker(t, src, st)
			at := time.Date(2027, 1, 1, 10, 0, 0, 0, time.UTC)
			check := func(tenant string, when time.Time, cost int64) int64 {
				t.Helper()
				var d policy.Decision
				if err := c.Decide(ctx, &policy.Query{Time: when, Paths: []policy.PathQuery{{Path: []string{"llm", tenant}, Cost: cost}}}, &d); err != nil || !d.Allowed {
					t.Fatalf("check of %d: %v %v", cost, d.Allowed, err)
				}
				return d.Levels[0].Result.Remaining
			}
			estimate := func(tenant string, when time.Time, cost int64) string {
				t.Helper()
				var d policy.Decision
				id, err := c.Estimate(ctx, &policy.Query{Time: when, Paths: []policy.PathQuery{{Path: []string{"llm", tenant}, Cost: cost}}}, &d, time.Hour)
				if err != nil || id == "" {
					t.Fatalf("estimate: %q %v", id, err)
				}
				return id
			}
			// Busy: 500 spent, then an estimate of 400 behind them, settled
			// at 0 after 100 units' time: all 400 come back.
			check("busy", at, 500)
			id := estimate("busy", at, 400)
			later := at.Add(100 * T)
			if ok, err := c.Settle(ctx, later, id, 0); !ok || err != nil {
				t.Fatalf("settle: %v %v", ok, err)
			}
			if r := check("busy", later, 0); r != 600 {
				t.Fatalf("busy bucket: %d remaining after the settle, want 600 (500 spent, 100 refilled)", r)
			}
			// Idle: the estimate's 400 pass by, then 300 are spent; its
			// settle finds nothing of it ahead, and gives nothing back.
			id = estimate("idle", at, 400)
			later = at.Add(500 * T)
			check("idle", later, 300)
			if ok, err := c.Settle(ctx, later, id, 0); !ok || err != nil {
				t.Fatalf("settle: %v %v", ok, err)
			}
			if r := check("idle", later, 0); r != 700 {
				t.Fatalf("idle bucket: %d remaining after the settle, want 700 (the 300 spent since stay spent)", r)
			}
		})
	}
}

// TestEstimatesBoundedPerKey: one caller holding store.MaxOpenTickets
// estimates open has its next one refused, before anything is decided,
// with store.ErrTooManyTickets, and another caller's estimate is admitted;
// a settle makes room (before: one table for every caller, which one
// could fill, after which every caller's estimate failed).
func TestEstimatesBoundedPerKey(t *testing.T) {
	const src = `schema:
  llm:
    children:
      "*":
        limits: {algorithm: fixed_window, limit: 1000000, window: 24h}
`
	c := checker(t, src, memory.New())
	ctx := context.Background()
	at := time.Date(2027, 1, 1, 10, 0, 0, 0, time.UTC)
	estimate := func(tenant string) (string, *policy.Decision, error) {
		var d policy.Decision
		id, err := c.Estimate(ctx, &policy.Query{Time: at, Paths: []policy.PathQuery{{Path: []string{"llm", tenant}, Cost: 1}}}, &d, 24*time.Hour)
		return id, &d, err
	}
	var first string
	for i := range store.MaxOpenTickets {
		id, _, err := estimate("mallory")
		if err != nil || id == "" {
			t.Fatalf("estimate %d: %q %v", i, id, err)
		}
		if i == 0 {
			first = id
		}
	}
	if _, _, err := estimate("mallory"); !errors.Is(err, store.ErrTooManyTickets) {
		t.Fatalf("an estimate past the bound: %v", err)
	}
	var d policy.Decision
	if err := c.Decide(ctx, &policy.Query{Time: at, Paths: []policy.PathQuery{{Path: []string{"llm", "mallory"}}}}, &d); err != nil || d.Levels[0].Result.Remaining != 1000000-store.MaxOpenTickets {
		t.Fatalf("the refused estimate was counted: %d remaining, %v", d.Levels[0].Result.Remaining, err)
	}
	if id, d, err := estimate("alice"); err != nil || id == "" || !d.Allowed {
		t.Fatalf("another caller's estimate: %q %v %v", id, d.Allowed, err)
	}
	if ok, err := c.Settle(ctx, at, first, 1); !ok || err != nil {
		t.Fatalf("settle: %v %v", ok, err)
	}
	if id, _, err := estimate("mallory"); err != nil || id == "" {
		t.Fatalf("after a settle: %q %v", id, err)
	}
}
