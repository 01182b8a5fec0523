package sluice_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/algo"
)

// TestEstimateIsExact: 100 goroutines race to estimate 1,000 on a budget of
// 10,000, on both stores and on limits with debt and without: exactly 10
// are admitted, a denied estimate records nothing, and settling each at
// 400 (twice) leaves 6,000 of the budget, once for each; a settle above
// the estimate records the excess past the limit.
func TestEstimateIsExact(t *testing.T) {
	stores, _ := limiterStores(t)
	for sname, st := range stores {
		for lname, l := range map[string]algo.Limit{
			"fixed_window":   algo.FixedWindow{Count: 10_000, Window: 1000 * time.Hour},
			"debt":           algo.Debt{Limit: algo.FixedWindow{Count: 10_000, Window: 1000 * time.Hour}},
			"window_counter": algo.WindowCounter{Slice: time.Hour, Limits: []algo.Window{{Count: 10_000, Window: 100 * time.Hour}}},
		} {
			t.Run(sname+"/"+lname, func(t *testing.T) {
				ctx, key := context.Background(), "est:"+lname
				lim, err := sluice.NewLimiter(st, l)
				if err != nil {
					t.Fatal(err)
				}
				es := make([]*sluice.Estimate, 100)
				var wg sync.WaitGroup
				for i := range es {
					wg.Add(1)
					go func() {
						defer wg.Done()
						var err error
						if es[i], err = lim.Estimate(ctx, key, 1000); err != nil {
							t.Error(err)
						}
					}()
				}
				wg.Wait()
				var admitted atomic.Int64
				for _, e := range es {
					for range 2 { // settled twice at once: once
						wg.Add(1)
						go func() {
							defer wg.Done()
							if e != nil && e.OK() {
								if err := e.Settle(ctx, 400); err != nil {
									t.Error(err)
								}
							}
						}()
					}
					if e != nil && e.OK() {
						admitted.Add(1)
					}
				}
				wg.Wait()
				if got := admitted.Load(); got != 10 {
					t.Fatalf("admitted %d estimates of 1,000 on 10,000, want 10", got)
				}
				left := func() int64 {
					r, err := lim.DecideN(ctx, key, time.Time{}, 0)
					if err != nil {
						t.Fatal(err)
					}
					return r.Remaining
				}
				if r := left(); r != 6000 {
					t.Fatalf("after 10 settled at 400: %d left, want 6,000", r)
				}
				e, _ := lim.Estimate(ctx, key, 1000)
				if err := e.Settle(ctx, 7000); err != nil || left() != 0 {
					t.Fatalf("a settle of 7,000 on an estimate of 1,000: %v, %d left", err, left())
				}
				for _, bad := range []int64{-1, algo.MaxCount + 1} {
					if err := e.Settle(ctx, bad); err == nil {
						t.Errorf("settle %d accepted", bad)
					}
				}
			})
		}
	}
	if _, err := sluice.NewLimiter(stores["memory"], algo.Gate{Interval: time.Second}); err != nil {
		t.Fatal(err)
	}
	gate, _ := sluice.NewLimiter(stores["memory"], algo.Gate{Interval: time.Second})
	if _, err := gate.Estimate(context.Background(), "g", 1); err == nil {
		t.Error("an estimate on a gate, which cannot give back, was made")
	}
}
