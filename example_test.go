package sluice_test

import (
	"context"
	"fmt"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/algo"
	"github.com/sluicehq/sluice/store"
	"github.com/sluicehq/sluice/store/memory"
)

// A GCRA limit with the arguments of redis-cell's CL.THROTTLE user123 15 30
// 60, decided on the embedded store at an explicit time.
func Example() {
	st := memory.New()
	defer st.Close()

	lim, err := algo.Compile(algo.GCRA{Burst: 15, Count: 30, Period: time.Minute})
	if err != nil {
		panic(err)
	}
	now := time.Unix(1800003000, 0)
	for i := 0; i < 17; i++ {
		r, err := st.Decide(context.Background(), store.Request{Key: sluice.Key("user", "user123"), Plan: &lim, Cost: 1, Time: now})
		if err != nil {
			panic(err)
		}
		if i == 0 || i >= 15 {
			fmt.Println(r.Allowed, r.Remaining, r.RetryAfter, r.ResetAfter)
		}
	}
	// Output:
	// true 15 0s 2s
	// true 0 0s 32s
	// false 0 2s 32s
}

// A Limiter is one limit on a store, compiled once, with x/time/rate's
// vocabulary: Allow, Wait and Reserve, per key.
func ExampleLimiter() {
	st := memory.New() // or a Redis store: every instance then shares the keys
	defer st.Close()

	// 2 at once, then 1 a minute: GCRA with max_burst 1.
	lim, err := sluice.NewLimiter(st, algo.GCRA{Burst: 1, Count: 1, Period: time.Minute})
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	for i := 0; i < 3; i++ {
		ok, err := lim.Allow(ctx, "user:alex")
		fmt.Println(ok, err)
	}

	// Wait blocks until the next action is admitted, unless the wait would
	// pass the context's deadline.
	wctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	fmt.Println(lim.Wait(wctx, "user:alex"))

	// Reserve takes capacity ahead of its time; Cancel gives it back.
	r, err := lim.ReserveN(ctx, "user:bo", time.Time{}, 3)
	fmt.Println(r.OK(), err)
	r, err = lim.ReserveN(ctx, "user:bo", time.Time{}, 2)
	fmt.Println(r.Delay() == 0, err)
	r, err = lim.Reserve(ctx, "user:bo")
	fmt.Println(r.Delay() > 30*time.Second, err)
	fmt.Println(r.Cancel(ctx))
	// Output:
	// true <nil>
	// true <nil>
	// false <nil>
	// sluice: the wait would exceed the context's deadline
	// false sluice: the cost exceeds the limit and can never be admitted
	// true <nil>
	// true <nil>
	// <nil>
}

// The README's first library example: allow decides one action for a
// user on any store.

// perUser is redis-cell's CL.THROTTLE user 15 30 60: 30 a minute, 15 at
// once, compiled once.
var perUser = algo.MustCompile(algo.GCRA{Burst: 15, Count: 30, Period: time.Minute})

func allow(ctx context.Context, st store.Store, userID string) (bool, error) {
	res, err := st.Decide(ctx, store.Request{
		Key:  sluice.Key("user", userID), // parts are escaped: no id can forge another key
		Plan: perUser,
		Cost: 1,
	})
	if err != nil {
		return false, err // bad input, or the store failed within ctx's deadline
	}
	fmt.Println(res.Quota, res.Remaining, res.ResetAfter) // CL.THROTTLE's numbers
	if !res.Allowed {
		return false, nil // res.RetryAfter says when (algo.Never: the cost exceeds res.Quota)
	}
	return true, nil
}

// A decision on the embedded store, through the README's allow.
func Example_store() {
	ctx := context.Background()
	st := memory.New() // or: st, err := redis.Open(ctx, "redis://127.0.0.1:6379/0", redis.Options{})
	defer st.Close()
	ok, err := allow(ctx, st, "alex")
	fmt.Println(ok, err)
	// Output:
	// 16 15 2s
	// true <nil>
}

// ExampleLimiter_Acquire bounds how many exports run at once per tenant.
func ExampleLimiter_Acquire() {
	st := memory.New() // on Redis, every process shares the slots
	defer st.Close()

	// At most 2 exports per tenant at once; a holder that dies without
	// releasing frees its slot 30s after it last renewed it.
	lim, err := sluice.NewLimiter(st, algo.Concurrency{Count: 2, HoldFor: 30 * time.Second})
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	a, _ := lim.Acquire(ctx, "tenant:acme") // renews itself while held
	b, _ := lim.Acquire(ctx, "tenant:acme")

	// A third waits for a slot, here no longer than 50ms.
	wctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	_, err = lim.Acquire(wctx, "tenant:acme")
	fmt.Println(err)

	fmt.Println(a.Release(ctx), a.Release(ctx)) // safe twice
	c, err := lim.Acquire(ctx, "tenant:acme")
	fmt.Println(c.Result().Remaining, err)
	b.Release(ctx)
	c.Release(ctx)
	// Output:
	// context deadline exceeded
	// <nil> <nil>
	// 0 <nil>
}

// ExampleLimiter_Penalize guards a login form: 5 tries an hour per
// account, a failed one costs 2 more, and an account that goes over is
// blocked for 30s, twice as long each time it does again within a day.
// (An hour's window, not a minute's: the example's few calls on a busy
// machine are then all but never split by the window's end.)
func ExampleLimiter_Penalize() {
	st := memory.New()
	defer st.Close()
	lim, err := sluice.NewLimiter(st, algo.Blocking{
		Limit: algo.FixedWindow{Count: 5, Window: time.Hour},
		Block: algo.Block{For: 30 * time.Second, Growth: 2},
	})
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	login := func(password string) {
		r, _ := lim.DecideN(ctx, "account:alex", time.Time{}, 1)
		switch {
		case r.DeniedBy == algo.DeniedByBlock:
			fmt.Println("blocked") // r.RetryAfter says until when
		case !r.Allowed:
			fmt.Println("denied")
		case password != "s3cret":
			fmt.Println("wrong password")
			lim.Penalize(ctx, "account:alex", 2)
		default:
			fmt.Println("welcome")
			lim.Reward(ctx, "account:alex", 1)
		}
	}
	login("guess")  // 1 + 2
	login("s3cret") // 1 - 1
	login("guess2") // 1 + 2: 5 of 5
	login("s3cret") // over: a 30s block
	login("s3cret")
	lim.Unblock(ctx, "account:alex") // an operator lets alex in
	lim.Reward(ctx, "account:alex", 5)
	login("s3cret")
	// Output:
	// wrong password
	// welcome
	// wrong password
	// blocked
	// blocked
	// welcome
}

// ExampleLimiter_Estimate keeps a budget of LLM tokens when the cost of a
// call is known only when its response ends: estimate max_tokens before
// the call, admitted only if it fits, and settle the real cost after, so
// that concurrent calls never spend more than the budget.
func ExampleLimiter_Estimate() {
	st := memory.New()
	defer st.Close()
	lim, err := sluice.NewLimiter(st, algo.FixedWindow{Count: 10_000, Window: time.Hour})
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	e, err := lim.Estimate(ctx, "tenant:acme", 4000) // max_tokens
	if err != nil || !e.OK() {
		return // over budget: e.Result().RetryAfter says when to try again
	}
	fmt.Println(e.Result().Remaining)
	// ... the call, whose response used 1,250 tokens ...
	e.Settle(ctx, 1250)
	e.Settle(ctx, 1250) // once only
	r, _ := lim.DecideN(ctx, "tenant:acme", time.Time{}, 0)
	fmt.Println(r.Remaining)
	// Output:
	// 6000
	// 8750
}
