package sluice_test

import (
	"context"
	"errors"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/algo"
	"github.com/sluicehq/sluice/conformance"
	"github.com/sluicehq/sluice/internal/permitid"
	"github.com/sluicehq/sluice/store"
	"github.com/sluicehq/sluice/store/memory"
)

// TestAcquireMaxInFlight: 200 goroutines race for 10 slots, each three
// times, holding a slot while it counts itself in flight: the most ever
// in flight at once is exactly 10, on both stores. The first holders wait
// until 10 hold at once, so that the limit is reached whatever the
// scheduling; no more ever get in.
func TestAcquireMaxInFlight(t *testing.T) {
	stores, _ := limiterStores(t)
	for name, st := range stores {
		t.Run(name, func(t *testing.T) {
			const limit = 10
			lim, err := sluice.NewLimiter(st, algo.Concurrency{Count: limit, HoldFor: time.Minute})
			if err != nil {
				t.Fatal(err)
			}
			var inFlight, most, acquired atomic.Int64
			full := make(chan struct{})
			var fullOnce sync.Once
			var wg sync.WaitGroup
			for range 200 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for range 3 {
						p, err := lim.Acquire(context.Background(), "in-flight")
						if err != nil {
							t.Error(err)
							return
						}
						n := inFlight.Add(1)
						acquired.Add(1)
						for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
						}
						if n == limit {
							fullOnce.Do(func() { close(full) })
						}
						<-full
						inFlight.Add(-1)
						if err := p.Release(context.Background()); err != nil {
							t.Error(err)
						}
					}
				}()
			}
			wg.Wait()
			if most.Load() != limit || acquired.Load() != 600 {
				t.Fatalf("most in flight %d (want %d), %d acquired (want 600)", most.Load(), limit, acquired.Load())
			}
			t.Logf("most in flight: %d of %d slots, 200 goroutines", most.Load(), limit)
		})
	}
}

// TestSpentPermitsFreeNothing: 50 goroutines race for 10 slots until
// each has held one 50 times, trying again at once when denied, so that
// the slots are mostly all held; while it holds a slot, each renews and
// releases a permit another released before (a spent copy, whose state
// a later acquire may reuse): the most in flight at once is 10, never
// more, on both stores. The first holders wait until 10 hold at once.
func TestSpentPermitsFreeNothing(t *testing.T) {
	stores, _ := limiterStores(t)
	for name, st := range stores {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			const limit = 10
			lim, err := sluice.NewLimiter(st, algo.Concurrency{Count: limit, HoldFor: time.Hour})
			if err != nil {
				t.Fatal(err)
			}
			var inFlight, most, acquired atomic.Int64
			full := make(chan struct{}) // the first holders wait until 10 hold at once
			var fullOnce sync.Once
			var mu sync.Mutex
			spent := make([]sluice.Permit, 64)
			var wg sync.WaitGroup
			for g := range 50 {
				wg.Go(func() {
					defer fullOnce.Do(func() { close(full) }) // the others go on if this one fails
					for i, denied := 0, 0; i < 50; {
						p, err := lim.AcquireAt(ctx, "k", time.Time{}, 1)
						if err != nil {
							t.Error(err)
							return
						}
						if !p.OK() {
							if denied++; denied == 100_000 {
								t.Error("denied 100,000 times in a row: slots leaked")
								return
							}
							runtime.Gosched()
							continue
						}
						i, denied = i+1, 0
						acquired.Add(1)
						n := inFlight.Add(1)
						for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
						}
						mu.Lock()
						old := spent[(g+i)%len(spent)]
						mu.Unlock()
						if held, err := old.RenewAt(ctx, time.Time{}); held || err != nil {
							t.Errorf("a spent permit renewed: %v, %v", held, err)
						}
						if err := old.Release(ctx); err != nil {
							t.Error(err)
						}
						if n == limit {
							fullOnce.Do(func() { close(full) })
						}
						<-full
						runtime.Gosched()
						inFlight.Add(-1)
						if err := p.Release(ctx); err != nil {
							t.Error(err)
						}
						mu.Lock()
						spent[(g*7+i)%len(spent)] = p
						mu.Unlock()
					}
				})
			}
			wg.Wait()
			if most.Load() != limit || acquired.Load() != 50*50 {
				t.Fatalf("most in flight %d (want %d), %d acquired (want 2500)", most.Load(), limit, acquired.Load())
			}
		})
	}
}

