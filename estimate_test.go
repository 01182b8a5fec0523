package sluice_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/algo"
	"github.com/sluicehq/sluice/store"
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

// movedClock is a store whose clock a test sets, for the Limiter: every
// decision, change and ticket is at now (a give-back still at its
// estimate's time).
type movedClock struct {
	store.Store
	now time.Time
}

func (m *movedClock) Now(context.Context) (time.Time, error) { return m.now, nil }

func (m *movedClock) Decide(ctx context.Context, r store.Request) (algo.Result, error) {
	r.Time = m.now
	return m.Store.Decide(ctx, r)
}

func (m *movedClock) Adjust(ctx context.Context, r store.Request, op algo.Adjust) error {
	r.Time = m.now
	return m.Store.(store.Adjuster).Adjust(ctx, r, op)
}

func (m *movedClock) Block(ctx context.Context, r store.Request, d time.Duration) error {
	return m.Store.(store.Adjuster).Block(ctx, r, d)
}

func (m *movedClock) Unblock(ctx context.Context, r store.Request) error {
	return m.Store.(store.Adjuster).Unblock(ctx, r)
}

func (m *movedClock) Issue(ctx context.Context, t store.Request, ttl time.Duration) error {
	t.Time = m.now
	return m.Store.(store.Settler).Issue(ctx, t, ttl)
}

func (m *movedClock) Settle(ctx context.Context, t store.Request, reqs []store.Request, op algo.Adjust) (bool, error) {
	t.Time = m.now
	return m.Store.(store.Settler).Settle(ctx, t, reqs, op)
}

// TestEstimateSettledInTheNextWindow: on both stores, an estimate of 600
// of 1,000 an hour taken at 59 min and settled at 100 at 61 min, once the
// new window is spent, gives nothing back to it (before: 500), and a
// settle above the estimate records the excess all the same; settled in
// its own window, it gives back exactly the difference.
func TestEstimateSettledInTheNextWindow(t *testing.T) {
	stores, _ := limiterStores(t)
	t0 := time.Unix(1_800_000_000, 0) // on the hour
	for name, st := range stores {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			m := &movedClock{Store: st}
			lim, err := sluice.NewLimiter(m, algo.FixedWindow{Count: 1000, Window: time.Hour})
			if err != nil {
				t.Fatal(err)
			}
			allow := func(key string, n int64) bool {
				t.Helper()
				ok, err := lim.AllowN(ctx, key, time.Time{}, n)
				if err != nil {
					t.Fatal(err)
				}
				return ok
			}
			estimate := func(key string, n int64) *sluice.Estimate {
				t.Helper()
				e, err := lim.Estimate(ctx, key, n)
				if err != nil || !e.OK() {
					t.Fatalf("estimate %d: %v", n, err)
				}
				return e
			}
			m.now = t0.Add(59 * time.Minute)
			e := estimate("next", 600)
			over := estimate("over", 600)
			m.now = t0.Add(60*time.Minute + time.Second)
			if !allow("next", 1000) || !allow("over", 400) {
				t.Fatal("the new window's 1,000 denied")
			}
			m.now = t0.Add(61 * time.Minute)
			if err := e.Settle(ctx, 100); err != nil {
				t.Fatal(err)
			}
			if allow("next", 1) {
				t.Error("an estimate of the last window gave back to the new one")
			}
			if err := over.Settle(ctx, 1200); err != nil {
				t.Fatal(err)
			}
			if allow("over", 1) {
				t.Error("the excess of a settle in the next window was not recorded")
			}
			// In its own window: exactly the difference.
			m.now = t0.Add(2*time.Hour + time.Minute)
			own := estimate("own", 600)
			if !allow("own", 400) {
				t.Fatal("400 denied")
			}
			if err := own.Settle(ctx, 100); err != nil {
				t.Fatal(err)
			}
			if !allow("own", 500) || allow("own", 1) {
				t.Error("a settle in its own window did not give back exactly 500")
			}
		})
	}
}
