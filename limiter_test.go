package sluice_test

import (
	"cmp"
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/algo"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/store"
	"github.com/sluicehq/sluice/store/memory"
	"github.com/sluicehq/sluice/store/redis"
)

// limiterStores returns a fresh memory store and a store on a fresh Redis,
// and a second Redis store on the same server (another instance of a
// service). The Redis stores' timeout, a minute, is far past any
// decision's time: the default second is one a busy machine outlasted
// (TestSpentPermitsFreeNothing's 50 goroutines once met it).
func limiterStores(t *testing.T) (stores map[string]store.Store, twin store.Store) {
	t.Helper()
	srv := redistest.Start(t)
	open := func() store.Store {
		st, err := redis.Open(context.Background(), srv.URL(), redis.Options{Timeout: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { st.Close() })
		return st
	}
	m := memory.New()
	t.Cleanup(func() { m.Close() })
	return map[string]store.Store{"memory": m, "redis": open()}, open()
}

// TestNewLimiterRefuses: no store, no limit or an invalid one is an error
// at once, not a panic at the first decision.
func TestNewLimiterRefuses(t *testing.T) {
	st := memory.New()
	defer st.Close()
	ok := algo.GCRA{Burst: 1, Count: 1, Period: time.Second}
	if lim, err := sluice.NewLimiter(nil, ok); err == nil || lim != nil {
		t.Errorf("no store: %v", err)
	}
	for _, l := range []algo.Limit{nil, algo.GCRA{Burst: -1, Count: 1, Period: time.Second}} {
		if lim, err := sluice.NewLimiter(st, l); !errors.Is(err, algo.ErrInvalid) || lim != nil {
			t.Errorf("%#v: %v", l, err)
		}
	}
}

// TestLimiterAllowIsExact: 100 goroutines racing on one key are admitted
// exactly the limit, for every algorithm, on both stores.
func TestLimiterAllowIsExact(t *testing.T) {
	stores, _ := limiterStores(t)
	limits := map[string]algo.Limit{
		"gcra":           algo.GCRA{Burst: 36, Count: 1, Period: time.Hour},
		"token_bucket":   algo.TokenBucket{Burst: 37, Count: 1, Period: time.Hour},
		"fixed_window":   algo.FixedWindow{Count: 37, Window: 1000 * time.Hour},
		"gate":           algo.Gate{Interval: time.Hour},
		"sliding_log":    algo.SlidingLog{Limits: []algo.Window{{Count: 37, Window: time.Hour}}},
		"window_counter": algo.WindowCounter{Limits: []algo.Window{{Count: 37, Window: time.Hour}}},
		"concurrency":    algo.Concurrency{Count: 37, HoldFor: time.Hour},
	}
	if len(limits) != algo.NumKinds {
		t.Fatalf("%d limits for %d kinds", len(limits), algo.NumKinds)
	}
	for sname, st := range stores {
		for lname, l := range limits {
			t.Run(sname+"/"+lname, func(t *testing.T) {
				lim, err := sluice.NewLimiter(st, l)
				if err != nil {
					t.Fatal(err)
				}
				want := int64(37)
				if lname == "gate" {
					want = 1
				}
				var admitted atomic.Int64
				var wg sync.WaitGroup
				for range 100 {
					wg.Add(1)
					go func() {
						defer wg.Done()
						ok, err := lim.Allow(context.Background(), "race:"+lname)
						if err != nil {
							t.Error(err)
						}
						if ok {
							admitted.Add(1)
						}
					}()
				}
				wg.Wait()
				if got := admitted.Load(); got != want {
					t.Errorf("admitted %d, want %d", got, want)
				}
			})
		}
	}
}

// TestLimiterWaitKeepsTheRate: goroutines that Wait on one key are admitted
// at the limit's rate, never faster: in any stretch of time d, at most
// 1 + d/T. (No lower bound: a slow machine admits fewer.) Each admission
// is known to have been decided between two clock reads around the
// store's call, so that a goroutine descheduled after its decision (on a
// busy machine) widens the stretch a set of admissions may span, and
// never narrows it.
func TestLimiterWaitKeepsTheRate(t *testing.T) {
	stores, _ := limiterStores(t)
	const T = 20 * time.Millisecond // 50 per second, 1 at once
	for name, st := range stores {
		t.Run(name, func(t *testing.T) {
			timed := &timedStore{Store: st, start: time.Now()}
			lim, err := sluice.NewLimiter(timed, algo.GCRA{Burst: 0, Count: 50, Period: time.Second})
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 600*time.Millisecond)
			defer cancel()
			var wg sync.WaitGroup
			for range 10 {
				wg.Go(func() {
					for {
						err := lim.Wait(ctx, "wait")
						if err != nil {
							if !errors.Is(err, sluice.ErrWouldExceedDeadline) && !errors.Is(err, context.DeadlineExceeded) {
								t.Error(err)
							}
							return
						}
					}
				})
			}
			wg.Wait()
			at := timed.admitted()
			if len(at) == 0 {
				t.Fatal("nothing admitted")
			}
			// For the admissions whose calls began from the i-th's
			// beginning to the j-th's: they were decided within
			// [at[i].begin, the latest end among them], so at most
			// 1 + that span / T (and a millisecond for the clocks'
			// resolutions).
			for i := range at {
				last := at[i].end
				for j := i; j < len(at); j++ {
					last = max(last, at[j].end)
					span := last - at[i].begin + time.Millisecond
					if n := j - i + 1; n > 1+int(span/T) {
						t.Fatalf("admitted %d within %v, at most %d at 50/s", n, span, 1+int(span/T))
					}
				}
			}
			t.Logf("%d admitted in %v", len(at), at[len(at)-1].end-at[0].begin)
		})
	}
}

