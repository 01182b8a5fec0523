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
//
// With a Calendar (and no Window), the windows are the calendar's: the
// day, week, month or year that holds now, in a time zone, ending at its
// next midnight there.
type FixedWindow struct {
	Count    int64
	Window   time.Duration
	Calendar Calendar
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
	if f.Calendar != (Calendar{}) {
		if f.Window != 0 {
			return fmt.Errorf("%w: fixed_window has a window of %v and a calendar's (%s): give one", ErrInvalid, f.Window, f.Calendar.Unit)
		}
		_, err := f.Calendar.compile()
		return err
	}
	return positiveSpan("fixed_window window", f.Window)
}

// WindowEnd returns the end (µs since the epoch) of the window that holds
// now: what a store that cannot compute a calendar's windows (Redis has no
// time zone data) is given.
func (f FixedWindow) WindowEnd(now int64) int64 {
	if f.Calendar != (Calendar{}) {
		_, end := f.calendar().bounds(now)
		return end
	}
	w := f.Window.Microseconds()
	return now - now%w + w
}

// WindowStart returns the start of the window that ends at end: end - W,
// or a calendar window's start.
func (f FixedWindow) WindowStart(end int64) int64 {
	if f.Calendar != (Calendar{}) {
		start, _ := f.calendar().bounds(end - 1)
		return start
	}
	return end - f.Window.Microseconds()
}

// calendar returns the compiled Calendar of a valid limit.
func (f FixedWindow) calendar() *calendar {
	c, err := f.Calendar.compile()
	if err != nil {
		panic("algo: a FixedWindow with an invalid Calendar: " + err.Error())
	}
	return c
}

// at returns the time a decision at now is taken at on s: now, or the
// start of the window s counts when now is before it (the clock stepped
// back), so that a key never returns to a window it has left.
func (f FixedWindow) at(s *State, now int64) int64 {
	if s.A == 0 {
		return now
	}
	return max(now, f.WindowStart(s.A))
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
	return f.numbers(allowed, now, f.WindowEnd(now), count, cost).result(allowed, cost)
}

// numbers are the Result's numbers in the window ending at end.
func (f FixedWindow) numbers(allowed bool, now, end, count, cost int64) numbers {
	left := time.Duration(end-now) * time.Microsecond
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
	fields:   []string{"limit", "window", "time_zone", "anchor_day", "week_start"},
	build: func(s Spec) (Limit, error) {
		f := FixedWindow{Count: s.Limit, Window: time.Duration(s.Window)}
		if s.Calendar != "" || s.TimeZone != "" || s.AnchorDay != 0 || s.WeekStart != "" {
			if s.Calendar == "" {
				return nil, fmt.Errorf("%w: time_zone, anchor_day and week_start are for a calendar window (window: day, week, month or year)", ErrInvalid)
			}
			f.Calendar = Calendar{Unit: s.Calendar, TimeZone: s.TimeZone, AnchorDay: int(s.AnchorDay), WeekStart: s.WeekStart}
		}
		return f, nil
	},
	example:  FixedWindow{Count: 100, Window: 10 * time.Second},
	leasable: true,
}

// Kind implements Limit.
func (FixedWindow) Kind() Kind { return KindFixedWindow }

// Spec implements Limit.
func (f FixedWindow) Spec() Spec {
	c := f.Calendar
	return Spec{Algorithm: nameFixedWindow, Limit: f.Count, Window: f.Window,
		Calendar: c.Unit, TimeZone: c.TimeZone, AnchorDay: int64(c.AnchorDay), WeekStart: c.WeekStart}
}

// span is the window's length: a calendar window's nominal one (1, 7, 30
// or 365 days).
func (f FixedWindow) span() time.Duration {
	if f.Calendar != (Calendar{}) {
		return f.Calendar.nominal()
	}
	return f.Window
}

// quota implements Limit: Limit per Window (a calendar window's nominal
// length).
func (f FixedWindow) quota() (int64, time.Duration) { return f.Count, f.span() }

// steadyRate implements Limit: Limit per Window.
func (f FixedWindow) steadyRate() (int64, time.Duration) { return f.Count, f.span() }

// deniedBy implements Limit: a fixed window has one limit.
func (FixedWindow) deniedBy(int) string { return "" }
