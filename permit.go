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
	"github.com/sluicehq/sluice/internal/renewal"
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
//
// A Permit is a small value: its copies name the same slots, and once
// they are released every copy is spent (Release and RenewAt do nothing;
// Lost is nil, or closed if the permit was lost first). The zero Permit
// holds nothing.
type Permit struct {
	s   *permitState // nil for a denied or zero Permit
	gen uint64       // s's generation this Permit names
	id  int64
	res algo.Result
}

// A permitState is what a held Permit's ops share. A release spends it (a
// new generation) and gives it to a later acquire, so that a pair of
// acquire and release allocates nothing (bench/NOTES.md, "Slots against a check"); a
// Permit of a spent generation does nothing with it.
type permitState struct {
	l       *Limiter
	key     string
	id      int64
	gen     atomic.Uint64 // changed by a release, under mu
	lost    chan struct{} // Lost's, made on demand (most permits need none), or lostChan; under lostMu
	lostGen uint64        // 1 + the generation that was lost, or 0: a lost state is never handed on (lostMu)

	entry renewal.Entry // its place in its renewer

	// The Mutex is held while an op of the permit is in the store: a
	// Release waits for a renewal in flight, and RenewAt and Release take
	// turns. Lock order: it, then the renewer's, then lostMu.
	sync.Mutex
	lostMu sync.Mutex

	renewing bool  // renewed by the renewer (Acquire's permits)
	renewer  uint8 // its renewer, the one of the acquire's pooled plan (opPlan)
}

// ID returns the permit id: the store knows the slots by it.
func (p Permit) ID() int64 { return p.id }

// OK reports whether the permit was granted its slots: false for one that
// AcquireAt was denied, and for the zero Permit.
func (p Permit) OK() bool { return p.res.Allowed }

// Result is the acquire's result: the slots left, and for a denied one
// when a hold ends (RetryAfter).
func (p Permit) Result() algo.Result { return p.res }

// Lost returns a channel closed when a renewing permit (Acquire's) finds
// its slots no longer held, or cannot renew them before their hold ends:
// the work it guards may now overlap another holder's. It is nil for a
// permit that does not renew, and for one released (unless it was lost
// first); Release does not close it.
func (p Permit) Lost() <-chan struct{} {
	s := p.s
	if s == nil {
		return nil
	}
	s.lostMu.Lock()
	defer s.lostMu.Unlock()
	if s.gen.Load() != p.gen {
		if s.lostGen == p.gen+1 { // lost, then released: it stays closed
			return s.lost
		}
		return nil
	}
	if !s.renewing {
		return nil
	}
	if s.lost == nil {
		s.lost = make(chan struct{})
	}
	return s.lost
}

