package sluice

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/algo"
	"github.com/sluicehq/sluice/store"
)

// A Limiter is one limit on a store, compiled once, with the vocabulary of
// golang.org/x/time/rate's Limiter over many keys: Allow and AllowN,
// Reserve and ReserveN, Wait and WaitN, each N form with the key's cost
// and, where x/time/rate has one, an explicit time (the zero Time: the
// store's clock) for tests and replays. It is safe for concurrent use, and
// on a shared store (Redis)
// every instance of a service that makes the same Limiter shares its keys:
// a reservation made by one is seen by all.
//
//	lim, err := sluice.NewLimiter(st, algo.GCRA{Burst: 15, Count: 30, Period: time.Minute})
//	...
//	if ok, err := lim.Allow(ctx, userID); err == nil && !ok {
//		// over the limit
//	}
//
// The limit is validated and its parameters derived once (algo.Plan), so a
// decision does no more than the store's own work; on the memory store it
// allocates nothing.
type Limiter struct {
	st   store.Store
	plan *algo.Plan // compiled once, passed as every request's Plan
	// allower is st as an Allower, or nil.
	allower store.Allower
	// renewers renew the holds of the permits Acquire gave (internal/renewal).
	renewers [renewers]paddedRenewer
	// plans holds copies of plan for the ops of permits (Permit.do).
	plans       sync.Pool
	nextRenewer atomic.Uint32 // the renewer of the next opPlan made
}

// NewLimiter returns a Limiter for l on st. An invalid limit is an error
// wrapping algo.ErrInvalid.
func NewLimiter(st store.Store, l algo.Limit) (*Limiter, error) {
	if st == nil {
		return nil, errors.New("sluice: NewLimiter needs a store")
	}
	p, err := algo.Compile(l)
	if err != nil {
		return nil, err
	}
	a, _ := st.(store.Allower)
	return &Limiter{st: st, plan: &p, allower: a}, nil
}

// Limit returns the limit the Limiter was made with.
func (l *Limiter) Limit() algo.Limit { return l.plan.Limit() }

// Allow reports whether one action for key may happen now, and consumes
// it if so: AllowN(ctx, key, time.Time{}, 1).
func (l *Limiter) Allow(ctx context.Context, key string) (bool, error) {
	return l.AllowN(ctx, key, time.Time{}, 1)
}

// AllowN reports whether n actions for key may happen at t (the zero Time:
// the store's clock), and consumes them if so.
func (l *Limiter) AllowN(ctx context.Context, key string, t time.Time, n int64) (bool, error) {
	if l.allower != nil {
		return l.allower.AllowN(ctx, key, l.plan, t, n, nil)
	}
	r, err := l.DecideN(ctx, key, t, n)
	return r.Allowed, err
}

// DecideN decides n actions for key at t (the zero Time: the store's
// clock) and returns the whole Result: what AllowN reports, and how much
// remains and how long to wait.
func (l *Limiter) DecideN(ctx context.Context, key string, t time.Time, n int64) (algo.Result, error) {
	return l.st.Decide(ctx, store.Request{Key: key, Plan: l.plan, Cost: n, Time: t})
}

// ErrWouldExceedDeadline is returned by Wait when the actions would be
// admitted only after the context's deadline, and by Reserve when the
// reservation would act after it: nothing was consumed.
var ErrWouldExceedDeadline = errors.New("sluice: the wait would exceed the context's deadline")

// ErrNever is returned by Wait and Reserve when n exceeds what the limit
// admits at once: no wait can admit it.
var ErrNever = errors.New("sluice: the cost exceeds the limit and can never be admitted")

// Wait blocks until one action for key is admitted, and consumes it, or
// until ctx is done: WaitN(ctx, key, 1).
func (l *Limiter) Wait(ctx context.Context, key string) error { return l.WaitN(ctx, key, 1) }

// WaitN blocks until n actions for key are admitted, and consumes them, or
// until ctx is done. It never waits when the store says the wait would
// pass ctx's deadline: it returns ErrWouldExceedDeadline at once, and a
// context already done returns its error, taking nothing. Every
// admission is the store's own atomic decision, so many goroutines (and
// processes, on a shared store) waiting on one key are admitted at exactly
// the limit's rate; which of them goes first is not ordered.
func (l *Limiter) WaitN(ctx context.Context, key string, n int64) error {
	if err := ctx.Err(); err != nil {
		return err // a context already done takes nothing
	}
	var timer *time.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for {
		r, err := l.DecideN(ctx, key, time.Time{}, n)
		switch {
		case err != nil:
			return err
		case r.Allowed:
			return nil
		case r.RetryAfter == algo.Never:
			return ErrNever
		}
		wait := max(r.RetryAfter, time.Microsecond)
		if d, ok := ctx.Deadline(); ok && time.Until(d) < wait {
			return ErrWouldExceedDeadline
		}
		if timer == nil {
			timer = time.NewTimer(wait)
		} else {
			timer.Reset(wait)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-timer.C:
		}
	}
}

// A Reservation is n actions for a key taken ahead of their time by
// Limiter.ReserveN: the limit counts them from the moment of the
// reservation, and the holder acts after Delay, or gives them back with
// Cancel. One that could not be made (OK is false) holds nothing.
type Reservation struct {
	ok    bool
	l     *Limiter
	key   string
	n     int64
	act   time.Time // when the holder may act, by the store's clock
	delay time.Duration
	// given is set by the first Cancel that asks the store to give the
	// actions back; a pointer, so that copies of a Reservation share it.
	given *atomic.Bool
}

