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
				id, err := estimateWithin(c, ctx, &policy.Query{Time: at, Paths: []policy.PathQuery{{Path: []string{"llm", "acme"}, Cost: cost}}}, &d, time.Minute)
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
				ok, err := settleAt(c, ctx, at, id, cost)
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
				if _, err := settleAt(c, ctx, at, bad, 1); !errors.Is(err, store.ErrBadRequest) {
					t.Errorf("settle %q: %v", bad, err)
				}
			}
			if _, err := settleAt(c, ctx, at, id, -1); !errors.Is(err, store.ErrBadRequest) {
				t.Errorf("a negative cost: %v", err)
			}
			if _, err := settleAt(c, ctx, at, id, 1, 1); !errors.Is(err, store.ErrBadRequest) {
				t.Errorf("two costs for an estimate of one path: %v", err)
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
				id, err := estimateWithin(c, ctx, &policy.Query{Time: when, Paths: []policy.PathQuery{{Path: []string{"llm", tenant}, Cost: cost}}}, &d, time.Hour)
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
			if ok, err := settleAt(c, ctx, later, id, 0); !ok || err != nil {
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
			if ok, err := settleAt(c, ctx, later, id, 0); !ok || err != nil {
				t.Fatalf("settle: %v %v", ok, err)
			}
			if r := check("idle", later, 0); r != 700 {
				t.Fatalf("idle bucket: %d remaining after the settle, want 700 (the 300 spent since stay spent)", r)
			}
		})
	}
}

// TestEstimatesBoundedPerKey: one caller holding store.MaxOpenTickets
// noDebt open has its next one refused, before anything is decided,
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
		id, err := estimateWithin(c, ctx, &policy.Query{Time: at, Paths: []policy.PathQuery{{Path: []string{"llm", tenant}, Cost: 1}}}, &d, 24*time.Hour)
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
	if ok, err := settleAt(c, ctx, at, first, 1); !ok || err != nil {
		t.Fatalf("settle: %v %v", ok, err)
	}
	if id, _, err := estimate("mallory"); err != nil || id == "" {
		t.Fatalf("after a settle: %q %v", id, err)
	}
}

// gatewayPolicy is an LLM gateway's: 20 calls a minute per caller, a
// month's tokens per caller in Europe/Berlin, and one bucket of tokens
// that both paths hit (their costs on it are added).
const gatewayPolicy = `schema:
  llm:
    limits: {algorithm: token_bucket, burst: 1000000, rate: 1000000, per: 1h}
    children:
      calls:
        children:
          "*": {limits: {algorithm: fixed_window, limit: 20, window: 1m}}
      tokens:
        children:
          "*": {limits: {algorithm: fixed_window, limit: 100000, window: month, time_zone: Europe/Berlin}}
`

