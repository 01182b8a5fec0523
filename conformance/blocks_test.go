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