// OK reports whether the reservation was made: false for one that
// ReserveN returned with ErrNever or ErrWouldExceedDeadline, and for nil.
// A reservation that is not OK holds nothing, and its Delay and TimeToAct
// are zero.
func (r *Reservation) OK() bool { return r != nil && r.ok }

// Delay is how long after the reservation the holder may act: 0 when the
// actions were admitted at once.
func (r *Reservation) Delay() time.Duration { return r.delay }

// DelayFrom is how long after t the holder may act: 0 when t is at or
// after TimeToAct.
func (r *Reservation) DelayFrom(t time.Time) time.Duration { return max(r.act.Sub(t), 0) }

// TimeToAct is when the holder may act, by the clock of the reservation:
// the store's, or the explicit time given to ReserveN.
func (r *Reservation) TimeToAct() time.Time { return r.act }

// Cancel gives the reservation's actions back to the limit, if their time
// has not yet come by the store's clock (after it, they were used or their
// time has passed, and nothing is given back), as much as the limit still
// holds them: later reservations keep their places. On Redis the refund
// is one script call, seen by every instance, after one TIME.
//
// A reservation gives back at most once, whatever the number of calls and
// goroutines: only the first call that reaches the store's refund gives
// anything back, and every other call returns nil. A call that fails
// before the refund (the store's clock could not be read) leaves the
// reservation to a later Cancel; once the refund was asked for, even if
// it failed (it may have been applied), no later call asks again.
func (r *Reservation) Cancel(ctx context.Context) error { return r.CancelAt(ctx, time.Time{}) }

// CancelAt is Cancel at the time t (the zero Time: the store's clock),
// the twin of ReserveN with an explicit time: the actions go back if t is
// before TimeToAct. A reservation that is not OK has nothing to give back.
func (r *Reservation) CancelAt(ctx context.Context, t time.Time) error {
	if !r.OK() {
		return nil
	}
	a, ok := r.l.st.(store.Adjuster)
	if !ok {
		return fmt.Errorf("sluice: %T cannot give units back", r.l.st)
	}
	if !r.given.CompareAndSwap(false, true) {
		return nil
	}
	now, err := r.l.at(ctx, t)
	if err != nil {
		r.given.Store(false)
		return err
	}
	if !now.Before(r.act) {
		return nil
	}
	return a.Adjust(ctx, store.Request{Key: r.key, Plan: r.l.plan, Cost: r.n, Time: now}, algo.Reward)
}

// at returns t, or for the zero Time the store's clock (store.Clock), or
// the local clock for a store without one.
func (l *Limiter) at(ctx context.Context, t time.Time) (time.Time, error) {
	if !t.IsZero() {
		return t, nil
	}
	if c, ok := l.st.(store.Clock); ok {
		return c.Now(ctx)
	}
	return time.Now(), nil
}

// Reserve takes one action for key ahead of its time: ReserveN(ctx, key,
// time.Time{}, 1).
func (l *Limiter) Reserve(ctx context.Context, key string) (*Reservation, error) {
	return l.ReserveN(ctx, key, time.Time{}, 1)
}

// ReserveN takes n actions for key ahead of their time at t (the zero
// Time: the store's clock), as x/time/rate's ReserveN does, and returns
// the Reservation: act after its Delay, or Cancel it. It reserves no later
// than ctx's deadline allows (a context without one: any wait); when the
// actions could act only after it, it takes nothing and returns a
// Reservation that is not OK with ErrWouldExceedDeadline, and when n
// exceeds the limit's burst, one with ErrNever. Any other error returns a
// nil Reservation; a context already done takes nothing and returns its
// error.
//
// ReserveN is for the limits with a steady refill, GCRA and the token
// bucket, where capacity taken ahead has a meaning: for the others it
// returns an error wrapping algo.ErrUnsupported. The store must give units
// back (store.Adjuster) for Cancel: the memory and Redis stores do.
//
// With the zero Time the decision is at the store's clock (store.Clock:
// Redis TIME on Redis, read first), and Delay and TimeToAct are by it.
func (l *Limiter) ReserveN(ctx context.Context, key string, t time.Time, n int64) (*Reservation, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	now, err := l.at(ctx, t)
	if err != nil {
		return nil, err
	}
	wait := algo.MaxHorizon
	if d, ok := ctx.Deadline(); ok {
		left := time.Until(d) // by the local clock, as the deadline is
		if !t.IsZero() {
			left = d.Sub(t)
		}
		wait = min(max(left, 0), wait)
	}
	p, err := algo.Reserving(l.plan, wait)
	if err != nil {
		return nil, err
	}
	if t, _ := p.TAT(); n > t.Quota {
		return &Reservation{}, ErrNever
	}
	r, err := l.st.Decide(ctx, store.Request{Key: key, Plan: &p, Cost: n, Time: now})
	switch {
	case err != nil:
		return nil, err
	case r.RetryAfter == algo.Never:
		return &Reservation{}, ErrNever
	case !r.Allowed:
		return &Reservation{}, ErrWouldExceedDeadline
	}
	_, delay := algo.Unreserved(&p, r, wait, n)
	return &Reservation{ok: true, l: l, key: key, n: n, act: now.Add(delay), delay: delay, given: new(atomic.Bool)}, nil
}
