package redis_test

import (
	"context"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/algo"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/store"
	"github.com/sluicehq/sluice/store/redis"
)

// windowCount reads a fixed window's count from Redis.
func windowCount(t *testing.T, srv *redistest.Server, req store.Request) int64 {
	t.Helper()
	v, err := srv.Do("HGET", redis.StateKey(redis.DefaultPrefix, req), "n")
	if err != nil {
		t.Fatal(err)
	}
	n, _ := strconv.ParseInt(v, 10, 64)
	return n
}

// TestLeasesRacing: several stores (service instances) with leases race
// for one fixed window on one Redis, far more attempts than its limit.
// They never admit more than the limit, they refuse at most instances x
// MaxLease units that an exact limiter would have admitted, and once they
// close (giving back what their leases hold) the window's count in Redis
// is exactly what they admitted.
func TestLeasesRacing(t *testing.T) {
	srv := redistest.Start(t)
	const instances, perInstance, limit, maxLease = 4, 25, 20000, 200
	req := store.Request{Key: "hot", Plan: algo.MustCompile(algo.FixedWindow{Count: limit, Window: noBoundary}), Cost: 1, Lease: true}
	stores := make([]*redis.Store, instances)
	for i := range stores {
		// A minute's timeout: 100 goroutines on one Redis once met the
		// default second on a busy machine.
		st, err := redis.Open(context.Background(), srv.URL(), redis.Options{LeaseFor: 20 * time.Millisecond, MaxLease: maxLease, Timeout: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		stores[i] = st
	}
	var admitted atomic.Int64
	before := scriptCalls(t, srv)
	var wg sync.WaitGroup
	for _, st := range stores {
		for range perInstance {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range 300 {
					res, err := st.Decide(context.Background(), req)
					if err != nil {
						t.Error(err)
						return
					}
					if res.Allowed {
						admitted.Add(1)
					}
				}
			}()
		}
	}
	wg.Wait()
	got := admitted.Load()
	// Each denial costs a call (decided exactly), as does each exact
	// admission and each lease; admissions from leases cost none.
	calls := int64(scriptCalls(t, srv)-before) - (instances*perInstance*300 - got)
	t.Logf("admitted %d of %d attempts; %d script calls for the admissions", got, instances*perInstance*300, calls)
	if got > limit {
		t.Fatalf("admitted %d, over the limit %d", got, limit)
	}
	if got < limit-instances*maxLease {
		t.Fatalf("admitted %d: more than %d x %d below the limit %d", got, instances, maxLease, limit)
	}
	if calls > got/2 {
		t.Fatalf("%d script calls for %d admissions: leases barely used", calls, got)
	}
	for _, st := range stores {
		st.Close()
	}
	if n := windowCount(t, srv, req); n != got {
		t.Fatalf("after closing, the window counts %d, but %d were admitted", n, got)
	}
}

// TestLeaseNearTheLimitIsExact: a lease is granted only while the window
// has room for it for every holder; near the limit decisions are exact,
// so one store admits exactly the limit.
func TestLeaseNearTheLimitIsExact(t *testing.T) {
	srv := redistest.Start(t)
	st := open(t, srv, redis.Options{LeaseFor: time.Second, MaxLease: 1000})
	req := store.Request{Key: "k", Plan: algo.MustCompile(algo.FixedWindow{Count: 100, Window: noBoundary}), Cost: 1, Lease: true}
	n := 0
	for range 500 {
		res, err := st.Decide(context.Background(), req)
		if err != nil {
			t.Fatal(err)
		}
		if res.Allowed {
			n++
		}
	}
	if n != 100 {
		t.Fatalf("admitted %d, want exactly 100", n)
	}
	if got := windowCount(t, srv, req); got != 100 {
		t.Fatalf("window count %d", got)
	}
}

// TestLeaseOnlyWhereAsked: requests without Lease, with their own Time,
// shadow ones and other algorithms are decided exactly (one script call
// each); a leased request denied by another level gives its unit back.
func TestLeaseOnlyWhereAsked(t *testing.T) {
	srv := redistest.Start(t)
	st := open(t, srv, redis.Options{LeaseFor: time.Second})
	fw := algo.FixedWindow{Count: 1_000_000, Window: noBoundary}
	ctx := context.Background()
	for _, req := range []store.Request{
		{Key: "a", Plan: algo.MustCompile(fw), Cost: 1},
		{Key: "b", Plan: algo.MustCompile(fw), Cost: 1, Lease: true, Time: time.Now()},
		{Key: "c", Plan: algo.MustCompile(algo.GCRA{Burst: 1000, Count: 1000, Period: time.Second}), Cost: 1, Lease: true},
	} {
		if _, err := st.Decide(ctx, req); err != nil { // loads the script
			t.Fatal(err)
		}
		before := scriptCalls(t, srv)
		for range 50 {
			if _, err := st.Decide(ctx, req); err != nil {
				t.Fatal(err)
			}
		}
		if calls := scriptCalls(t, srv) - before; calls != 50 {
			t.Errorf("%s: %d script calls for 50 exact decisions", req.Key, calls)
		}
	}
	// A hot leased key with a denying second level: nothing is recorded.
	// Top-ups run in the background, so the test waits, before and after,
	// until the window counts exactly what was admitted plus what the
	// lease holds; a unit taken from the lease and not given back would
	// keep them one apart.
	leased := store.Request{Key: "d", Plan: algo.MustCompile(fw), Cost: 1, Lease: true}
	admitted := int64(0)
	for range 50 {
		if res, _ := st.Decide(ctx, leased); res.Allowed {
			admitted++
		}
	}
	if st.LeaseStats().Leased == 0 {
		t.Fatal("no lease after 50 decisions")
	}
	settle := func(when string) {
		t.Helper()
		deadline := time.Now().Add(waitLimit)
		for {
			counted, held := windowCount(t, srv, leased), st.LeaseStats().Leased
			if counted == admitted+held {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: the window counts %d, %d admitted and %d held in the lease", when, counted, admitted, held)
			}
			time.Sleep(time.Millisecond)
		}
	}
	settle("before")
	deny := store.Request{Key: "e", Plan: algo.MustCompile(algo.FixedWindow{Count: 1, Window: noBoundary}), Cost: 2}
	res := make([]algo.Result, 2)
	pass, err := st.DecideAll(ctx, []store.Request{leased, deny}, res)
	if err != nil || pass || !res[0].Allowed || res[0].Admitted != 0 || res[1].Allowed {
		t.Fatalf("pass %v %v, results %+v", pass, err, res)
	}
	settle("after a denied batch")
}

// TestLeaseGivenBack: a lease's units unused at its deadline go back to
// the window, so another store can use them. The lease lasts 3s: it is
// still held when the test first looks, however slowly the decisions ran
// (one of 20ms was once given back before the test looked).
func TestLeaseGivenBack(t *testing.T) {
	srv := redistest.Start(t)
	st := open(t, srv, redis.Options{LeaseFor: 3 * time.Second})
	req := store.Request{Key: "k", Plan: algo.MustCompile(algo.FixedWindow{Count: 1_000_000, Window: noBoundary}), Cost: 1, Lease: true}
	admitted := int64(0)
	for range 200 {
		if res, _ := st.Decide(context.Background(), req); res.Allowed {
			admitted++
		}
	}
	if windowCount(t, srv, req) <= admitted {
		t.Fatal("no units leased ahead")
	}
	deadline := time.Now().Add(waitLimit)
	for windowCount(t, srv, req) != admitted {
		if time.Now().After(deadline) {
			t.Fatalf("window count %d, admitted %d: units not given back", windowCount(t, srv, req), admitted)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestFirstLeaseIsSmall: a key seen once is not yet a hot key. Its rate
// is measured over at least a tenth of LeaseFor, so its first lease is 10
// units whatever LeaseFor, not LeaseFor's worth at the rate of one
// decision in a millisecond (2000 units at 2s, MaxLease at 1m).
func TestFirstLeaseIsSmall(t *testing.T) {
	srv := redistest.Start(t)
	for _, leaseFor := range []time.Duration{2 * time.Second, time.Minute} { // live while the test looks
		st := open(t, srv, redis.Options{LeaseFor: leaseFor})
		req := store.Request{Key: "once-" + leaseFor.String(), Plan: algo.MustCompile(algo.FixedWindow{Count: 1_000_000, Window: noBoundary}), Cost: 1, Lease: true}
		if res, err := st.Decide(context.Background(), req); err != nil || !res.Allowed {
			t.Fatalf("%v: %+v, %v", leaseFor, res, err)
		}
		if n := windowCount(t, srv, req); n != 10 {
			t.Errorf("LeaseFor %v: the window counts %d after one decision, want a lease of 10", leaseFor, n)
		}
		if held := st.LeaseStats().Leased; held != 9 {
			t.Errorf("LeaseFor %v: %d units held, want 9", leaseFor, held)
		}
	}
}

// TestAbandonedLeaseGivenBack: a lease call that Redis runs after its
// caller gave up (Redis was busy past the deadline) is given back, so
// that the window does not count units no lease will use.
func TestAbandonedLeaseGivenBack(t *testing.T) {
	srv := redistest.Start(t)
	st := open(t, srv, redis.Options{LeaseFor: time.Minute})
	req := store.Request{Key: "k", Plan: algo.MustCompile(algo.FixedWindow{Count: 1_000_000_000, Window: noBoundary}), Cost: 1, Lease: true}
	warm := req
	warm.Key = "warm"
	if _, err := st.Decide(context.Background(), warm); err != nil { // loads lease.lua
		t.Fatal(err)
	}
	resume := srv.Pause(t) // a call sent now waits in Redis's socket until resume runs it
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	_, err := st.Decide(ctx, req) // its first decision takes a lease, which waits
	cancel()
	if err == nil {
		t.Fatal("decided while Redis was stopped")
	}
	resume()
	ranBehind(t, st, req) // Redis has run the lease nobody waits for
	deadline := time.Now().Add(waitLimit)
	for {
		n := windowCount(t, srv, req)
		if n == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the window counts %d for a lease nobody holds", n)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestAbandonedGrantGivenBack: quota Redis grants after the caller gave up
// is given back, as a lease is; a grant in time is counted in the window.
func TestAbandonedGrantGivenBack(t *testing.T) {
	srv := redistest.Start(t)
	st := open(t, srv, redis.Options{LeaseFor: time.Minute})
	req := store.Request{Key: "k", Plan: algo.MustCompile(algo.FixedWindow{Count: 1_000_000_000, Window: noBoundary}), Cost: 1, Lease: true}
	g, err := st.Grant(context.Background(), []store.Request{req}, 100) // loads lease.lua
	if err != nil || g.Units != 100 || windowCount(t, srv, req) != 100 {
		t.Fatalf("grant %+v, %v; window %d", g, err, windowCount(t, srv, req))
	}
	resume := srv.Pause(t)
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	if g, err := st.Grant(ctx, []store.Request{req}, 100); err == nil {
		t.Fatalf("granted %+v while Redis was stopped", g)
	}
	cancel()
	resume()
	ranBehind(t, st, req) // Redis has run the grant nobody waits for
	deadline := time.Now().Add(waitLimit)
	for windowCount(t, srv, req) != 100 {
		if time.Now().After(deadline) {
			t.Fatalf("the window counts %d; want the 100 granted in time", windowCount(t, srv, req))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// ranBehind peeks at req's key without a lease: a call on the connection
// of the key's calls, so that once it is answered, Redis has run the
// calls sent for the key before it.
func ranBehind(t *testing.T, st *redis.Store, req store.Request) {
	t.Helper()
	req.Lease, req.Cost = false, 0
	if _, err := st.Decide(context.Background(), req); err != nil {
		t.Fatal(err)
	}
}

// TestLeaseAtTheLargestLimit: a leased fixed window of algo.MaxCount counts
// exactly to its last unit (a limit near 2^63 once failed with "hash value
// is not an integer": Lua wrote the count as a float).
func TestLeaseAtTheLargestLimit(t *testing.T) {
	srv := redistest.Start(t)
	st := open(t, srv, redis.Options{LeaseFor: time.Second, MaxLease: 1 << 40})
	ctx := context.Background()
	lim := algo.FixedWindow{Count: algo.MaxCount, Window: noBoundary}
	big := store.Request{Key: "k", Plan: algo.MustCompile(lim), Cost: algo.MaxCount - 10}
	if res, err := st.Decide(ctx, big); err != nil || !res.Allowed {
		t.Fatalf("cost MaxCount-10: %+v, %v", res, err)
	}
	one := store.Request{Key: "k", Plan: algo.MustCompile(lim), Cost: 1, Lease: true}
	n := 0
	for range 50 {
		res, err := st.Decide(ctx, one)
		if err != nil {
			t.Fatal(err)
		}
		if res.Allowed {
			n++
		}
	}
	if n != 10 {
		t.Fatalf("admitted %d of the last 10 units", n)
	}
	if got := windowCount(t, srv, one); got != algo.MaxCount {
		t.Fatalf("window count %d, want %d", got, algo.MaxCount)
	}
	// A fresh key whose leases start far from the limit.
	for i := range 1000 {
		if _, err := st.Decide(ctx, store.Request{Key: "fresh", Plan: algo.MustCompile(lim), Cost: 1 << 30, Lease: true}); err != nil {
			t.Fatalf("decision %d: %v", i, err)
		}
	}
}

// noBoundary is a fixed window whose end is decades away (windows are
// aligned to the epoch: this one ends in 2070), for tests that decide on
// the store's clock and count what a window admitted: an hour's window
// would end during one run in a few hundred.
const noBoundary = algo.MaxHorizon

// waitLimit bounds a wait for something that takes milliseconds (a
// background top-up, a give-back, a reconnection), so far beyond it that
// a busy machine does not miss it: the test then fails instead of hanging.
const waitLimit = time.Minute