// timedStore records, for each decision that admitted, when the call to
// the store began and ended (on the monotonic clock, since the store was
// made), in the order the calls began.
type timedStore struct {
	store.Store
	mu    sync.Mutex
	start time.Time
	calls []timedCall
}

type timedCall struct{ begin, end time.Duration }

func (s *timedStore) Decide(ctx context.Context, req store.Request) (algo.Result, error) {
	begin := time.Since(s.start)
	r, err := s.Store.Decide(ctx, req)
	end := time.Since(s.start)
	if err == nil && r.Allowed {
		s.mu.Lock()
		s.calls = append(s.calls, timedCall{begin, end})
		s.mu.Unlock()
	}
	return r, err
}

func (s *timedStore) admitted() []timedCall {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := slices.Clone(s.calls)
	slices.SortFunc(out, func(a, b timedCall) int { return cmp.Compare(a.begin, b.begin) })
	return out
}

// TestLimiterWaitHonoursTheDeadline: a wait that would pass the deadline
// returns at once, consuming nothing; a cost over the burst never waits.
func TestLimiterWaitHonoursTheDeadline(t *testing.T) {
	stores, _ := limiterStores(t)
	for name, st := range stores {
		t.Run(name, func(t *testing.T) {
			lim, err := sluice.NewLimiter(st, algo.GCRA{Burst: 0, Count: 1, Period: time.Hour})
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			if err := lim.Wait(ctx, "k"); err != nil {
				t.Fatal(err)
			}
			if err := lim.Wait(ctx, "k"); !errors.Is(err, sluice.ErrWouldExceedDeadline) {
				t.Errorf("second wait: %v, want ErrWouldExceedDeadline (the next slot is an hour away)", err)
			}
			if err := lim.WaitN(ctx, "k", 2); !errors.Is(err, sluice.ErrNever) {
				t.Errorf("cost 2 on a limit of 1: %v, want ErrNever", err)
			}
			r, err := lim.DecideN(ctx, "k", time.Time{}, 0)
			if err != nil || r.Remaining != 0 || r.ResetAfter > time.Hour || r.ResetAfter < 59*time.Minute {
				t.Errorf("after the refused waits: %+v, %v; want only the first admission counted", r, err)
			}
		})
	}
}

