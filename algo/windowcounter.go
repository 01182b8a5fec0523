package algo

import (
	"fmt"
	"time"
)

// defaultSlice is a WindowCounter's slice when Slice is zero.
const defaultSlice = time.Second

// WindowCounter is the per-time-slice counter pattern: one counter per
// slice of time (Slice, default 1s, aligned to the epoch), and one
// decision checks several windows at once, such as at most 1000 in the
// last 1s, 5000 in the last 10s and 7000 in the last 15s.
//
// Each window W_i is a whole number m_i = W_i/Slice of slices. At time now,
// in slice cur = ⌊now/Slice⌋, window i counts the m_i slices ending with
// the current one:
//
//	c_i = Σ count[k] for k in (cur - m_i, cur]
//
// so a window is between W_i - Slice and W_i long, the approximation of
// the pattern. A decision of cost n admits n when c_i + n ≤ L_i for every
// i and then adds n to the current slice; otherwise it records nothing (a
// Debt records n all the same). A peek (n = 0) is denied while a count is
// above its limit.
// A counter's clock does not go back: a decision in a slice earlier than
// the latest recorded one is counted in the latest.
//
// Allowed is Admitted == n; Limit is min_i L_i; Remaining is
// min_i (L_i - c'_i) over the counts after the decision, floored at 0.
// RetryAfter is Never when n > L_i for some i; else, for every window with
// c_i + n > L_i, the time its (L_i-n+1)-th newest action leaves it —
// slice k leaves window i at (k + m_i)·Slice — and the latest of those;
// DeniedBy names that window (the first on ties). ResetAfter is how long
// until the newest recorded slice has left the longest window, when the
// state expires.
type WindowCounter struct {
	// Slice is the counting granularity; 0 means 1s.
	Slice time.Duration
	// Limits are checked together; at least one, at most MaxWindows. Each
	// window must be a whole number of slices, at most MaxSlices.
	Limits []Window
}

// SliceMicros is the slice in µs.
func (wc WindowCounter) SliceMicros() int64 {
	if wc.Slice == 0 {
		return defaultSlice.Microseconds()
	}
	return wc.Slice.Microseconds()
}

// Slices returns window i's length in slices.
func (wc WindowCounter) Slices(i int) int64 {
	return wc.Limits[i].Window.Microseconds() / wc.SliceMicros()
}

// maxSlices returns the longest window's length in slices.
func (wc WindowCounter) maxSlices() int64 {
	var m int64
	for i := range wc.Limits {
		m = max(m, wc.Slices(i))
	}
	return m
}

// minLimit is the smallest of the limits: Result.Limit.
func (wc WindowCounter) minLimit() int64 { return minLimit(wc.Limits) }

// RecordedReset is Outcome.Reset after a decision at now that recorded a
// count, given the latest slice with a count before it (hasLatest false
// when there is none): when that slice leaves the longest window.
func (wc WindowCounter) RecordedReset(now, latest int64, hasLatest bool) int64 {
	sl := wc.SliceMicros()
	cur := now / sl
	if hasLatest {
		cur = max(cur, latest)
	}
	return (cur + wc.maxSlices()) * sl
}

// validate implements Limit.
func (wc WindowCounter) validate() error {
	if wc.Slice != 0 {
		if err := positiveSpan("window_counter slice", wc.Slice); err != nil {
			return err
		}
	}
	if err := validateWindows("window_counter", wc.Limits); err != nil {
		return err
	}
	s := wc.SliceMicros()
	for i, w := range wc.Limits {
		if w.Window.Microseconds()%s != 0 || w.Window%time.Microsecond != 0 {
			return fmt.Errorf("%w: window_counter limits[%d]: window %v is not a whole number of %v slices", ErrInvalid, i, w.Window, time.Duration(s)*time.Microsecond)
		}
		if m := w.Window.Microseconds() / s; m > maxSlices {
			return fmt.Errorf("%w: window_counter limits[%d]: window %v holds %d slices of %v, more than %d", ErrInvalid, i, w.Window, m, time.Duration(s)*time.Microsecond, maxSlices)
		}
	}
	return nil
}

// decide applies a decision of cost at now to s (a Plan's decide).
// State.A is the latest slice with a recorded count, and State.Log the
// ring of the M = MaxSlices() latest slices' counts: slice k at k mod M,
// for k in (A-M, A].
func (wc WindowCounter) decide(s *State, now, cost int64, commit bool) Result {
	sl := wc.SliceMicros()
	m := wc.maxSlices()
	valid := int64(len(s.Log)) == m
	cur, c := wc.counts(s, now)
	// A count above its limit (a debt, or a limit lowered) denies even a
	// peek.
	fits := true
	for i, w := range wc.Limits {
		if c[i]+cost > w.Count {
			fits = false
		}
	}
	o := Outcome{}
	if fits && cost > 0 {
		o.Admitted = cost
		for i := range wc.Limits {
			c[i] += cost
		}
		o.Reset = wc.RecordedReset(now, s.A, valid)
	} else if valid {
		o.Reset = (s.A + m) * sl
	}
	o.Remaining = remaining(wc.Limits, &c)
	if !fits {
		for i, w := range wc.Limits {
			if cost > w.Count {
				o.Wait, o.DeniedBy = -1, i+1
				break
			}
			if c[i]+cost <= w.Count {
				continue
			}
			// Walk back from the newest slice until more than L_i - n
			// actions are newer: that slice must leave the window.
			mi := wc.Slices(i)
			var acc int64
			for k := s.A; k > cur-mi; k-- {
				acc += s.Log[k%m]
				if acc > w.Count-cost {
					if t := (k + mi) * sl; t > o.Wait {
						o.Wait, o.DeniedBy = t, i+1
					}
					break
				}
			}
		}
	}
	if commit && o.Admitted > 0 {
		wc.add(s, cur, cost)
	}
	return o.Result(now, cost, wc.minLimit(), true)
}