// TestPermitIDs: 100 goroutines take and give back 1000 permits each (the
// ids come from the pooled plans' sources, each refilled many times over):
// every id is 1 to algo.MaxPermitID, and no two are the same (53 random
// bits: a repeat among 100,000 has odds of about one in two million).
func TestPermitIDs(t *testing.T) {
	st := memory.New()
	defer st.Close()
	lim, err := sluice.NewLimiter(st, algo.Concurrency{Count: 1000, HoldFor: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	ids := make(chan []int64, 100)
	for g := range 100 {
		go func() {
			mine := make([]int64, 1000)
			for i := range mine {
				p, err := lim.AcquireAt(context.Background(), strconv.Itoa(g), time.Time{}, 1)
				if err == nil && p.OK() {
					err = p.ReleaseAt(context.Background(), time.Time{})
				}
				if err != nil || !p.OK() {
					t.Error("acquire and release:", err)
					ids <- nil
					return
				}
				mine[i] = p.ID()
			}
			ids <- mine
		}()
	}
	seen := make(map[int64]bool, 100_000)
	for range 100 {
		for _, id := range <-ids {
			if id < 1 || id > algo.MaxPermitID || seen[id] {
				t.Fatalf("id %d: out of range or drawn twice", id)
			}
			seen[id] = true
		}
	}
}

// TestPermitExplicitTime: the explicit-time twins, on both stores: an
// acquire denied says when the earliest lease ends; a release is safe
// twice and frees once; a released permit is never renewed; a permit's
// id is its own (another id releases nothing).
func TestPermitExplicitTime(t *testing.T) {
	stores, _ := limiterStores(t)
	ctx := context.Background()
	for name, st := range stores {
		t.Run(name, func(t *testing.T) {
			c := algo.Concurrency{Count: 2, HoldFor: 10 * time.Second}
			lim, err := sluice.NewLimiter(st, c)
			if err != nil {
				t.Fatal(err)
			}
			t0 := conformance.T0
			a, err := lim.AcquireAt(ctx, "k", t0, 1)
			if err != nil || !a.OK() || a.ID() == 0 || a.Result().Remaining != 1 {
				t.Fatalf("acquire a: %+v, %v", a, err)
			}
			if a.Lost() != nil { // it does not renew: never lost
				t.Fatal("a permit that does not renew has a Lost channel")
			}
			b, err := lim.AcquireAt(ctx, "k", t0.Add(time.Second), 1)
			if err != nil || !b.OK() || b.ID() == a.ID() {
				t.Fatalf("acquire b: %+v, %v", b, err)
			}
			x, err := lim.AcquireAt(ctx, "k", t0.Add(2*time.Second), 1)
			if err != nil || x.OK() || x.Result().RetryAfter != 8*time.Second {
				t.Fatalf("acquire on a full key: %+v, %v", x.Result(), err)
			}
			if _, err := lim.AcquireAt(ctx, "k", t0, 3); err != nil {
				t.Fatal(err)
			}
			if held, err := a.RenewAt(ctx, t0.Add(3*time.Second)); err != nil || !held {
				t.Fatalf("renew a: %v, %v", held, err)
			}
			// A forged id releases nothing: the key stays full.
			var r [1]algo.Result
			if _, err := store.DecideSlots(ctx, st, algo.Release, []store.Request{{Key: "k", Plan: algo.MustCompile(c), Time: t0.Add(3 * time.Second)}}, permitid.New(), r[:]); err != nil || r[0].Admitted != 0 || r[0].Remaining != 0 {
				t.Fatalf("forged release: %+v, %v", r[0], err)
			}
			for range 2 {
				if err := a.ReleaseAt(ctx, t0.Add(4*time.Second)); err != nil {
					t.Fatal(err)
				}
			}
			if held, err := a.RenewAt(ctx, t0.Add(4*time.Second)); err != nil || held {
				t.Fatalf("renew after release: %v, %v", held, err)
			}
			y, err := lim.AcquireAt(ctx, "k", t0.Add(4*time.Second), 1)
			if err != nil || !y.OK() || y.Result().Remaining != 0 {
				t.Fatalf("acquire after one release: %+v, %v", y.Result(), err)
			}
			// b's lease ended at 11s: its slot is free, and b is lost.
			if held, err := b.RenewAt(ctx, t0.Add(11*time.Second)); err != nil || held {
				t.Fatalf("renew after the lease: %v, %v", held, err)
			}
			if z, err := lim.AcquireAt(ctx, "k", t0.Add(11*time.Second), 1); err != nil || !z.OK() {
				t.Fatalf("acquire after b's lease: %+v, %v", z.Result(), err)
			}
		})
	}
}

func TestAcquireRefusals(t *testing.T) {
	st := memory.New()
	defer st.Close()
	ctx := context.Background()
	lim, _ := sluice.NewLimiter(st, algo.Concurrency{Count: 2, HoldFor: time.Second})
	if _, err := lim.AcquireN(ctx, "k", 3); !errors.Is(err, sluice.ErrNever) {
		t.Errorf("3 of 2 slots: %v", err)
	}
	// No slots, or fewer: nothing to hold (a permit of none was lost at
	// its first renewal).
	for _, n := range []int64{0, -1} {
		if p, err := lim.AcquireN(ctx, "k", n); !errors.Is(err, store.ErrBadRequest) || p.OK() {
			t.Errorf("AcquireN %d: %v %v", n, p.OK(), err)
		}
		if p, err := lim.AcquireAt(ctx, "k", time.Time{}, n); !errors.Is(err, store.ErrBadRequest) || p.OK() {
			t.Errorf("AcquireAt %d: %v %v", n, p.OK(), err)
		}
	}
	g, _ := sluice.NewLimiter(st, algo.GCRA{Burst: 1, Count: 1, Period: time.Second})
	if _, err := g.Acquire(ctx, "k"); !errors.Is(err, algo.ErrUnsupported) {
		t.Errorf("Acquire on a GCRA: %v", err)
	}
	// A waiting acquire gives up when its context is done.
	p, err := lim.AcquireN(ctx, "full", 2)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Release(ctx)
	wctx, cancel := context.WithCancel(ctx)
	done := make(chan error)
	go func() {
		_, err := lim.Acquire(wctx, "full")
		done <- err
	}()
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Errorf("a cancelled wait: %v", err)
	}
}

// TestAcquireWaitsForARelease: a waiting acquire gets the slot a holder
// releases.
func TestAcquireWaitsForARelease(t *testing.T) {
	stores, _ := limiterStores(t)
	for name, st := range stores {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			lim, _ := sluice.NewLimiter(st, algo.Concurrency{Count: 1, HoldFor: time.Hour})
			first, err := lim.Acquire(ctx, "one")
			if err != nil {
				t.Fatal(err)
			}
			got := make(chan sluice.Permit)
			go func() {
				p, err := lim.Acquire(ctx, "one")
				if err != nil {
					t.Error(err)
				}
				got <- p
			}()
			if err := first.Release(ctx); err != nil {
				t.Fatal(err)
			}
			second := <-got
			if !second.OK() {
				t.Fatal("no permit")
			}
			second.Release(ctx)
		})
	}
}