// TestReserve: a reservation takes capacity ahead of its time, a later
// decision (on another instance too, on Redis) sees it taken, and Cancel
// gives it back.
func TestReserve(t *testing.T) {
	stores, twin := limiterStores(t)
	const T = time.Minute // 1 per minute, 2 at once
	l := algo.GCRA{Burst: 1, Count: 1, Period: T}
	for name, st := range stores {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			lim, err := sluice.NewLimiter(st, l)
			if err != nil {
				t.Fatal(err)
			}
			other := lim
			if name == "redis" {
				if other, err = sluice.NewLimiter(twin, l); err != nil {
					t.Fatal(err)
				}
			}
			var rs []*sluice.Reservation
			for i := range 3 {
				r, err := lim.Reserve(ctx, "k")
				if err != nil {
					t.Fatalf("reservation %d: %v", i, err)
				}
				rs = append(rs, r)
			}
			if rs[0].Delay() != 0 || rs[1].Delay() != 0 || rs[2].Delay() < T-time.Second || rs[2].Delay() > T {
				t.Fatalf("delays %v %v %v, want 0, 0 and about %v", rs[0].Delay(), rs[1].Delay(), rs[2].Delay(), T)
			}
			peek := func() algo.Result {
				r, err := other.DecideN(ctx, "k", time.Time{}, 0)
				if err != nil {
					t.Fatal(err)
				}
				return r
			}
			if r := peek(); r.ResetAfter < 3*T-time.Second || r.ResetAfter > 3*T {
				t.Fatalf("after 3 reservations the other instance sees the limit full for %v, want about %v", r.ResetAfter, 3*T)
			}
			if ok, err := other.Allow(ctx, "k"); ok || err != nil {
				t.Fatalf("Allow over the reservations: %v, %v", ok, err)
			}
			if err := rs[2].Cancel(ctx); err != nil {
				t.Fatal(err)
			}
			if r := peek(); r.ResetAfter < 2*T-time.Second || r.ResetAfter > 2*T {
				t.Fatalf("after Cancel: full for %v, want about %v", r.ResetAfter, 2*T)
			}
			// An admitted reservation's Cancel is late (its time has come):
			// nothing is given back.
			if err := rs[0].Cancel(ctx); err != nil {
				t.Fatal(err)
			}
			if r := peek(); r.ResetAfter < 2*T-time.Second {
				t.Fatalf("a late Cancel gave back: full for %v", r.ResetAfter)
			}
		})
	}
}

func TestReserveRefusals(t *testing.T) {
	stores, _ := limiterStores(t)
	for name, st := range stores {
		t.Run(name, func(t *testing.T) {
			lim, err := sluice.NewLimiter(st, algo.GCRA{Burst: 0, Count: 1, Period: time.Hour})
			if err != nil {
				t.Fatal(err)
			}
			if r, err := lim.ReserveN(context.Background(), "k", time.Time{}, 2); !errors.Is(err, sluice.ErrNever) || r.OK() || r.Delay() != 0 {
				t.Errorf("cost over the burst: %+v, %v", r, err)
			}
			if _, err := lim.Reserve(context.Background(), "k"); err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			r, err := lim.Reserve(ctx, "k")
			if !errors.Is(err, sluice.ErrWouldExceedDeadline) || r.OK() {
				t.Errorf("reservation an hour away with a minute's deadline: %+v, %v", r, err)
			}
			if err := r.Cancel(context.Background()); err != nil {
				t.Errorf("Cancel of a reservation that is not OK: %v", err)
			}
			if r, _ := lim.DecideN(context.Background(), "k", time.Time{}, 0); r.ResetAfter > time.Hour {
				t.Errorf("a refused reservation took capacity: %+v", r)
			}
			fw, err := sluice.NewLimiter(st, algo.FixedWindow{Count: 5, Window: time.Second})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := fw.Reserve(context.Background(), "fw"); !errors.Is(err, algo.ErrUnsupported) {
				t.Errorf("fixed window reservation: %v, want algo.ErrUnsupported", err)
			}
		})
	}
}

