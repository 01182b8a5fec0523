package sluice

import (
	"context"
	"fmt"
	"sync/atomic"

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
}

// Estimate admits an estimated cost n for key, as AllowN would at the
// store's clock but that a limit with debt (algo.Debt) records nothing
// when it denies it, and returns the Estimate: OK when admitted. Settling
// needs a store that changes keys outside a request (store.Adjuster) and a
// limit that counts both ways (any but a gate and concurrency slots).
func (l *Limiter) Estimate(ctx context.Context, key string, n int64) (*Estimate, error) {
	p := l.plan
	if d, ok := p.Limit().(algo.Debt); ok {
		p = algo.MustCompile(d.Limit)
	}
	if err := p.ValidateAdjust(algo.Reward, 1); err != nil {
		return nil, err
	}
	r, err := l.st.Decide(ctx, store.Request{Key: key, Plan: p, Cost: n})
	if err != nil {
		return nil, err
	}
	e := &Estimate{l: l, key: key, n: n, res: r}
	e.settled.Store(!r.Allowed) // a denied estimate has nothing to settle
	return e, nil
}

// OK reports whether the estimate was admitted.
func (e *Estimate) OK() bool { return e.res.Allowed }

// Result is the decision on the estimate.
func (e *Estimate) Result() algo.Result { return e.res }

// Settle settles an admitted estimate at its real cost, once: what the
// estimate took beyond cost is given back (a reward), or what cost took
// beyond the estimate is recorded, past the limit if need be (a penalty).
// Later calls, and a call on an estimate not OK, change nothing; as with
// Reservation.Cancel, a call that failed (it may have been applied) is not
// made again.
func (e *Estimate) Settle(ctx context.Context, cost int64) error {
	if cost < 0 || cost > algo.MaxCount {
		return fmt.Errorf("sluice: %w: cost %d is outside 0..%d", store.ErrBadRequest, cost, algo.MaxCount)
	}
	a, err := e.l.adjuster()
	if err != nil {
		return err
	}
	if e.settled.Swap(true) || cost == e.n {
		return nil
	}
	op, units := algo.Reward, e.n-cost
	if cost > e.n {
		op, units = algo.Penalize, cost-e.n
	}
	return a.Adjust(ctx, store.Request{Key: e.key, Plan: e.l.plan, Cost: units}, op)
}