// steppedClock is a store whose decisions without a time are taken at a
// clock the test moves by hand: a lease ends only when the test says so.
type steppedClock struct {
	store.Store
	mu     sync.Mutex
	now    time.Time
	renews chan time.Time // the time of each renewal, if not nil
}

func (s *steppedClock) at() time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.now
}

func (s *steppedClock) Decide(ctx context.Context, req store.Request) (algo.Result, error) {
	var r [1]algo.Result
	_, err := s.DecideAll(ctx, []store.Request{req}, r[:])
	return r[0], err
}

func (s *steppedClock) DecideAll(ctx context.Context, reqs []store.Request, res []algo.Result) (bool, error) {
	renew := false
	for i := range reqs {
		if reqs[i].Time.IsZero() {
			reqs[i].Time = s.at()
		}
		_, op := reqs[i].Plan.Permit()
		renew = renew || op == algo.Renew
	}
	pass, err := s.Store.DecideAll(ctx, reqs, res)
	if renew && err == nil && s.renews != nil {
		s.renews <- reqs[0].Time
	}
	return pass, err
}

// TestPermitRenewsItself: a permit from Acquire renews its lease while
// held. The store's clock moves only after a renewal at the current time,
// by less than a lease each time, until it is five leases on: the slot is
// still held (a second acquire is denied) and the permit not lost. Then
// its slots are released behind its back, and the next renewal finds it
// lost.
func TestPermitRenewsItself(t *testing.T) {
	st := &steppedClock{Store: memory.New(), now: conformance.T0, renews: make(chan time.Time)}
	defer st.Close()
	ctx := context.Background()
	c := algo.Concurrency{Count: 1, HoldFor: 30 * time.Millisecond}
	lim, _ := sluice.NewLimiter(st, c)
	p, err := lim.Acquire(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	for i := range 8 {
		for at := <-st.renews; !at.Equal(st.at()); at = <-st.renews {
		}
		st.mu.Lock()
		st.now = st.now.Add(20 * time.Millisecond) // within the lease renewed
		st.mu.Unlock()
		if i == 7 {
			break
		}
	}
	if other, err := lim.AcquireAt(ctx, "k", time.Time{}, 1); err != nil || other.OK() {
		t.Fatalf("160ms on (5 leases), another acquire: %+v, %v", other.Result(), err)
	}
	select {
	case <-p.Lost():
		t.Fatal("a renewed permit is lost")
	default:
	}
	if _, err := store.DecideSlots(ctx, st.Store, algo.Release, []store.Request{{Key: "k", Plan: algo.MustCompile(c), Time: st.at()}}, p.ID(), make([]algo.Result, 1)); err != nil {
		t.Fatal(err)
	}
	go func() {
		for range st.renews { // the renewals that find it gone
		}
	}()
	<-p.Lost()
	if err := p.Release(ctx); err != nil {
		t.Fatal(err)
	}
	close(st.renews)
}

// TestSlotsWithABlock: a concurrency limit may block too: a holder
// acquires and renews as usual, a denied acquire starts a block, and the
// holders are listed, on both stores.
func TestSlotsWithABlock(t *testing.T) {
	stores, _ := limiterStores(t)
	ctx := context.Background()
	for name, st := range stores {
		t.Run(name, func(t *testing.T) {
			lim, err := sluice.NewLimiter(st, algo.Blocking{Limit: algo.Concurrency{Count: 1, HoldFor: time.Minute}, Block: algo.Block{For: time.Hour}})
			if err != nil {
				t.Fatal(err)
			}
			p, err := lim.Acquire(ctx, "k")
			if err != nil {
				t.Fatal(err)
			}
			if x, err := lim.AcquireAt(ctx, "k", time.Time{}, 1); err != nil || x.OK() || x.Result().DeniedBy != algo.DeniedByBlock {
				t.Fatalf("a second acquire: %+v, %v", x.Result(), err)
			}
			hs, err := st.(store.HolderLister).Holders(ctx, store.Request{Key: "k", Plan: algo.MustCompile(lim.Limit())})
			if err != nil || len(hs) != 1 || hs[0].Permit != p.ID() {
				t.Fatalf("holders: %+v, %v", hs, err)
			}
			if err := p.Release(ctx); err != nil {
				t.Fatal(err)
			}
			if x, _ := lim.AcquireAt(ctx, "k", time.Time{}, 1); x.OK() {
				t.Fatal("admitted during the block")
			}
			if err := lim.Unblock(ctx, "k"); err != nil {
				t.Fatal(err)
			}
			if x, err := lim.AcquireAt(ctx, "k", time.Time{}, 1); err != nil || !x.OK() {
				t.Fatalf("after the unblock: %+v, %v", x.Result(), err)
			}
		})
	}
}

// TestHeldSlotsCostNoGoroutine: 10,000 permits held at once (10 on each
// of 1000 keys), renewed while they are held (every 0.5 to 1 s), run
// on a few goroutines, not one per permit (they once had a goroutine and
// a ticker each); released, the renewers' goroutines end at their next tick.
// The store's clock stands still but for one step the test makes, within
// the hold, after the acquires: no hold can run out however slowly the
// machine acquires (a 3 s hold once did, on a busy one), and a renewal
// after the step is seen, as its hold ends later than the acquire's.
func TestHeldSlotsCostNoGoroutine(t *testing.T) {
	st := &steppedClock{Store: memory.New(), now: conformance.T0}
	defer st.Close()
	ctx := context.Background()
	lim, err := sluice.NewLimiter(st, algo.Concurrency{Count: 10, HoldFor: 3 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	before := runtime.NumGoroutine()
	permits := make([]sluice.Permit, 0, 10_000)
	// Released, and their renewers ended, even when the test fails: the
	// next test counts allocations, which these renewals would make.
	t.Cleanup(func() {
		for _, p := range permits {
			if err := p.Release(ctx); err != nil {
				t.Error(err)
			}
		}
		for runtime.NumGoroutine() > before { // the renewers end after the last permit
			runtime.Gosched()
			time.Sleep(time.Millisecond)
		}
	})
	for i := range cap(permits) {
		p, err := lim.Acquire(ctx, "k"+strconv.Itoa(i%1000))
		if err != nil {
			t.Fatal(err)
		}
		permits = append(permits, p)
	}
	k0 := store.Request{Key: "k0", Plan: algo.MustCompile(lim.Limit())}
	holders := func() []algo.Holder {
		t.Helper()
		k0.Time = st.at()
		hs, err := st.Store.(store.HolderLister).Holders(ctx, k0)
		if err != nil || len(hs) != 10 {
			t.Fatalf("holders of k0 at %v: %+v, %v; want all 10", st.at().Sub(conformance.T0), hs, err)
		}
		return hs
	}
	acquired := conformance.T0.Add(lim.Limit().(algo.Concurrency).HoldFor).UnixMicro()
	for _, h := range holders() {
		if h.End != acquired {
			t.Fatalf("a holder of k0 ends at %d, want %d (the clock stands still)", h.End, acquired)
		}
	}
	st.mu.Lock()
	st.now = st.now.Add(time.Second) // within every hold
	st.mu.Unlock()
	// Until every holder of k0 has been renewed after the step (within a
	// second or so; the minute is a hang detector), count the goroutines
	// as the renewals run.
	stepped := time.Now()
	for renewed := 0; renewed < 10; {
		if time.Since(stepped) > time.Minute {
			t.Fatalf("%d of k0's 10 holders renewed a minute after the step", renewed)
		}
		if n := runtime.NumGoroutine() - before; n > maxRenewingGoroutines {
			t.Fatalf("10,000 held permits run %d goroutines, want at most %d", n, maxRenewingGoroutines)
		}
		time.Sleep(time.Millisecond)
		renewed = 0
		for _, h := range holders() {
			if h.End > acquired {
				renewed++
			}
		}
	}
}

// maxRenewingGoroutines is a Limiter's 8 renewers and the 8 renewals each
// may run at once, twice over: a renewal's goroutine frees its place a
// moment before it ends, and its context's timer may start one to cancel
// it.
const maxRenewingGoroutines = 8 * (1 + 2*8)

// TestPermitPairAllocatesNothing: on the memory store, an acquire and its
// release allocate nothing: each op's plan comes from the Limiter's pool,
// a release gives the permit's state to the next acquire on that plan,
// and Lost's channel is made only when asked for. (Under the race
// detector a sync.Pool drops a quarter of what it is given, and a plan
// dropped is made again with a new state: about 0.75 allocations a pair,
// which AllocsPerRun, counting whole ones, reports as 0; a pair that
// allocated its state would count 1 or more.)
func TestPermitPairAllocatesNothing(t *testing.T) {
	st := memory.New()
	defer st.Close()
	ctx := context.Background()
	lim, err := sluice.NewLimiter(st, algo.Concurrency{Count: 10, HoldFor: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	for name, pair := range map[string]func(){
		"acquire+release": func() {
			p, err := lim.Acquire(ctx, "k")
			if err != nil || p.Release(ctx) != nil {
				t.Fatal(err)
			}
		},
		"at+release": func() {
			p, err := lim.AcquireAt(ctx, "k", time.Time{}, 1)
			if err != nil || !p.OK() || p.ReleaseAt(ctx, time.Time{}) != nil {
				t.Fatal(err)
			}
		},
	} {
		// The renewer's goroutine, should it end and start again during
		// the runs, is a few allocations over 1000 pairs: not one a pair.
		if n := testing.AllocsPerRun(1000, pair); n != 0 {
			t.Errorf("%s: %v allocations a pair, want 0", name, n)
		}
	}
}

// TestRenewalsBesideRenewAtAndRelease: holders renew their permits
// themselves and release them while the renewer renews them too, with a
// hold short enough that it does so throughout: every op ends (the
// renewer skips a permit whose op is in flight rather than wait for it),
// and afterwards no slot is held.
func TestRenewalsBesideRenewAtAndRelease(t *testing.T) {
	st := memory.New()
	defer st.Close()
	ctx := context.Background()
	c := algo.Concurrency{Count: 100, HoldFor: 6 * time.Millisecond}
	lim, err := sluice.NewLimiter(st, c)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for range 100 {
		wg.Go(func() {
			for range 5 {
				p, err := lim.Acquire(ctx, "k")
				if err != nil {
					t.Error(err)
					return
				}
				for range 20 {
					if _, err := p.RenewAt(ctx, time.Time{}); err != nil {
						t.Error(err)
					}
				}
				if err := p.Release(ctx); err != nil {
					t.Error(err)
				}
			}
		})
	}
	wg.Wait()
	if hs, err := st.Holders(ctx, store.Request{Key: "k", Plan: algo.MustCompile(c)}); err != nil || len(hs) != 0 {
		t.Fatalf("after every release: %+v, %v", hs, err)
	}
}

// TestPermitLostWhenTheStoreFails: a permit whose store fails every
// renewal (as one cut off would) is lost once a whole hold has passed
// without one, while its slot may have run out: Lost closes, after at
// least one failed renewal; Release then fails as the store does, and
// is safe to call again once the store is back, and Lost stays closed.
func TestPermitLostWhenTheStoreFails(t *testing.T) {
	st := &failingStore{Store: memory.New()}
	defer st.Close()
	ctx := context.Background()
	lim, err := sluice.NewLimiter(st, algo.Concurrency{Count: 1, HoldFor: 30 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	p, err := lim.Acquire(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	st.failing.Store(true)
	<-p.Lost()
	if st.failed.Load() == 0 {
		t.Fatal("lost without a failed renewal")
	}
	if err := p.Release(ctx); err == nil {
		t.Fatal("a release on a failing store succeeded")
	}
	st.failing.Store(false)
	if err := p.Release(ctx); err != nil {
		t.Fatal(err)
	}
	// A lost permit's state is not handed to a later acquire: its Lost
	// stays closed after the release, and after others acquire.
	for range 10 {
		q, err := lim.Acquire(ctx, "k")
		if err != nil || q.Release(ctx) != nil {
			t.Fatal(err)
		}
	}
	select {
	case <-p.Lost():
	default:
		t.Fatal("a lost permit's Lost is open after its release")
	}
}

// failingStore fails every decision while failing is set, counting them.
type failingStore struct {
	store.Store
	failing atomic.Bool
	failed  atomic.Int64
}

func (s *failingStore) Decide(ctx context.Context, req store.Request) (algo.Result, error) {
	if s.failing.Load() {
		s.failed.Add(1)
		return algo.Result{}, errors.New("the store is out of reach")
	}
	return s.Store.Decide(ctx, req)
}