// TestNoAllocs: on the memory store, a decision with the limit's value
// compiled at the call, and a Limiter's Allow, allocate nothing.
func TestNoAllocs(t *testing.T) {
	st := memory.New()
	defer st.Close()
	ctx := context.Background()
	burst, count := int64(1<<20), int64(1_000_000)
	lim, err := sluice.NewLimiter(st, algo.TokenBucket{Burst: burst, Count: count, Period: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	for name, f := range map[string]func(){
		"Decide with a GCRA value compiled at the call": func() {
			p, _ := algo.Compile(algo.GCRA{Burst: burst, Count: count, Period: time.Second})
			st.Decide(ctx, store.Request{Key: "a", Plan: &p, Cost: 1})
		},
		"Decide with a fixed window value compiled at the call": func() {
			p, _ := algo.Compile(algo.FixedWindow{Count: burst, Window: time.Hour})
			st.Decide(ctx, store.Request{Key: "b", Plan: &p, Cost: 1})
		},
		"Limiter.Allow": func() { lim.Allow(ctx, "c") },
	} {
		f() // the key exists from now on
		if n := testing.AllocsPerRun(1000, f); n != 0 {
			t.Errorf("%s: %v allocations per decision", name, n)
		}
	}
}

// TestCancelGivesBackOnce: a reservation gives its actions back at most
// once, however many goroutines cancel it, on both stores (each extra
// Cancel once gave back one more, up to the whole burst).
func TestCancelGivesBackOnce(t *testing.T) {
	stores, _ := limiterStores(t)
	for name, st := range stores {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			// 2 at once, then 1 an hour: the reservation's time cannot come
			// while the test runs, however slow the machine.
			lim, err := sluice.NewLimiter(st, algo.GCRA{Burst: 1, Count: 1, Period: time.Hour})
			if err != nil {
				t.Fatal(err)
			}
			for range 2 {
				if ok, err := lim.Allow(ctx, "k"); !ok || err != nil {
					t.Fatalf("Allow: %v, %v", ok, err)
				}
			}
			r, err := lim.Reserve(ctx, "k")
			if err != nil || r.Delay() < 59*time.Minute {
				t.Fatalf("Reserve: %v, delay %v", err, r.Delay())
			}
			var wg sync.WaitGroup
			for range 100 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					if err := r.Cancel(ctx); err != nil {
						t.Error(err)
					}
				}()
			}
			wg.Wait()
			copied := *r
			if err := copied.Cancel(ctx); err != nil {
				t.Fatal(err)
			}
			admitted := 0
			for range 10 {
				if ok, err := lim.Allow(ctx, "k"); err != nil {
					t.Fatal(err)
				} else if ok {
					admitted++
				}
			}
			if admitted != 0 {
				t.Fatalf("after 101 Cancels of one reservation, %d of 10 admitted; want 0", admitted)
			}
		})
	}
}

// TestReserveWithADoneContext: a context already cancelled takes nothing,
// on both stores (the memory store once consumed), for Reserve and Wait.
func TestReserveWithADoneContext(t *testing.T) {
	stores, _ := limiterStores(t)
	for name, st := range stores {
		t.Run(name, func(t *testing.T) {
			lim, err := sluice.NewLimiter(st, algo.GCRA{Burst: 0, Count: 1, Period: time.Hour})
			if err != nil {
				t.Fatal(err)
			}
			done, cancel := context.WithCancel(context.Background())
			cancel()
			if r, err := lim.Reserve(done, "k"); !errors.Is(err, context.Canceled) {
				t.Errorf("Reserve with a done context: %v, %v", r, err)
			}
			if err := lim.Wait(done, "k"); !errors.Is(err, context.Canceled) {
				t.Errorf("Wait with a done context: %v", err)
			}
			if ok, err := lim.Allow(context.Background(), "k"); !ok || err != nil {
				t.Errorf("the limit was consumed by a done context: Allow %v, %v", ok, err)
			}
		})
	}
}

