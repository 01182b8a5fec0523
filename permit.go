package sluice

import (
	"context"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/algo"
	"github.com/sluicehq/sluice/internal/permitid"
	"github.com/sluicehq/sluice/store"
)

// ErrLost is the error of a Permit whose slots are no longer held: a
// renewal found its hold ended (the holder was paused or cut off from the
// store for longer than the limit's HoldFor), or the store could not renew
// it before its hold ran out.
var ErrLost = errors.New("sluice: permit lost: its hold ended before it was renewed")

// A Permit holds slots of a concurrency limit (algo.Concurrency) for one
// key, under a random id: Limiter.Acquire takes them, the Permit renews
// their hold while it is held, and Release gives them back. A holder that
// dies without releasing frees them when the hold runs out.
type Permit struct {
	l    *Limiter
	key  string
	id   int64
	res  algo.Result
	lost chan struct{} // Lost's, made on demand (most permits need none), or lostChan; under lostMu

	// Renewals, by the permit's renewer; its mu guards these.
	last       time.Time // the last renewal that held, or a time before the acquire
	prev, next *Permit   // in the renewer's bucket

	// mu is held while an op of the permit is in the store: a Release
	// waits for a renewal in flight, and RenewAt and Release take turns.
	mu       sync.Mutex
	lostMu   sync.Mutex
	released atomic.Bool

	renewing bool  // renewed by the renewer (Acquire's permits)
	stopped  bool  // Release has begun: renew no more (the renewer's mu)
	bucket   int8  // the renewer's bucket it is in, -1 when in none (the renewer's mu)
	renewer  uint8 // its renewer, the one of the acquire's pooled plan (opPlan)
}

// ID returns the permit id: the store knows the slots by it.
func (p *Permit) ID() int64 { return p.id }

// OK reports whether the permit holds slots: false for one that
// AcquireAt was denied, and for nil.
func (p *Permit) OK() bool { return p != nil && p.res.Allowed }

// Result is the acquire's result: the slots left, and for a denied one
// when a hold ends (RetryAfter).
func (p *Permit) Result() algo.Result { return p.res }

// Lost returns a channel closed when a renewing permit (Acquire's) finds
// its slots no longer held, or cannot renew them before their hold ends:
// the work it guards may now overlap another holder's. It is never closed
// for a permit that does not renew (its channel is nil), nor by Release.
func (p *Permit) Lost() <-chan struct{} {
	if !p.renewing {
		return nil
	}
	p.lostMu.Lock()
	defer p.lostMu.Unlock()
	if p.lost == nil {
		p.lost = make(chan struct{})
	}
	return p.lost
}

// markLost closes the permit's Lost channel, or gives it lostChan if it
// has none yet.
func (p *Permit) markLost() {
	p.lostMu.Lock()
	defer p.lostMu.Unlock()
	if p.lost == nil {
		p.lost = lostChan
		return
	}
	select {
	case <-p.lost: // closed already
	default:
		close(p.lost)
	}
}

// lostChan is a lost permit's Lost channel, already closed: the permit
// needs no flag of its own to say it was lost.
var lostChan = func() chan struct{} {
	c := make(chan struct{})
	close(c)
	return c
}()

// Acquire waits for one slot for key and takes it: AcquireN(ctx, key, 1).
func (l *Limiter) Acquire(ctx context.Context, key string) (*Permit, error) {
	return l.AcquireN(ctx, key, 1)
}

// AcquireN waits until n slots are free for key and takes them, all or
// none, under one new permit id, like Wait: it retries a denied acquire
// after a short, growing pause (1 ms to 100 ms, never beyond the time a
// hold ends), since a holder may release at any time. It returns ctx's
// error if ctx is done first, and ErrNever at once when n exceeds the
// limit. The Permit's hold is renewed a sixth to a third of HoldFor after
// the last renewal, until Release, by one of the Limiter's eight renewers
// (no goroutine per permit); Lost tells when it could not be.
//
// The limit must be a concurrency limit (others: an error wrapping
// algo.ErrUnsupported). An acquire whose reply is lost (a store error)
// may have taken the slots: they are freed when their hold ends.
func (l *Limiter) AcquireN(ctx context.Context, key string, n int64) (*Permit, error) {
	c, _ := l.plan.Concurrency() // do refuses another limit
	p := l.newPermit(key)
	pause := time.Millisecond
	for {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		ok, err := p.do(ctx, algo.Acquire, time.Time{}, n, &p.res)
		switch {
		case err != nil:
			return nil, err
		case ok:
			p.renewing = true
			l.renewers[p.renewer].add(p, c.HoldFor)
			return p, nil
		case p.res.RetryAfter == algo.Never:
			return nil, ErrNever
		}
		wait := min(pause, p.res.RetryAfter)
		wait = wait/2 + mrand.N(wait/2+1) // jitter: waiters do not retry in step
		pause = min(2*pause, 100*time.Millisecond)
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, ctx.Err()
		case <-t.C:
		}
	}
}

