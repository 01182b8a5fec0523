package redis_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/algo"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/store"
	"github.com/sluicehq/sluice/store/redis"
)

// TestDeadlineHoldsWhenRedisHangs: with redis-server stopped (SIGSTOP),
// 1000 goroutines deciding with 50 ms deadlines for 3 s, far more calls
// than the client's in-flight queue holds, each get an error, and all
// return while Redis is still stopped: none waits for Redis. Then calls
// whose deadline is an hour away, on a store whose own timeout is an hour
// too, return when their context is cancelled: it is the context that
// ends a call, not a timeout of the store's or the client's.
// Decisions work again once Redis continues: exact decisions (coalesced),
// and the paths of the over-limit cache and of leases, whose lease calls
// hang too.
func TestDeadlineHoldsWhenRedisHangs(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts redis.Options
		req  store.Request
	}{
		{"exact", redis.Options{}, store.Request{Key: "hung", Plan: algo.MustCompile(algo.GCRA{Burst: 1000, Count: 1000, Period: time.Second}), Cost: 1}},
		{"over-limit cache", redis.Options{OverLimitCache: 1000}, store.Request{Key: "hung", Plan: algo.MustCompile(algo.GCRA{Burst: 1000, Count: 1000, Period: time.Second}), Cost: 1}},
		{"leases", redis.Options{LeaseFor: 100 * time.Millisecond}, store.Request{Key: "hung", Plan: algo.MustCompile(algo.FixedWindow{Count: 1e9, Window: noBoundary}), Cost: 1, Lease: true}},
	} {
		t.Run(tc.name, func(t *testing.T) { deadlineHolds(t, tc.opts, tc.req) })
	}
}

func deadlineHolds(t *testing.T, opts redis.Options, req store.Request) {
	srv := redistest.Start(t)
	st, err := redis.Open(context.Background(), srv.URL(), opts)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	// A store whose own timeout (for the calls it makes on a caller's
	// behalf, such as a lease) is far away: only a context ends its calls.
	long := opts
	long.Timeout = time.Hour
	patient, err := redis.Open(context.Background(), srv.URL(), long)
	if err != nil {
		t.Fatal(err)
	}
	defer patient.Close()
	if _, err := patient.Decide(context.Background(), req); err != nil { // connected before the stop
		t.Fatal(err)
	}
	resume := srv.Pause(t)
	var worst, calls atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	for range 1000 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Since(start) < 3*time.Second {
				ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
				t0 := time.Now()
				if _, err := st.Decide(ctx, req); err == nil {
					t.Error("a decision succeeded with Redis stopped")
				}
				cancel()
				calls.Add(1)
				for d := int64(time.Since(t0)); d > worst.Load(); {
					if worst.CompareAndSwap(worst.Load(), d) {
						break
					}
				}
			}
		}()
	}
	wg.Wait()
	t.Logf("%d calls against a stopped Redis, the slowest returned in %v", calls.Load(), time.Duration(worst.Load()))

	far, cancel := context.WithTimeout(context.Background(), time.Hour)
	for range 100 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := patient.Decide(far, req); !errors.Is(err, context.Canceled) {
				t.Errorf("a decision cancelled with Redis stopped: %v, want context.Canceled", err)
			}
		}()
	}
	cancel()
	wg.Wait()
	resume()
	deadline := time.Now().Add(waitLimit)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_, err := st.Decide(ctx, req)
		cancel()
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no decision a minute after Redis continued: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestCloseWithRedisHung: Close returns while Redis is stopped and the
// store's connections, cut by a relay, are dialed anew, whose handshakes
// wait on Redis for the dial timeout whatever a context says (an hour
// here): the over-limit cache's subscription and poll, and the leases'
// give-back, do not hold it. The minute is a hang detector.
func TestCloseWithRedisHung(t *testing.T) {
	srv := redistest.Start(t)
	rl := redistest.NewRelay(t, srv.Addr)
	opts := redis.Options{OverLimitCache: 1000, LeaseFor: time.Minute, Timeout: 50 * time.Millisecond}
	st, err := redis.Open(context.Background(), "redis://"+rl.Addr+"/0?dial_timeout=1h&write_timeout=1h", opts)
	if err != nil {
		t.Fatal(err)
	}
	leased := store.Request{Key: "k", Plan: algo.MustCompile(algo.FixedWindow{Count: 1e9, Window: noBoundary}), Cost: 1, Lease: true}
	// Connected, and a lease held until Close gives it back. The store's
	// 50ms (which Close's give-back must not outwait) a busy machine can
	// outlast before the stop: a decision that meets it is tried again.
	for start := time.Now(); st.LeaseStats().Leased == 0; {
		if _, err := st.Decide(context.Background(), leased); err != nil && time.Since(start) > time.Minute {
			t.Fatal(err)
		}
	}
	defer srv.Pause(t)()
	dialed := rl.Dialed()
	rl.Cut()
	// The poll dials anew within ForgetPoll, and the subscription tries
	// again ForgetPoll after the cut, on that dial or its own. (On a machine
	// too busy to run it within the sleep, the test checks less, and passes.)
	for start := time.Now(); rl.Dialed() == dialed; time.Sleep(10 * time.Millisecond) {
		if time.Since(start) > time.Minute {
			t.Fatal("the store did not dial Redis anew")
		}
	}
	time.Sleep(2 * redis.ForgetPoll)
	closed := make(chan struct{})
	go func() { st.Close(); close(closed) }()
	select {
	case <-closed:
	case <-time.After(time.Minute):
		t.Fatal("Close waited on the stopped Redis")
	}
}