// TestReserveUnsupportedSaysWhatToDo: Reserve on a limit that cannot
// reserve says what to use instead (it once said "fixed_window has no
// theoretical arrival time").
func TestReserveUnsupportedSaysWhatToDo(t *testing.T) {
	st := memory.New()
	defer st.Close()
	lim, err := sluice.NewLimiter(st, algo.FixedWindow{Count: 5, Window: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	_, err = lim.Reserve(context.Background(), "k")
	if !errors.Is(err, algo.ErrUnsupported) || !strings.Contains(err.Error(), "use Allow, or Wait") {
		t.Fatalf("Reserve on a fixed window: %v", err)
	}
}

// TestExplicitTimeTwins: ReserveN, DelayFrom and CancelAt at explicit
// times, as x/time/rate's ReserveN(t, n) and CancelAt(t), on both stores;
// a context's deadline bounds the time to act on the same timeline.
func TestExplicitTimeTwins(t *testing.T) {
	stores, _ := limiterStores(t)
	for name, st := range stores {
		t.Run(name, func(t *testing.T) {
			lim, err := sluice.NewLimiter(st, algo.GCRA{Burst: 2, Count: 1, Period: time.Second})
			if err != nil {
				t.Fatal(err)
			}
			ctx := context.Background()
			t0 := time.Now().Add(time.Hour).Truncate(time.Second) // no clock of the test's reads it
			r, err := lim.ReserveN(ctx, "k", t0, 3)               // the whole burst, at once
			if err != nil || !r.OK() || r.Delay() != 0 || !r.TimeToAct().Equal(t0) {
				t.Fatalf("ReserveN(t0, 3) = %+v, %v", r, err)
			}
			r, err = lim.ReserveN(ctx, "k", t0, 1)
			if err != nil || !r.OK() || r.Delay() != time.Second || !r.TimeToAct().Equal(t0.Add(time.Second)) {
				t.Fatalf("ReserveN(t0, 1) = %+v, %v", r, err)
			}
			if d := r.DelayFrom(t0.Add(400 * time.Millisecond)); d != 600*time.Millisecond {
				t.Errorf("DelayFrom(t0+400ms) = %v", d)
			}
			if d := r.DelayFrom(t0.Add(2 * time.Second)); d != 0 {
				t.Errorf("DelayFrom after the time to act = %v", d)
			}
			if err := r.CancelAt(ctx, t0.Add(500*time.Millisecond)); err != nil {
				t.Fatal(err)
			}
			// Given back: the next action may act at t0+1s again, 500ms on.
			r, err = lim.ReserveN(ctx, "k", t0.Add(500*time.Millisecond), 1)
			if err != nil || r.Delay() != 500*time.Millisecond {
				t.Fatalf("after CancelAt: %+v, %v", r, err)
			}
			// A deadline 300ms after t0+600ms: the next slot (t0+2s) is beyond it.
			dctx, cancel := context.WithDeadline(ctx, t0.Add(900*time.Millisecond))
			defer cancel()
			if r, err := lim.ReserveN(dctx, "k", t0.Add(600*time.Millisecond), 1); !errors.Is(err, sluice.ErrWouldExceedDeadline) || r.OK() {
				t.Fatalf("past the deadline: %+v, %v", r, err)
			}
			// By t0+2s the limit admits 3 + 2: the 4 reserved, and one more.
			if ok, err := lim.AllowN(ctx, "k", t0.Add(2*time.Second), 1); err != nil || !ok {
				t.Errorf("AllowN at t0+2s: %v, %v", ok, err)
			}
			if ok, err := lim.AllowN(ctx, "k", t0.Add(2*time.Second), 1); err != nil || ok {
				t.Errorf("a sixth action by t0+2s: %v, %v", ok, err)
			}
		})
	}
}
