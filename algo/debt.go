package algo

import (
	"errors"
	"fmt"
	"time"
)

// Debt is a limit that records a charge in full even when it denies it:
// the charge is answered as over the limit, but its units are counted, so
// that the decisions after it are denied until the refill or the window's
// end has paid them back. It is how usage known only after the fact (the
// tokens of a response) is metered: nothing charged is lost.
//
// A recorded excess means, per kind: for gcra and token_bucket, a TAT
// moved past the limit by cost·T (at most MaxHorizon ahead of now); for
// fixed_window, a count above the limit (at most MaxCount); for
// window_counter, a slice's count that lifts its windows above their
// limits (no window above MaxCount); for a binary sliding_log, cost
// actions recorded at its clock (no window above MaxExactLimit, or
// MaxCount sampled). A gate, concurrency slots, and a nary or uniform
// log (which admits part of a cost, or records attempts itself) take no
// debt (ErrNoDebt). A denied charge that is recorded answers Remaining 0
// (what remains after it; its RetryAfter is the charge's own, before it
// was recorded). A decision of cost 0 (a peek) records nothing and is
// denied once nothing remains: while a debt remains, and when the budget
// is spent to the unit (it is decided as a cost of 1 that records
// nothing; allowed, it answers as a peek).
//
// In a decision over several levels (a policy path), a level with debt
// records the charge whatever the other levels decide; the others record
// it only when all admit it.
type Debt struct {
	Limit Limit
}

// ErrNoDebt is wrapped by the error of a debt on a kind that cannot
// record an excess.
var ErrNoDebt = errors.New("debt is for gcra, token_bucket, fixed_window, window_counter and a binary sliding_log")

// Kind implements Limit: the kind of the limit it records debt for.
func (d Debt) Kind() Kind { return d.Limit.Kind() }

// validate implements Limit.
func (d Debt) validate() error {
	_, err := Compile(d)
	return err
}

// Spec implements Limit: the limit's spec with debt: true.
func (d Debt) Spec() Spec {
	s := d.Limit.Spec()
	s.Debt = true
	return s
}

// quota implements Limit.
func (d Debt) quota() (int64, time.Duration) { return d.Limit.quota() }

// steadyRate implements Limit.
func (d Debt) steadyRate() (int64, time.Duration) { return d.Limit.steadyRate() }

// deniedBy implements Limit.
func (d Debt) deniedBy(by int) string { return d.Limit.deniedBy(by) }

// compileDebt makes p the plan of d.
func (p *Plan) compileDebt(d Debt) error {
	switch d.Limit.(type) {
	case nil:
		return errNilLimit
	case Debt:
		return fmt.Errorf("%w: a debt of a debt", ErrInvalid)
	case Blocking:
		return fmt.Errorf("%w: debt with a block: a blocked key records nothing, so a charge would be lost", ErrInvalid)
	}
	if err := p.compile(d.Limit); err != nil {
		return err
	}
	switch {
	case p.kind == KindGCRA || p.kind == KindTokenBucket || p.kind == KindFixedWindow || p.kind == KindWindowCounter:
	case p.kind == KindSlidingLog && p.sl.Mode == Binary:
	default:
		k, mode := p.kind, p.sl.Mode
		*p = Plan{}
		if k == KindSlidingLog {
			return fmt.Errorf("%w: %w, not a %v one", ErrInvalid, ErrNoDebt, mode)
		}
		return fmt.Errorf("%w: %w, not %v", ErrInvalid, ErrNoDebt, k)
	}
	// Decide records the debt: not stepwise.
	p.debt, p.stepwise = true, false
	return nil
}

// owe records a denied charge of cost on s at now: as a penalty does,
// but that a TAT moves on by cost·T to at most MaxHorizon ahead (not by
// whole steps), as the Redis store's tat.lua does.
func (p *Plan) owe(s *State, now, cost int64) {
	if p.kind == KindGCRA || p.kind == KindTokenBucket {
		t := p.tat.Interval
		tat, most := max(s.A, now), now+MaxHorizon.Microseconds()
		s.A = most
		if n := min(cost, MaxHorizon.Microseconds()/t+1); tat+n*t < most {
			s.A = tat + n*t
		}
		s.Expire = s.A
		return
	}
	if err := p.Adjust(s, now, Penalize, cost); err != nil {
		panic("algo: a debt on a plan Adjust refuses: " + err.Error())
	}
}