// MarkLost closes the permit's Lost channel, or gives it lostChan if it
// has none yet. The caller holds s's lock: it is not released meanwhile.
func (s *permitState) MarkLost() {
	s.lostMu.Lock()
	defer s.lostMu.Unlock()
	s.lostGen = s.gen.Load() + 1
	if s.lost == nil {
		s.lost = lostChan
		return
	}
	select {
	case <-s.lost: // closed already
	default:
		close(s.lost)
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
func (l *Limiter) Acquire(ctx context.Context, key string) (Permit, error) {
	return l.AcquireN(ctx, key, 1)
}

// AcquireN waits until n slots (at least 1) are free for key and takes
// them, all or none, under one new permit id, like Wait: it retries a
// denied acquire after a short, growing pause (1 ms to 100 ms, never
// beyond the time a hold ends), since a holder may release at any time.
// It returns ctx's error if ctx is done first, and ErrNever at once when
// n exceeds the limit. The Permit's hold is renewed a sixth to a third of
// HoldFor after the last renewal, until Release, by one of the Limiter's
// eight renewers (no goroutine per permit); Lost tells when it could not
// be.
//
// The limit must be a concurrency limit (others: an error wrapping
// algo.ErrUnsupported). An acquire whose reply is lost (a store error)
// may have taken the slots: they are freed when their hold ends.
func (l *Limiter) AcquireN(ctx context.Context, key string, n int64) (Permit, error) {
	c, _ := l.plan.Concurrency() // acquire refuses another limit
	pause := time.Millisecond
	for {
		if err := ctx.Err(); err != nil {
			return Permit{}, err
		}
		p, err := l.acquire(ctx, key, time.Time{}, n, true)
		switch {
		case err != nil:
			return Permit{}, err
		case p.OK():
			l.renewers[p.s.renewer].Add(&p.s.entry, p.s, c.HoldFor)
			return p, nil
		case p.res.RetryAfter == algo.Never:
			return Permit{}, ErrNever
		}
		wait := min(pause, p.res.RetryAfter)
		wait = wait/2 + mrand.N(wait/2+1) // jitter: waiters do not retry in step
		pause = min(2*pause, 100*time.Millisecond)
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return Permit{}, ctx.Err()
		case <-t.C:
		}
	}
}

// AcquireAt tries once to take n slots for key at t (the zero Time: the
// store's clock) under a new permit id, the twin of AcquireN for tests and
// replays: it does not wait and its Permit does not renew (RenewAt does).
// A denied acquire returns a Permit that is not OK, with its Result.
func (l *Limiter) AcquireAt(ctx context.Context, key string, t time.Time, n int64) (Permit, error) {
	return l.acquire(ctx, key, t, n, false)
}

// acquire tries once to take n slots for key at t under a new id, on a
// permitState a release gave back to the pooled plan, or a new one. A
// state the acquire did not take goes back to the plan.
func (l *Limiter) acquire(ctx context.Context, key string, t time.Time, n int64, renewing bool) (Permit, error) {
	if n == 0 { // a permit of no slots would hold nothing, and be lost at its first renewal
		return Permit{}, fmt.Errorf("sluice: %w: an acquire takes at least 1 slot", store.ErrBadRequest)
	}
	pp := l.opPlan()
	defer l.plans.Put(pp)
	s := pp.spare
	if s == nil {
		s = new(permitState)
	}
	pp.spare = nil
	s.l, s.key, s.id, s.renewer = l, key, pp.ids.Next(), pp.renewer
	s.renewing = renewing
	_, err := s.do(ctx, pp, algo.Acquire, t, n, &pp.res) // &pp.res, not a local: it would escape
	switch {
	case err != nil:
		pp.spare = s
		return Permit{}, err
	case !pp.res.Allowed:
		pp.spare = s
		return Permit{id: s.id, res: pp.res}, nil
	}
	return Permit{s: s, gen: s.gen.Load(), id: s.id, res: pp.res}, nil
}

// opPlan returns a copy of the Limiter's plan for one op of a permit,
// from its pool; the caller puts it back.
func (l *Limiter) opPlan() *opPlan {
	pp, _ := l.plans.Get().(*opPlan)
	if pp == nil {
		pp = &opPlan{Plan: *l.plan} // ForPermit sets all that differs between permits
		pp.renewer = uint8(l.nextRenewer.Add(1) % renewers)
	}
	return pp
}

// do decides op for the permit on its key at t: store.DecideSlots of one
// request, as one Decide (no slices to allocate), on pp, a
// copy of the limit's plan from the Limiter's pool (a store keeps no Plan
// past the call; nothing but ForPermit changes a plan once compiled). It
// sets *r to the Result, in place on a store that is an Allower (which
// with r nil skips building it). The caller holds s's lock, or has not yet
// given s to a Permit. The error wraps algo.ErrUnsupported for a limit
// that is not a concurrency limit.
func (s *permitState) do(ctx context.Context, pp *opPlan, op algo.SlotOp, t time.Time, n int64, r *algo.Result) (bool, error) {
	q := &pp.Plan
	if err := algo.ForPermit(q, s.id, op); err != nil {
		return false, err
	}
	if s.l.allower != nil {
		return s.l.allower.AllowN(ctx, s.key, q, t, n, r)
	}
	res, err := s.l.st.Decide(ctx, store.Request{Key: s.key, Plan: q, Cost: n, Time: t})
	if r != nil {
		*r = res
	}
	return res.Allowed, err
}

// RenewAt renews the permit's hold at t (the zero Time: the store's
// clock): it runs HoldFor from t. It reports false when the slots are no
// longer held (released, or the hold ended): a permit once lost is never
// renewed.
func (p Permit) RenewAt(ctx context.Context, t time.Time) (bool, error) {
	s := p.s
	if s == nil {
		return false, nil
	}
	s.Lock()
	defer s.Unlock()
	if s.gen.Load() != p.gen {
		return false, nil
	}
	return s.renew(ctx, t)
}

// renew renews s's hold at t; s's lock is held.
func (s *permitState) renew(ctx context.Context, t time.Time) (bool, error) {
	pp := s.l.opPlan()
	defer s.l.plans.Put(pp)
	held, err := s.do(ctx, pp, algo.Renew, t, 0, nil)
	if err != nil {
		return false, fmt.Errorf("sluice: renew permit: %w", err)
	}
	return held, nil
}

// Release gives the permit's slots back and stops renewing it:
// ReleaseAt(ctx, time.Time{}).
func (p Permit) Release(ctx context.Context) error { return p.ReleaseAt(ctx, time.Time{}) }

// ReleaseAt gives the permit's slots back at t (the zero Time: the
// store's clock) and stops renewing it. It is safe to call more than
// once, on any copy, from any goroutine: once a release has succeeded,
// later calls do nothing; a release of slots no longer held (their hold
// ended) changes nothing. A release that failed may be called again.
func (p Permit) ReleaseAt(ctx context.Context, t time.Time) error {
	s := p.s
	if s == nil || s.gen.Load() != p.gen {
		return nil
	}
	s.Lock() // after a renewal in flight
	if s.gen.Load() != p.gen {
		s.Unlock()
		return nil
	}
	if s.renewing {
		s.entry.Stop() // no renewal after the release
	}
	pp := s.l.opPlan()
	defer s.l.plans.Put(pp)
	if _, err := s.do(ctx, pp, algo.Release, t, 0, nil); err != nil {
		s.Unlock()
		return fmt.Errorf("sluice: release permit: %w", err)
	}
	// Spend this generation; a state that was never lost goes to the next
	// acquire on this plan.
	s.gen.Add(1)
	s.lostMu.Lock()
	gone := s.lostGen != 0
	if !gone {
		s.lost = nil
	}
	s.lostMu.Unlock()
	s.Unlock()
	if !gone && pp.spare == nil {
		pp.spare = s
	}
	return nil
}

// Renew renews the permit once for its renewer, within a third of the
// hold. A permit none of whose renewals held for a whole hold since is
// lost: its slots may have run out.
func (s *permitState) Renew(since time.Time) (bool, error) {
	c, _ := s.l.plan.Concurrency()
	ctx, cancel := context.WithTimeout(context.Background(), c.HoldFor/3)
	held, err := s.renew(ctx, time.Time{})
	cancel()
	if err != nil && time.Since(since) >= c.HoldFor {
		return false, nil
	}
	return held, err
}

// A Limiter has renewers renewers, and a permit's is the one of the pooled
// plan its acquire used (opPlan), so that acquires and releases on several
// cores seldom meet on one lock, nor on the cache line of one.
const renewers = 8

// paddedRenewer is a renewer alone on its cache lines: renewers side by
// side would share one, and its lock would bounce between cores anyway.
type paddedRenewer struct {
	renewal.Renewer
	_ [128]byte
}

// opPlan is a copy of a Limiter's plan for one op of a permit
// (permitState.do), from the Limiter's pool, with the renewer of the
// permits it acquires: a pool hands a goroutine the copy last used on its
// core, so a permit's acquire and release mostly take the lock of a
// renewer that core used last, rather than one the other cores use too.
type opPlan struct {
	algo.Plan
	renewer uint8
	ids     permitid.Source // the ids of the permits it acquires
	spare   *permitState    // a released permit's, for the next acquire
	res     algo.Result     // an acquire's
}