// AcquireAt tries once to take n slots for key at t (the zero Time: the
// store's clock) under a new permit id, the twin of AcquireN for tests and
// replays: it does not wait and its Permit does not renew (RenewAt does).
// A denied acquire returns a Permit that is not OK, with its Result.
func (l *Limiter) AcquireAt(ctx context.Context, key string, t time.Time, n int64) (*Permit, error) {
	p := l.newPermit(key)
	if _, err := p.do(ctx, algo.Acquire, t, n, &p.res); err != nil {
		return nil, err
	}
	return p, nil
}

func (l *Limiter) newPermit(key string) *Permit {
	return &Permit{l: l, key: key, bucket: -1} // its id comes with its first op (do)
}

// do decides op for the permit on its key at t: store.Acquire, Renew or
// Release of one request, as one Decide (no slices to allocate), on a
// copy of the limit's plan from the Limiter's pool (a store keeps no Plan
// past the call; nothing but ForPermit changes a plan once compiled), so
// that a permit is one allocation; a new permit's id comes from that
// copy's Source, and an acquire's permit takes its renewer. It sets *r to
// the Result, in place on a store that is an Allower (which with r nil
// skips building it). The caller holds p.mu, or has not yet shared p. The
// error wraps algo.ErrUnsupported for a limit that is not a concurrency
// limit.
func (p *Permit) do(ctx context.Context, op algo.SlotOp, t time.Time, n int64, r *algo.Result) (bool, error) {
	pp, _ := p.l.plans.Get().(*opPlan)
	if pp == nil {
		pp = &opPlan{Plan: *p.l.plan} // ForPermit sets all that differs between permits
		pp.renewer = uint8(p.l.nextRenewer.Add(1) % renewers)
	}
	defer p.l.plans.Put(pp)
	if p.id == 0 { // a new permit's first acquire
		p.id = pp.ids.Next()
	}
	q := &pp.Plan
	if err := algo.ForPermit(q, p.id, op); err != nil {
		return false, err
	}
	if op == algo.Acquire {
		p.renewer = pp.renewer
	}
	if p.l.allower != nil {
		return p.l.allower.AllowN(ctx, p.key, q, t, n, r)
	}
	res, err := p.l.st.Decide(ctx, store.Request{Key: p.key, Plan: q, Cost: n, Time: t})
	if r != nil {
		*r = res
	}
	return res.Allowed, err
}

// RenewAt renews the permit's hold at t (the zero Time: the store's
// clock): it runs HoldFor from t. It reports false when the slots are no
// longer held (released, or the hold ended): a permit once lost is never
// renewed.
func (p *Permit) RenewAt(ctx context.Context, t time.Time) (bool, error) {
	if !p.OK() {
		return false, nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.renew(ctx, t)
}

// renew is RenewAt with p.mu held.
func (p *Permit) renew(ctx context.Context, t time.Time) (bool, error) {
	if p.released.Load() {
		return false, nil
	}
	held, err := p.do(ctx, algo.Renew, t, 0, nil)
	if err != nil {
		return false, fmt.Errorf("sluice: renew permit: %w", err)
	}
	return held, nil
}

// Release gives the permit's slots back and stops renewing it:
// ReleaseAt(ctx, time.Time{}).
func (p *Permit) Release(ctx context.Context) error { return p.ReleaseAt(ctx, time.Time{}) }

// ReleaseAt gives the permit's slots back at t (the zero Time: the
// store's clock) and stops renewing it. It is safe to call more than
// once, from any goroutine: once a release has succeeded, later calls do
// nothing; a release of slots no longer held (their hold ended) changes
// nothing. A release that failed may be called again.
func (p *Permit) ReleaseAt(ctx context.Context, t time.Time) error {
	if !p.OK() || p.released.Load() {
		return nil
	}
	if p.renewing {
		p.l.renewers[p.renewer].remove(p) // no renewal after the release
	}
	p.mu.Lock() // after a renewal in flight
	defer p.mu.Unlock()
	if p.released.Load() {
		return nil
	}
	if _, err := p.do(ctx, algo.Release, t, 0, nil); err != nil {
		return fmt.Errorf("sluice: release permit: %w", err)
	}
	p.released.Store(true)
	return nil
}

// opPlan is a copy of a Limiter's plan for one op of a permit (Permit.do),
// from the Limiter's pool, with the renewer of the permits it acquires:
// a pool hands a goroutine the copy last used on its core, so a permit's
// acquire and release mostly take the lock of a renewer that core used
// last, rather than one the other cores use too.
type opPlan struct {
	algo.Plan
	renewer uint8
	ids     permitid.Source // the ids of the permits it acquires
}
