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

// TestBlocksStoresAgree plays random traces of every algorithm with a
// random block on both stores, alone and in all-or-nothing batches beside
// a plain level, and requires every result to be identical. Times only
// go forward here (a clock stepping back over a block is the hand-checked
// trace's); blocks are short and forgotten soon, so traces see blocks
// start, hold, escalate, cap and be forgotten.
func TestBlocksStoresAgree(t *testing.T) {
	st := stores(t)
	r := randomSource(t, 28)
	ctx := context.Background()
	blocked := 0
	for trace := range 48 {
		var inner algo.Limit
		switch trace % 6 {
		case 4:
			inner = randomWindowed(r, trace)
		case 5:
			inner = algo.Concurrency{Count: 1 + r.Int64N(4), HoldFor: time.Duration(1+r.IntN(10)) * 100 * time.Millisecond}
		default:
			inner = randomLimit(r, trace)
		}
		blk := algo.Block{For: time.Duration(1+r.IntN(20)) * 50 * time.Millisecond}
		if r.IntN(2) == 0 {
			blk.Growth = 1 + float64(r.IntN(30))/10
			blk.Max = blk.For * time.Duration(1+r.IntN(8))
		}
		if r.IntN(2) == 0 {
			blk.ForgetAfter = time.Duration(1+r.IntN(30)) * 100 * time.Millisecond
		}
		lim := algo.Blocking{Limit: inner, Block: blk}
		plain := algo.GCRA{Burst: 30, Count: 1, Period: time.Hour}
		at := conformance.T0.Add(time.Duration(r.Int64N(int64(time.Hour))))
		key := "blocks:" + strconv.Itoa(trace)
		for step := range 80 {
			at = at.Add(time.Duration(r.Int64N(int64(300 * time.Millisecond))))
			req := store.Request{Key: key, Plan: algo.MustCompile(lim), Cost: r.Int64N(4), Time: at}
			if r.IntN(3) > 0 {
				m := decideOnBoth(t, ctx, st, req, fmt.Sprintf("trace %d step %d", trace, step))
				if m.DeniedBy == algo.DeniedByBlock {
					blocked++
				}
				continue
			}
			res := decideAllOnBoth(t, ctx, st, []store.Request{{Key: key + ":plain", Plan: algo.MustCompile(plain), Cost: 1, Time: at}, req}, "trace "+strconv.Itoa(trace)+" step "+strconv.Itoa(step))
			if res[1].DeniedBy == algo.DeniedByBlock {
				blocked++
			}
		}
	}
	if blocked < 300 {
		t.Fatalf("only %d decisions denied by a block", blocked)
	}
	t.Logf("%d decisions denied by a block", blocked)
}

// TestAdjustStoresAgree plays random traces of decisions, penalties,
// rewards, blocks and unblocks (store.Adjuster) on both stores, on
// blocking GCRA, token bucket and fixed window limits, and requires every
// decision after them to be identical.
func TestAdjustStoresAgree(t *testing.T) {
	st := stores(t)
	r := randomSource(t, 29)
	ctx := context.Background()
	blocks := 0
	for trace := range 30 {
		lim := algo.Blocking{Limit: randomLimit(r, trace%3), Block: algo.Block{For: time.Duration(1+r.IntN(10)) * 100 * time.Millisecond, Growth: 2}}
		at := conformance.T0.Add(time.Duration(r.Int64N(int64(time.Hour))))
		key := "adjust:" + strconv.Itoa(trace)
		for step := range 60 {
			at = at.Add(time.Duration(r.Int64N(int64(300 * time.Millisecond))))
			req := store.Request{Key: key, Plan: algo.MustCompile(lim), Cost: 1 + r.Int64N(3), Time: at}
			block, unblock := r.IntN(4) == 0, r.IntN(4) == 0
			for _, name := range []string{"memory", "redis"} {
				a := st[name].(store.Adjuster)
				var err error
				switch step % 5 {
				case 1:
					err = a.Adjust(ctx, req, algo.Penalize)
				case 2:
					err = a.Adjust(ctx, req, algo.Reward)
				case 3:
					if block {
						err = a.Block(ctx, req, time.Duration(req.Cost)*200*time.Millisecond)
					} else if unblock {
						err = a.Unblock(ctx, req)
					}
				}
				if err != nil {
					t.Fatalf("trace %d step %d on %s: %v", trace, step, name, err)
				}
			}
			req.Cost = r.Int64N(3)
			res := decideOnBoth(t, ctx, st, req, fmt.Sprintf("trace %d step %d", trace, step))
			switch blocked := res.DeniedBy == algo.DeniedByBlock; {
			case step%5 == 3 && block && !blocked:
				t.Fatalf("trace %d step %d: not blocked right after a block: %s", trace, step, conformance.Format(res))
			case step%5 == 3 && !block && unblock && blocked && res.RetryAfter != lim.Block.For:
				// A denial may start a block again, a first one (the
				// unblock forgot the count); no older block remains.
				t.Fatalf("trace %d step %d: an older block right after an unblock: %s", trace, step, conformance.Format(res))
			case step%5 == 3 && block:
				blocks++
			}
		}
	}
	if blocks == 0 {
		t.Fatal("no trace blocked a key by hand")
	}
	t.Logf("%d blocks by hand", blocks)
}