// TestEstimateOfSeveralPaths: an estimate over a caller's calls (cost 1)
// and its tokens (cost 4,000) is one decision, admitted on both or
// neither; its settle takes the real cost of each path, in order, and
// gives back (lower), charges (higher), or both (one path lower, the
// other higher) on each key, the shared bucket getting the net of both
// paths; the costs must be one per path. On every store, the Cluster's
// paths in several slots.
func TestEstimateOfSeveralPaths(t *testing.T) {
	for name, st := range stores(t) {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			c := checker(t, gatewayPolicy, st)
			at := time.Date(2027, 3, 10, 12, 0, 30, 0, time.UTC)
			paths := func(caller string, calls, tokens int64) []policy.PathQuery {
				return []policy.PathQuery{{Path: []string{"llm", "calls", caller}, Cost: calls}, {Path: []string{"llm", "tokens", caller}, Cost: tokens}}
			}
			// left: what the shared bucket, the calls and the tokens have left.
			left := func(caller string) [3]int64 {
				t.Helper()
				var d policy.Decision
				if err := c.Decide(ctx, &policy.Query{Time: at, Paths: paths(caller, 0, 0)}, &d); err != nil || len(d.Levels) != 4 {
					t.Fatalf("peek: %v %v", d.Levels, err)
				}
				return [3]int64{d.Levels[0].Result.Remaining, d.Levels[1].Result.Remaining, d.Levels[3].Result.Remaining}
			}
			estimate := func(caller string, calls, tokens int64) string {
				t.Helper()
				var d policy.Decision
				id, err := estimateWithin(c, ctx, &policy.Query{Time: at, Paths: paths(caller, calls, tokens)}, &d, time.Hour)
				if err != nil {
					t.Fatal(err)
				}
				if (id != "") != d.Allowed {
					t.Fatalf("estimate: id %q, allowed %v", id, d.Allowed)
				}
				return id
			}
			settle := func(id string, costs ...int64) bool {
				t.Helper()
				ok, err := settleAt(c, ctx, at, id, costs...)
				if err != nil {
					t.Fatal(err)
				}
				return ok
			}
			id := estimate("alex", 1, 4000)
			if !strings.HasPrefix(id, "e3.") {
				t.Fatalf("an estimate of two paths: id %q", id)
			}
			if got := left("alex"); got != [3]int64{1000000 - 4001, 19, 96000} {
				t.Fatalf("after an estimate of 1 call and 4,000 tokens: %v", got)
			}
			for _, bad := range [][]int64{nil, {1250}, {1, 1250, 0}, {1, -1}, {-1, 1250}} {
				if _, err := settleAt(c, ctx, at, id, bad...); !errors.Is(err, store.ErrBadRequest) {
					t.Errorf("settle with costs %v: %v", bad, err)
				}
			}
			if got := left("alex"); got != [3]int64{1000000 - 4001, 19, 96000} {
				t.Fatalf("a refused settle changed something: %v", got)
			}
			// Lower: the tokens not used come back, the call stays counted.
			if !settle(id, 1, 1250) || settle(id, 1, 1250) {
				t.Fatal("settle once, then no more")
			}
			if got := left("alex"); got != [3]int64{1000000 - 1251, 19, 98750} {
				t.Fatalf("after settling at 1 call and 1,250 tokens: %v", got)
			}
			// Higher: the excess is charged.
			id = estimate("alex", 1, 4000)
			if !settle(id, 1, 5000) {
				t.Fatal("settle")
			}
			if got := left("alex"); got != [3]int64{1000000 - 6252, 18, 93750} {
				t.Fatalf("after settling at 1 call and 5,000 tokens: %v", got)
			}
			// Both: the call does not count (0) and the tokens are above;
			// the shared bucket is charged the net, 999.
			id = estimate("alex", 1, 4000)
			if !settle(id, 0, 5000) || settle(id, 0, 5000) {
				t.Fatal("settle once, then no more")
			}
			if got := left("alex"); got != [3]int64{1000000 - 11252, 18, 88750} {
				t.Fatalf("after settling at 0 calls and 5,000 tokens: %v", got)
			}
			// All or nothing: an estimate the tokens deny takes no call, one
			// the calls deny takes no token, and neither keeps a ticket.
			if estimate("alex", 1, 90000) != "" {
				t.Fatal("an estimate past the tokens admitted")
			}
			if got := left("alex"); got != [3]int64{1000000 - 11252, 18, 88750} {
				t.Fatalf("a denied estimate took something: %v", got)
			}
			for range 18 {
				settle(estimate("alex", 1, 1), 1, 1)
			}
			if estimate("alex", 1, 1) != "" {
				t.Fatal("a 21st call in the minute admitted")
			}
			if got := left("alex"); got != [3]int64{1000000 - 11252 - 36, 0, 88750 - 18} {
				t.Fatalf("after 20 calls and a denied 21st: %v", got)
			}
			// An altered id names no ticket.
			id = estimate("bo", 1, 4000)
			if settle(strings.Replace(id, ".1,4000.", ".1,40000.", 1), 1, 0) {
				t.Fatal("an altered id settled")
			}
		})
	}
}

// TestSettleOfSeveralPathsInItsWindow: an estimate over two paths counted
// in the last minute of January (Europe/Berlin) and settled in February
// gives nothing back to February's tokens or the next minute's calls, as
// neither held it; an excess is still charged, in February.
func TestSettleOfSeveralPathsInItsWindow(t *testing.T) {
	berlin, err := time.LoadLocation("Europe/Berlin")
	if err != nil {
		t.Fatal(err)
	}
	for name, st := range stores(t) {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			c := checker(t, gatewayPolicy, st)
			jan := time.Date(2027, 1, 31, 23, 59, 30, 0, berlin)
			feb := time.Date(2027, 2, 1, 0, 0, 10, 0, berlin)
			paths := []policy.PathQuery{{Path: []string{"llm", "calls", "alex"}, Cost: 1}, {Path: []string{"llm", "tokens", "alex"}, Cost: 4000}}
			var d policy.Decision
			id, err := estimateWithin(c, ctx, &policy.Query{Time: jan, Paths: paths}, &d, time.Hour)
			if err != nil || id == "" {
				t.Fatalf("estimate: %q %v", id, err)
			}
			id2, err := estimateWithin(c, ctx, &policy.Query{Time: jan, Paths: paths}, &d, time.Hour)
			if err != nil || id2 == "" {
				t.Fatalf("estimate: %q %v", id2, err)
			}
			// February spends 1,000 tokens and a call.
			if err := c.Decide(ctx, &policy.Query{Time: feb, Paths: []policy.PathQuery{{Path: []string{"llm", "calls", "alex"}, Cost: 1}, {Path: []string{"llm", "tokens", "alex"}, Cost: 1000}}}, &d); err != nil || !d.Allowed {
				t.Fatalf("February's first call: %v %v", d.Allowed, err)
			}
			if ok, err := settleAt(c, ctx, feb, id, 0, 0); !ok || err != nil {
				t.Fatalf("settle: %v %v", ok, err)
			}
			peek := func(at time.Time) (calls, tokens int64) {
				t.Helper()
				if err := c.Decide(ctx, &policy.Query{Time: at, Paths: []policy.PathQuery{{Path: []string{"llm", "calls", "alex"}}, {Path: []string{"llm", "tokens", "alex"}}}}, &d); err != nil {
					t.Fatal(err)
				}
				return d.Levels[1].Result.Remaining, d.Levels[3].Result.Remaining
			}
			if calls, tokens := peek(feb); calls != 19 || tokens != 99000 {
				t.Fatalf("after a January estimate settled at 0 in February: %d calls, %d tokens left, want 19 and 99,000 (nothing given back to February)", calls, tokens)
			}
			if ok, err := settleAt(c, ctx, feb, id2, 1, 4500); !ok || err != nil {
				t.Fatalf("settle: %v %v", ok, err)
			}
			if calls, tokens := peek(feb); calls != 19 || tokens != 98500 {
				t.Fatalf("after a January estimate settled above it in February: %d calls, %d tokens left, want 19 and 98,500 (the 500 excess charged)", calls, tokens)
			}
		})
	}
}

