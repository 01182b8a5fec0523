package sluice

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/algo"
	"github.com/sluicehq/sluice/store"
)

// An Estimate is a cost admitted before it is known, such as the tokens of
// a response estimated at its max_tokens: Settle it with the real cost
// when it is known. An estimate never settled stays counted in full.
type Estimate struct {
	l       *Limiter
	key     string
	n       int64
	res     algo.Result
	settled atomic.Bool
	// ticket is the estimate's ticket in the store (store.Settler), its
	// Key empty when none was kept; since is when the estimate was
	// counted, or where a bucket's n·T began (algo.Plan.GiveBack), µs.
	ticket store.Request
	since  int64
}

// Estimate admits an estimated cost n for key, as AllowN would at the
// store's clock but that a limit with debt (algo.Debt) records nothing
// when it denies it, and returns the Estimate: OK when admitted. An
// admitted estimate keeps a ticket in the store (store.Settler) for as
// long as what it took still counts (the Result's ResetAfter, 1ms to
// 24h), by which Settle gives back only that, where it was counted; a
// ticket the store cannot keep (the key holds store.MaxOpenTickets open)
// leaves the estimate admitted with nothing to give back. Settling needs
// a store that keeps tickets and a limit that counts both ways (any but a
// gate and concurrency slots).
func (l *Limiter) Estimate(ctx context.Context, key string, n int64) (*Estimate, error) {
	p := l.plan
	if d, ok := p.Limit().(algo.Debt); ok {
		p = algo.MustCompile(d.Limit)
	}
	if err := p.ValidateAdjust(algo.Reward, 1); err != nil {
		return nil, err
	}
	s, settles := l.st.(store.Settler)
	var now time.Time
	if settles {
		// Decided at a time the ticket names: the store's.
		now = time.Now()
		if clock, ok := l.st.(store.Clock); ok {
			var err error
			if now, err = clock.Now(ctx); err != nil {
				return nil, err
			}
		}
	}
	r, err := l.st.Decide(ctx, store.Request{Key: key, Plan: p, Cost: n, Time: now})
	if err != nil {
		return nil, err
	}
	e := &Estimate{l: l, key: key, n: n, res: r}
	e.settled.Store(!r.Allowed) // a denied estimate has nothing to settle
	if !r.Allowed || !settles {
		return e, nil
	}
	e.since = now.UnixMicro()
	if t, err := p.TAT(); err == nil && n >= 1 && n <= algo.MaxCount/t.Interval {
		// A bucket's n·T began at the TAT the estimate found.
		e.since += max(r.ResetAfter.Microseconds()-n*t.Interval, 0)
	}
	var random [16]byte
	rand.Read(random[:])
	t := store.Request{Key: key + "#estimate:" + hex.EncodeToString(random[:]), Tag: key, Time: now}
	if s.Issue(ctx, t, min(max(r.ResetAfter, store.MinTicket), store.MaxTicket)) == nil {
		e.ticket = t
	}
	return e, nil
}

// OK reports whether the estimate was admitted.
func (e *Estimate) OK() bool { return e.res.Allowed }

// Result is the decision on the estimate.
func (e *Estimate) Result() algo.Result { return e.res }

// Settle settles an admitted estimate at its real cost, once: what the
// estimate took beyond cost is given back, but only what of it still
// counts where the estimate was counted (algo.Plan.GiveBack: nothing once
// its window has ended, never to a later one), or what cost took beyond
// the estimate is recorded, past the limit if need be (a penalty), in one
// step with taking its ticket (store.Settler). Later calls, and a call on
// an estimate not OK, change nothing; as with Reservation.Cancel, a call
// that failed (it may have been applied) is not made again.
func (e *Estimate) Settle(ctx context.Context, cost int64) error {
	if cost < 0 || cost > algo.MaxCount {
		return fmt.Errorf("sluice: %w: cost %d is outside 0..%d", store.ErrBadRequest, cost, algo.MaxCount)
	}
	s, ok := e.l.st.(store.Settler)
	if !ok {
		return fmt.Errorf("sluice: %w: %T keeps no tickets to settle estimates", algo.ErrUnsupported, e.l.st)
	}
	if e.settled.Swap(true) {
		return nil
	}
	op, units := algo.Reward, e.n-cost
	if cost > e.n {
		op, units = algo.Penalize, cost-e.n
	}
	var reqs []store.Request
	if units > 0 {
		r := store.Request{Key: e.key, Plan: e.l.plan, Cost: units}
		if op == algo.Reward {
			r.Time = time.UnixMicro(e.since)
		}
		reqs = append(reqs, r)
	}
	if e.ticket.Key != "" {
		t := e.ticket
		t.Time = time.Time{} // settled now, by the store's clock
		settled, err := s.Settle(ctx, t, reqs, op)
		if err != nil || settled || op == algo.Reward {
			return err
		}
	}
	if op == algo.Reward || units == 0 {
		return nil // no ticket: nothing is given back
	}
	// The ticket has ended (what the estimate took counts no more) or was
	// never kept: the excess is usage all the same.
	a, err := e.l.adjuster()
	if err != nil {
		return err
	}
	return a.Adjust(ctx, reqs[0], op)
}