// TestEscalation: a request that watches the levels after it (a node's
// escalate) counts one per block they start (or, WatchDenials, per
// denial) and blocks its own key at the count past its window's limit, in
// the same DecideAll, on both stores alike. By hand: 2 per hour, then an
// hour's block; each username is 1 an hour with a 15-minute block.
func TestEscalation(t *testing.T) {
	st := stores(t)
	ctx := context.Background()
	esc := algo.MustCompile(algo.Blocking{Limit: algo.FixedWindow{Count: 2, Window: time.Hour}, Block: algo.Block{For: time.Hour}})
	user := algo.MustCompile(algo.Blocking{Limit: algo.FixedWindow{Count: 1, Window: time.Hour}, Block: algo.Block{For: 15 * time.Minute}})
	at := time.Date(2026, 11, 26, 10, 0, 0, 0, time.UTC)
	for _, denials := range []bool{false, true} {
		ip := fmt.Sprintf("esc:%v", denials)
		try := func(step int, d time.Duration, u string) []algo.Result {
			return decideAllOnBoth(t, ctx, st, []store.Request{
				{Key: ip, Plan: esc, Time: at.Add(d), Watch: 1, WatchDenials: denials},
				{Key: ip + ":" + u, Plan: user, Cost: 1, Time: at.Add(d)},
			}, fmt.Sprintf("denials %v step %d", denials, step))
		}
		want := func(step int, res []algo.Result, ipAllowed, userAllowed bool, ipRetry time.Duration) {
			t.Helper()
			if res[0].Allowed != ipAllowed || res[1].Allowed != userAllowed || res[0].RetryAfter != ipRetry {
				t.Errorf("denials %v step %d: address %s, user %s; want address allowed %v (retry %v), user allowed %v",
					denials, step, conformance.Format(res[0]), conformance.Format(res[1]), ipAllowed, ipRetry, userAllowed)
			}
		}
		want(1, try(1, 0, "u1"), true, true, 0)
		want(2, try(2, time.Second, "u1"), true, false, 0)   // u1 blocked: 1 at the address
		want(3, try(3, 2*time.Second, "u1"), true, false, 0) // denied by its block: a denial, no block
		if denials {
			// The 3rd denial blocks the address, from now.
			want(4, try(4, 3*time.Second, "u2"), true, true, 0)
			want(5, try(5, 4*time.Second, "u2"), false, false, time.Hour)
		} else {
			want(4, try(4, 3*time.Second, "u2"), true, true, 0)
			want(5, try(5, 4*time.Second, "u2"), true, false, 0) // u2 blocked: 2
			want(6, try(6, 5*time.Second, "u3"), true, true, 0)
			want(7, try(7, 6*time.Second, "u3"), false, false, time.Hour) // u3 blocked: 3, the address blocked an hour
		}
		// Blocked, the address denies a fresh username, which spends nothing.
		want(8, try(8, 10*time.Second, "u9"), false, true, time.Hour-10*time.Second+map[bool]time.Duration{false: 6 * time.Second, true: 4 * time.Second}[denials])
		want(9, try(9, time.Hour+10*time.Second, "u9"), true, true, 0)
	}

	// Random traces: two usernames under an address, blocks or denials
	// counted, both stores give the same results.
	r := randomSource(t, 58)
	escalated := 0
	for trace := range 24 {
		esc := algo.MustCompile(algo.Blocking{Limit: algo.FixedWindow{Count: r.Int64N(3), Window: time.Duration(1+r.IntN(5)) * time.Second},
			Block: algo.Block{For: time.Duration(1+r.IntN(10)) * 100 * time.Millisecond, Growth: 2, Max: 3 * time.Second}})
		user := algo.MustCompile(algo.Blocking{Limit: algo.FixedWindow{Count: 1 + r.Int64N(3), Window: time.Second},
			Block: algo.Block{For: time.Duration(1+r.IntN(5)) * 100 * time.Millisecond}})
		at := conformance.T0.Add(time.Duration(r.Int64N(int64(time.Hour))))
		ip := "escr:" + strconv.Itoa(trace)
		denials := trace%2 == 1
		for step := range 60 {
			at = at.Add(time.Duration(r.Int64N(int64(200 * time.Millisecond))))
			reqs := []store.Request{{Key: ip, Plan: esc, Time: at, Watch: 2, WatchDenials: denials}}
			for _, u := range []string{"a", "b"} {
				reqs = append(reqs, store.Request{Key: ip + ":" + u + strconv.Itoa(r.IntN(3)), Plan: user, Cost: r.Int64N(3), Time: at})
			}
			res := decideAllOnBoth(t, ctx, st, reqs, fmt.Sprintf("trace %d step %d", trace, step))
			if res[0].DeniedBy == algo.DeniedByBlock {
				escalated++
			}
		}
	}
	if escalated < 100 {
		t.Fatalf("only %d decisions denied by an escalated block", escalated)
	}
	t.Logf("%d decisions denied by an escalated block", escalated)
}
