package algo

import "time"

// Gate admits at most one action per Interval per key: an admitted action
// closes the gate until now + Interval (State.A, which is also the expiry).
// Limit is 1; a cost above 1 is Never admitted; a cost of 0 peeks.
type Gate struct {
	Interval time.Duration
}

// validate implements Limit.
func (g Gate) validate() error { return positiveSpan("gate interval", g.Interval) }

// step applies a decision to s: it reports whether the cost is admitted
// and when the gate opens after the decision.
func (g Gate) step(s *State, now, cost int64, commit bool) (bool, int64) {
	if cost == 0 || cost > 1 || s.A > now {
		return cost == 0, s.A
	}
	openAt := now + g.Interval.Microseconds()
	if commit {
		s.A, s.Expire = openAt, openAt
	}
	return true, openAt
}

// Result derives a decision's Result from its outcome: openAt is when the
// gate opens (again) after the decision.
func (g Gate) Result(allowed bool, now, openAt, cost int64) Result {
	return g.numbers(allowed, now, openAt, cost).result(allowed, cost)
}

// numbers are the Result's numbers.
func (g Gate) numbers(allowed bool, now, openAt, cost int64) numbers {
	n := numbers{quota: 1}
	if wait := openAt - now; wait > 0 {
		n.reset = time.Duration(wait) * time.Microsecond
	} else {
		n.remaining = 1
	}
	if !allowed {
		n.retry = n.reset
		if cost > 1 {
			n.retry = Never
		}
	}
	return n
}

var gateKind = kindInfo{
	name:     nameGate,
	stepwise: true,
	fields:   []string{"interval"},
	build:    func(s Spec) (Limit, error) { return Gate{Interval: time.Duration(s.Interval)}, nil },
	example:  Gate{Interval: 10 * time.Second},
}

// Kind implements Limit.
func (Gate) Kind() Kind { return KindGate }

// Spec implements Limit.
func (g Gate) Spec() Spec { return Spec{Algorithm: nameGate, Interval: g.Interval} }

// quota implements Limit: 1 per Interval.
func (g Gate) quota() (int64, time.Duration) { return 1, g.Interval }

// steadyRate implements Limit: 1 per Interval.
func (g Gate) steadyRate() (int64, time.Duration) { return 1, g.Interval }

// deniedBy implements Limit: a gate has one limit.
func (Gate) deniedBy(int) string { return "" }