// TestSettleSharedBucketOfSeveralPaths: a bucket both paths of an estimate
// hit took their costs added (1 + 399), and its n·T began where the bucket
// was when the estimate found it; settled at 0 after 300 units' time, when
// 300 others have been spent since, it gives back the 100 of it still
// ahead, not the 300 spent by others (as it would, were each path's n·T
// taken to begin where its own cost alone would have). On every store.
func TestSettleSharedBucketOfSeveralPaths(t *testing.T) {
	T := 3600 * time.Microsecond // the shared bucket's refill of one unit
	for name, st := range stores(t) {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			c := checker(t, gatewayPolicy, st)
			at := time.Date(2027, 3, 10, 12, 0, 30, 0, time.UTC)
			var d policy.Decision
			id, err := estimateWithin(c, ctx, &policy.Query{Time: at, Paths: []policy.PathQuery{{Path: []string{"llm", "calls", "alex"}, Cost: 1}, {Path: []string{"llm", "tokens", "alex"}, Cost: 399}}}, &d, time.Hour)
			if err != nil || id == "" {
				t.Fatalf("estimate: %q %v", id, err)
			}
			later := at.Add(300 * T)
			spend := func(cost int64) int64 {
				t.Helper()
				if err := c.Decide(ctx, &policy.Query{Time: later, Paths: []policy.PathQuery{{Path: []string{"llm", "tokens", "bo"}, Cost: cost}}}, &d); err != nil || !d.Allowed {
					t.Fatalf("spend %d: %v %v", cost, d.Allowed, err)
				}
				return d.Levels[0].Result.Remaining
			}
			spend(300)
			if ok, err := settleAt(c, ctx, later, id, 0, 0); !ok || err != nil {
				t.Fatalf("settle: %v %v", ok, err)
			}
			if r := spend(0); r != 1000000-300 {
				t.Fatalf("the shared bucket after the settle: %d remaining, want %d (the 300 spent since stay spent)", r, 1000000-300)
			}
		})
	}
}

// TestEstimateIDBounded: an estimate whose paths would make an id longer
// than policy.MaxEstimateID is refused before anything is decided (before:
// it was admitted, and its settle refused the id as malformed, so it
// stayed counted in full).
func TestEstimateIDBounded(t *testing.T) {
	ctx := context.Background()
	c := checker(t, gatewayPolicy, memory.New())
	at := time.Date(2027, 3, 10, 12, 0, 30, 0, time.UTC)
	long := strings.Repeat("x", 400)
	path := []string{"llm", "tokens", "alex"}
	for range 16 {
		path = append(path, long)
	}
	var d policy.Decision
	_, err := estimateWithin(c, ctx, &policy.Query{Time: at, Paths: []policy.PathQuery{{Path: path, Cost: 4000}}}, &d, time.Hour)
	if !errors.Is(err, store.ErrBadRequest) || !strings.Contains(err.Error(), "more than 8192") {
		t.Fatalf("an estimate of a path of 6,400 bytes: %v", err)
	}
	if err := c.Decide(ctx, &policy.Query{Time: at, Paths: []policy.PathQuery{{Path: path}}}, &d); err != nil || d.Levels[0].Result.Remaining != 1000000 {
		t.Fatalf("the refused estimate was counted: %v %v", d.Levels, err)
	}
	// One that fits is settled.
	id, err := estimateWithin(c, ctx, &policy.Query{Time: at, Paths: []policy.PathQuery{{Path: path[:10], Cost: 4000}}}, &d, time.Hour)
	if err != nil || id == "" || len(id) > policy.MaxEstimateID {
		t.Fatalf("an estimate that fits: %d bytes, %v", len(id), err)
	}
	if ok, err := settleAt(c, ctx, at, id, 1000); !ok || err != nil {
		t.Fatalf("settle: %v %v", ok, err)
	}
}
