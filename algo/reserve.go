package algo

import (
	"fmt"
	"time"
)

// Reserving returns the plan that reserves ahead with p: a GCRA or token
// bucket that admits a cost as long as it would be admitted within wait,
// and records it, so that the caller acts when the time comes (see
// Unreserved) and later decisions see the capacity as taken. It is p's own
// algorithm with its tolerance τ grown by wait, so a cost above the
// limit's burst (TAT.Quota) must not be decided with it: the caller
// refuses it first (the Redis store's script does not look). The error
// wraps ErrUnsupported for the other kinds: a window has no notion of
// capacity taken ahead of its time.
func Reserving(p *Plan, wait time.Duration) (Plan, error) {
	t, err := p.TAT()
	if err != nil {
		return Plan{}, err
	}
	if wait < 0 || wait > MaxHorizon {
		return Plan{}, fmt.Errorf("%w: reservation wait %v is outside 0..100 years", ErrInvalid, wait)
	}
	r := *p
	r.tat.Tolerance = t.Tolerance + wait.Microseconds()
	return r, nil
}

// Unreserved turns the Result of a decision by r, a plan that
// Reserving(p, wait) made, into what it means by p: the numbers by p's
// tolerance (Remaining counts no capacity taken ahead), and how long after
// the decision an admitted cost may act: its ResetAfter less p's
// tolerance. A denial keeps its RetryAfter: when the cost would be
// admitted within wait.
func Unreserved(r *Plan, res Result, wait time.Duration, cost int64) (Result, time.Duration) {
	if res.DeniedBy == DeniedByBlock {
		return res, 0 // a block's denial is the block's, whatever the tolerance
	}
	t := r.tat
	t.Tolerance -= wait.Microseconds()
	out := t.Result(res.Allowed, 0, res.ResetAfter.Microseconds(), cost)
	if !res.Allowed {
		out.RetryAfter = res.RetryAfter
		return out, 0
	}
	return out, max(res.ResetAfter-time.Duration(t.Tolerance)*time.Microsecond, 0)
}