// counts returns the slice a decision at now counts in (the latest
// recorded one when later: the clock stepped back) and each window's
// count at it.
func (wc WindowCounter) counts(s *State, now int64) (cur int64, c [maxWindows]int64) {
	m := wc.maxSlices()
	cur = now / wc.SliceMicros()
	if int64(len(s.Log)) != m {
		return cur, c
	}
	cur = max(cur, s.A)
	for i := range wc.Limits {
		for k := max(cur-wc.Slices(i)+1, s.A-m+1); k <= s.A; k++ {
			c[i] += s.Log[k%m]
		}
	}
	return cur, c
}

// add records n in slice cur (from counts), clearing the slices between
// the latest recorded one and cur.
func (wc WindowCounter) add(s *State, cur, n int64) {
	m := wc.maxSlices()
	if int64(len(s.Log)) != m {
		s.Log = grow(s.Log[:0], int(m))
		clear(s.Log)
	} else if cur-s.A >= m {
		clear(s.Log)
	} else {
		for k := s.A + 1; k <= cur; k++ {
			s.Log[k%m] = 0
		}
	}
	s.Log[cur%m] += n
	s.A, s.Expire = cur, (cur+m)*wc.SliceMicros()
}

// penalize records n more at now, past the limits if need be, with no
// window's count above MaxCount.
func (wc WindowCounter) penalize(s *State, now, n int64) {
	cur, c := wc.counts(s, now)
	for i := range wc.Limits {
		n = min(n, MaxCount-c[i])
	}
	if n > 0 {
		wc.add(s, cur, n)
	}
}

// reward gives back n, taken from the newest slices first, never below
// an empty state.
func (wc WindowCounter) reward(s *State, n int64) {
	m := wc.maxSlices()
	if int64(len(s.Log)) != m {
		return
	}
	for k := s.A; k > s.A-m && n > 0; k-- {
		take := min(s.Log[k%m], n)
		s.Log[k%m] -= take
		n -= take
	}
	for _, v := range s.Log {
		if v != 0 {
			return
		}
	}
	*s = State{Log: s.Log[:0], Shape: s.Shape, Block: s.Block}
}

var windowCounterKind = kindInfo{
	name:   nameWindowCounter,
	fields: []string{"slice", "limits"},
	build: func(s Spec) (Limit, error) {
		if s.Slice < 0 {
			return nil, fmt.Errorf("%w: window_counter slice must be positive, got %v", ErrInvalid, time.Duration(s.Slice))
		}
		return WindowCounter{Slice: time.Duration(s.Slice), Limits: s.Limits.windows()}, nil
	},
	example: WindowCounter{Limits: []Window{{Count: 1000, Window: time.Second}, {Count: 5000, Window: 10 * time.Second}}},
}

// Kind implements Limit.
func (WindowCounter) Kind() Kind { return KindWindowCounter }

// Spec implements Limit.
func (wc WindowCounter) Spec() Spec {
	return Spec{Algorithm: nameWindowCounter, Slice: wc.Slice, Limits: windowSpecs(wc.Limits)}
}

// quota implements Limit: the smallest limit, in its window.
func (wc WindowCounter) quota() (int64, time.Duration) { return windowsQuota(wc.Limits) }

// steadyRate implements Limit: the limit with the lowest rate.
func (wc WindowCounter) steadyRate() (int64, time.Duration) { return windowsRate(wc.Limits) }

// deniedBy implements Limit: the name or window of limit by-1.
func (wc WindowCounter) deniedBy(by int) string { return windowsDeniedBy(wc.Limits, by) }

// giveBack takes at most n from the slice of since, while it is in the
// ring and in the longest window at now (GiveBack).
func (wc WindowCounter) giveBack(s *State, now, since, n int64) {
	m := wc.maxSlices()
	k := since / wc.SliceMicros()
	if int64(len(s.Log)) != m || k > s.A || k <= max(s.A, now/wc.SliceMicros())-m {
		return
	}
	s.Log[k%m] -= min(s.Log[k%m], n)
	for _, v := range s.Log {
		if v != 0 {
			return
		}
	}
	*s = State{Log: s.Log[:0], Shape: s.Shape, Block: s.Block}
}
