package algo

import (
	"fmt"
	"time"
)

// FixedWindow admits at most Count per Window, counting in windows aligned
// to the Unix epoch: the window holding now ends at end = now - now%W + W.
// The state is the window's end (State.A) and its count (State.B); it
// expires at end. A decision of cost n is allowed when count+n <= Count.
// RetryAfter is end - now (Never when n > Count); ResetAfter is end - now
// while the window has a count, else 0.
//
// A clock that steps back never reopens a window: a decision at a time
// before the start of the window the state counts (State.A - W) is taken
// at that start, in that window (see at).
type FixedWindow struct {
	Count  int64
	Window time.Duration
}

// validate implements Limit. Count is at most MaxCount. A Count of 0
// admits nothing but peeks (every cost above 0 is denied, Never to be
// admitted): envoyproxy/ratelimit's requests_per_unit 0.
func (f FixedWindow) validate() error {
	if f.Count < 0 {
		return fmt.Errorf("%w: fixed_window limit must be zero or more, got %d", ErrInvalid, f.Count)
	}
	if f.Count > MaxCount {
		return fmt.Errorf("%w: fixed_window limit %d exceeds %d (2^53-1, the largest count both stores hold exactly)", ErrInvalid, f.Count, MaxCount)
	}
	return positiveSpan("fixed_window window", f.Window)
}

// windowEnd returns the end of the window that holds now.
func (f FixedWindow) windowEnd(now int64) int64 {
	w := Micros(f.Window)
	return now - now%w + w
}

// at returns the time a decision at now is taken at on s: now, or the
// start of the window s counts when now is before it (the clock stepped
// back), so that a key never returns to a window it has left.
func (f FixedWindow) at(s *State, now int64) int64 {
	return max(now, s.A-Micros(f.Window))
}

// decide implements Limit.
func (f FixedWindow) decide(s *State, now, cost int64, commit bool) Result {
	now = f.at(s, now)
	end := f.windowEnd(now)
	ok, count := f.step(s, now, end, cost, commit)
	return f.numbers(ok, now, end, count, cost).result(ok, cost)
}

// step applies a decision in the window ending at end to s: it reports
// whether the cost is admitted and the window's count after the decision.
// A state of a later window than end's (the clock stepped back) is
// decided in that window.
func (f FixedWindow) step(s *State, now, end, cost int64, commit bool) (bool, int64) {
	var count int64
	if s.A >= end {
		end, count = s.A, s.B
	}
	if cost > f.Count-count {
		return false, count
	}
	if commit && cost > 0 {
		s.A, s.B, s.Expire = end, count+cost, end
	}
	return true, count + cost
}

// Result derives a decision's Result from its outcome: count is the
// window's count after the decision.
func (f FixedWindow) Result(allowed bool, now, count, cost int64) Result {
	return f.numbers(allowed, now, f.windowEnd(now), count, cost).result(allowed, cost)
}

// numbers are the Result's numbers in the window ending at end.
func (f FixedWindow) numbers(allowed bool, now, end, count, cost int64) numbers {
	left := dur(end - now)
	n := numbers{quota: f.Count, remaining: max(f.Count-count, 0)}
	if count > 0 {
		n.reset = left
	}
	if !allowed {
		n.retry = left
		if cost > f.Count {
			n.retry = Never
		}
	}
	return n
}

var fixedWindowKind = kindInfo{
	name:     nameFixedWindow,
	stepwise: true,
	fields:   []string{"limit", "window"},
	build: func(s Spec) (Limit, error) {
		return FixedWindow{Count: s.Limit, Window: time.Duration(s.Window)}, nil
	},
	example:  FixedWindow{Count: 100, Window: 10 * time.Second},
	leasable: true,
}

// Kind implements Limit.
func (FixedWindow) Kind() Kind { return KindFixedWindow }

// Spec implements Limit.
func (f FixedWindow) Spec() Spec {
	return Spec{Algorithm: nameFixedWindow, Limit: f.Count, Window: f.Window}
}

// Quota implements Limit: Limit per Window.
func (f FixedWindow) Quota() (int64, time.Duration) { return f.Count, f.Window }

// SteadyRate implements Limit: Limit per Window.
func (f FixedWindow) SteadyRate() (int64, time.Duration) { return f.Count, f.Window }

// DeniedBy implements Limit: a fixed window has one limit.
func (FixedWindow) DeniedBy(int) string { return "" }
