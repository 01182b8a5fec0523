package algo

import (
	"fmt"
	"time"
)

// Mode says what a SlidingLog does with a cost that does not fit.
type Mode int

// The modes, from the most to the least lenient towards a caller over its
// limit. Binary is the zero Mode.
const (
	// Binary admits the whole cost or none of it; a rejected attempt is
	// not recorded.
	Binary Mode = iota
	// Nary admits as much of the cost as fits (Result.Admitted); what does
	// not fit is not recorded. In a DecideAll of several requests a nary
	// log acts as Binary, since the batch is all or nothing (InBatch).
	Nary
	// Uniform records every attempt, also a rejected one, so that a caller
	// who keeps hammering stays locked out; the cost itself is admitted
	// whole or not at all, as in Binary.
	Uniform
)

// String returns the mode's name as used in Spec.Mode.
func (m Mode) String() string {
	switch m {
	case Binary:
		return "binary"
	case Nary:
		return "nary"
	case Uniform:
		return "uniform"
	}
	return fmt.Sprintf("Mode(%d)", int(m))
}

// parseMode returns the mode that s names; "" is Binary.
func parseMode(s string) (Mode, error) {
	switch s {
	case "", "binary":
		return Binary, nil
	case "nary":
		return Nary, nil
	case "uniform":
		return Uniform, nil
	}
	return 0, fmt.Errorf("%w: unknown sliding_log mode %q (want binary, nary or uniform)", ErrInvalid, s)
}

// Window is one limit of a SlidingLog or a WindowCounter: at most Limit in
// any Window.
type Window struct {
	// Name optionally names the limit in reports (sluice replay's
	// denied_by); the algorithms ignore it.
	Name   string
	Count  int64
	Window time.Duration
}

// Bounds of the windowed algorithms, which keep them cheap per decision
// and their counters exact in the Redis store's Lua numbers.
const (
	// maxWindows is the most limits (windows) one SlidingLog or
	// WindowCounter takes.
	maxWindows = 16
	// MaxWindowLimit bounds every limit of a SlidingLog or WindowCounter.
	MaxWindowLimit = 1_000_000_000
	// MaxExactLimit bounds the limits of an exact SlidingLog (no
	// Buckets), which keeps one entry per action.
	MaxExactLimit = 1_000_000
	// MaxExactCost bounds the cost of one decision on an exact SlidingLog,
	// which records one entry per action, so that a decision's work stays
	// small (a cost of 10,000 is one 11 ms script on Redis; 1,000,000 once
	// ran 1.6 s, stalling Redis). See Plan.MaxCost.
	MaxExactCost = 10_000
	// maxBuckets bounds SlidingLog.Buckets, and MaxSlices the slices in a
	// WindowCounter's longest window.
	maxBuckets = 10_000
	maxSlices  = 10_000
)

// SlidingLog counts every action in rolling windows and admits a cost
// of n actions while, for every limit i, the actions in the last Windows[i] plus n
// stay within Limit[i], all limits evaluated together in one atomic step.
//
// # Exact log
//
// Without Buckets, the log keeps the time t of every recorded action (a
// cost of n records n actions). An action counts in limit i while
// now - t < W_i, so at time now limit i counts
//
//	c_i = #{recorded t : t > now - W_i}
//
// Entries older than the longest window are dropped.
//
// # Sampled log (Buckets = B)
//
// With Buckets, limit i counts in buckets of width w_i = ⌈W_i/B⌉ µs
// aligned to the epoch, and keeps the B+1 newest: memory per key is
// bounded by B, not by the traffic. An action at t falls in bucket
// k = ⌊t/w_i⌋ and counts while now < (k+B+1)·w_i, never earlier than
// t + W_i (since B·w_i ≥ W_i) and less than 2·w_i later: the sampling
// denies a little more than the exact log, never less.
//
// A log's clock does not go back: a decision whose time is earlier than
// the newest recorded action is taken (and recorded) at that action's
// time, so that what a later time dropped is never needed again. Durations
// in the Result stay relative to the decision's own time.
//
// # Decision
//
// A decision of cost n at time now, with c_i the counts before it and
// last the time of the newest recorded action:
//
//   - the gap is kept when there is no recorded action, n = 0, MinGap = 0
//     or now - last ≥ MinGap (the gap is between recorded decisions: the
//     actions of one decision share one time);
//   - Binary and Uniform admit n when the gap is kept and c_i + n ≤ L_i
//     for every i, else 0; Nary admits min(n, min_i(L_i - c_i)), at least
//     0, when the gap is kept, else 0;
//   - Binary and Nary record what they admit; Uniform records every
//     attempt of n > 0, admitted or not (an exact log records at most
//     max_i L_i of one attempt: more could never be admitted and would
//     change nothing but how negative Remaining gets).
//
// Allowed is Admitted == n (a peek, n = 0, records nothing, and is
// allowed unless a count is above its limit: a debt, a uniform log's
// attempts); Limit is min_i L_i; Remaining is min_i (L_i - c'_i) with c'_i
// the counts after the decision, floored at 0 except in Uniform.
//
// RetryAfter ("wait") is 0 when allowed, Never when n > L_i for some i,
// and else the time after which the same cost is admitted in full if
// nothing else happens meanwhile, computed on the state after the
// decision (so it includes a recorded uniform attempt or a nary partial
// admission): the latest of last' + MinGap (when the gap matters) and, for
// every limit with c'_i + n > L_i, the time its (L_i-n+1)-th newest
// action leaves the window (exact: t + W_i; sampled: (k+B+1)·w_i of its
// bucket). DeniedBy names the constraint with the latest of those times
// (limits before the gap on ties). ResetAfter is how long until every
// recorded action has left every window (0 when none is left). The state
// expires then too.
type SlidingLog struct {
	// Limits are evaluated together; at least one, at most MaxWindows.
	Limits []Window
	// MinGap is the least time between two recorded decisions (0: none).
	// It may not exceed the longest window.
	MinGap time.Duration
	// Buckets, when positive, samples each window in that many buckets
	// (at most MaxBuckets); 0 keeps an exact log.
	Buckets int64
	Mode    Mode
}

// validate implements Limit.
func (l SlidingLog) validate() error {
	if err := validateWindows("sliding_log", l.Limits); err != nil {
		return err
	}
	wmax := l.maxWindow()
	switch {
	case l.MinGap < 0:
		return fmt.Errorf("%w: sliding_log min_gap must be zero or more, got %v", ErrInvalid, l.MinGap)
	case l.MinGap > 0 && l.MinGap < time.Microsecond:
		return fmt.Errorf("%w: sliding_log min_gap %v is below the 1µs resolution", ErrInvalid, l.MinGap)
	case Micros(l.MinGap) > wmax:
		return fmt.Errorf("%w: sliding_log min_gap %v is longer than the longest window %v", ErrInvalid, l.MinGap, dur(wmax))
	case l.Buckets < 0:
		return fmt.Errorf("%w: sliding_log buckets must be positive (or 0 for an exact log), got %d", ErrInvalid, l.Buckets)
	case l.Buckets > maxBuckets:
		return fmt.Errorf("%w: sliding_log buckets %d exceed %d", ErrInvalid, l.Buckets, maxBuckets)
	case l.Mode < Binary || l.Mode > Uniform:
		return fmt.Errorf("%w: sliding_log mode %d is not binary, nary or uniform", ErrInvalid, int(l.Mode))
	}
	if l.Buckets == 0 {
		for _, w := range l.Limits {
			if w.Count > MaxExactLimit {
				return fmt.Errorf("%w: sliding_log limit %d exceeds %d for an exact log, which keeps one entry per action (set buckets)", ErrInvalid, w.Count, MaxExactLimit)
			}
		}
	}
	return nil
}

func validateWindows(name string, ws []Window) error {
	if len(ws) == 0 {
		return fmt.Errorf("%w: %s needs at least one limit", ErrInvalid, name)
	}
	if len(ws) > maxWindows {
		return fmt.Errorf("%w: %s has %d limits, more than %d", ErrInvalid, name, len(ws), maxWindows)
	}
	for i, w := range ws {
		if w.Count <= 0 {
			return fmt.Errorf("%w: %s limits[%d]: limit must be positive, got %d", ErrInvalid, name, i, w.Count)
		}
		if w.Count > MaxWindowLimit {
			return fmt.Errorf("%w: %s limits[%d]: limit %d exceeds %d", ErrInvalid, name, i, w.Count, MaxWindowLimit)
		}
		if w.Window < time.Microsecond || w.Window > MaxHorizon {
			return positiveSpan(fmt.Sprintf("%s limits[%d] window", name, i), w.Window)
		}
	}
	return nil
}

func (l SlidingLog) maxWindow() int64 {
	var m int64
	for _, w := range l.Limits {
		m = max(m, Micros(w.Window))
	}
	return m
}

// MaxWindow is the longest of the windows.
func (l SlidingLog) MaxWindow() time.Duration { return dur(l.maxWindow()) }

// RecordedReset is Outcome.Reset after a decision at now that recorded
// something, given the log's clock before it: the time of the newest
// recorded action (hasClock false when there is none).
func (l SlidingLog) RecordedReset(now, clock int64, hasClock bool) int64 {
	e := now
	if hasClock {
		e = max(now, clock)
	}
	if l.Buckets == 0 {
		return e + l.maxWindow()
	}
	var reset int64
	for i := range l.Limits {
		w := l.BucketWidth(i)
		reset = max(reset, (e/w+l.Buckets+1)*w)
	}
	return reset
}

// minLimit is the smallest of the limits: Result.Limit.
func (l SlidingLog) minLimit() int64 { return minLimit(l.Limits) }

// MaxLimit is the largest of the limits, which bounds what one attempt
// records.
func (l SlidingLog) MaxLimit() int64 {
	var m int64
	for _, w := range l.Limits {
		m = max(m, w.Count)
	}
	return m
}

func minLimit(ws []Window) int64 {
	m := ws[0].Count
	for _, w := range ws[1:] {
		m = min(m, w.Count)
	}
	return m
}

// BucketWidth is the width in µs of limit i's buckets: ⌈W_i/Buckets⌉.
func (l SlidingLog) BucketWidth(i int) int64 {
	w := Micros(l.Limits[i].Window)
	return (w + l.Buckets - 1) / l.Buckets
}

// Outcome is what a SlidingLog or WindowCounter decision found, in
// absolute times; Result turns it into a Result. The Redis store's script
// computes the same values.
type Outcome struct {
	Admitted int64
	// Remaining is min_i (L_i - c'_i) over the counts after the decision.
	Remaining int64
	// Wait is the time (µs) from which the same cost is admitted in full:
	// 0 when allowed, -1 when never.
	Wait int64
	// Reset is the time (µs) when every recorded action has left every
	// window (0 when nothing is recorded).
	Reset    int64
	DeniedBy int
}

// Result derives the decision's Result. limit is Result.Limit; floor
// floors Remaining at 0.
func (o Outcome) Result(now, cost, limit int64, floor bool) Result {
	// A peek (cost 0) is denied when it must wait: a count above a limit
	// (a debt, or a limit lowered).
	r := Result{Allowed: o.Admitted == cost && (cost > 0 || o.Wait == 0), Quota: limit, Remaining: o.Remaining, Admitted: o.Admitted}
	if floor && r.Remaining < 0 {
		r.Remaining = 0
	}
	if o.Reset > now {
		r.ResetAfter = dur(o.Reset - now)
	}
	if !r.Allowed {
		r.DeniedBy = o.DeniedBy
		if o.Wait < 0 {
			r.RetryAfter = Never
		} else {
			r.RetryAfter = dur(o.Wait - now)
		}
	}
	return r
}

// decide applies a decision of cost at now to s (a Plan's decide).
//
// The exact log keeps State.Log[State.B:] (State.B counts dropped entries
// not yet compacted away): the recorded times, ascending, one per action.
// The sampled log keeps State.A, the time of the newest recorded action
// (its clock), and in State.Log limit i's B+1 bucket counters at
// i·(B+1) + k mod (B+1) for the buckets k in (⌊A/w_i⌋-B-1, ⌊A/w_i⌋], then
// the K sums of those counters, so that a decision costs O(K) plus the
// buckets it moves past.
func (l SlidingLog) decide(s *State, now, cost int64, commit bool) Result {
	var o Outcome
	if l.Buckets > 0 {
		o = l.decideSampled(s, now, cost, commit)
	} else {
		o = l.decideExact(s, now, cost, commit)
	}
	return o.Result(now, cost, l.minLimit(), l.Mode != Uniform)
}

// admit applies the decision rule to the counts c (before the decision):
// what is admitted and what is recorded.
func (l SlidingLog) admit(c *[maxWindows]int64, cost int64, gapOK bool) (admitted, record int64) {
	if cost == 0 {
		return 0, 0
	}
	fits, room := true, cost
	for i, w := range l.Limits {
		if c[i]+cost > w.Count {
			fits = false
		}
		room = min(room, w.Count-c[i])
	}
	switch l.Mode {
	case Nary:
		if gapOK {
			admitted = max(room, 0)
		}
		return admitted, admitted
	case Uniform:
		if fits && gapOK {
			admitted = cost
		}
		return admitted, min(cost, l.MaxLimit())
	default:
		if fits && gapOK {
			admitted = cost
		}
		return admitted, admitted
	}
}

// wait fills o.Wait and o.DeniedBy for a decision that was not allowed,
// from the counts after it (c) and, for each limit that does not fit,
// leave(i): the time its (L_i-n+1)-th newest action leaves the window.
// gapAt is when the gap is kept again (0 when it does not matter).
func (l SlidingLog) wait(o *Outcome, c *[maxWindows]int64, cost, gapAt int64, leave func(i int, j int64) int64) {
	for i, w := range l.Limits {
		if cost > w.Count {
			o.Wait, o.DeniedBy = -1, i+1
			return
		}
	}
	for i, w := range l.Limits {
		if c[i]+cost > w.Count {
			if t := leave(i, w.Count-cost+1); t > o.Wait {
				o.Wait, o.DeniedBy = t, i+1
			}
		}
	}
	if gapAt > o.Wait {
		o.Wait, o.DeniedBy = gapAt, DeniedByGap
	}
}

// remaining returns min_i (L_i - c_i).
func remaining(ws []Window, c *[maxWindows]int64) int64 {
	r := ws[0].Count - c[0]
	for i, w := range ws[1:] {
		r = min(r, w.Count-c[i+1])
	}
	return r
}

func (l SlidingLog) decideExact(s *State, now, cost int64, commit bool) Outcome {
	live := l.live(s)
	hasLast := len(live) > 0
	var last int64
	e := now // the log's clock
	if hasLast {
		last = live[len(live)-1]
		e = max(now, last)
	}
	var c [maxWindows]int64
	for i, w := range l.Limits {
		c[i] = int64(len(live) - firstAfter(live, e-Micros(w.Window)))
	}
	gap := Micros(l.MinGap)
	gapOK := !hasLast || gap == 0 || e-last >= gap
	admitted, record := l.admit(&c, cost, gapOK)
	// The j-th newest action of the log after the decision: the log plus
	// record actions at e, its newest.
	o := l.outcome(&c, now, e, last, hasLast, cost, admitted, record, func(i int, j int64) int64 {
		t := e
		if j > record {
			t = live[int64(len(live))-(j-record)]
		}
		return t + Micros(l.Limits[i].Window)
	})
	if commit && record > 0 {
		l.recordExact(s, e, record, l.maxWindow())
	}
	return o
}

// outcome is the Outcome of a decision that admitted admitted of cost and
// records record actions at the log's clock e, on the counts c before it
// (then after it), the log's newest action at clock if hasClock: its
// reset, remaining and, when it is denied or over a limit, its wait, where
// leave(i, j) is when the j-th newest action after it leaves limit i's
// window.
func (l SlidingLog) outcome(c *[maxWindows]int64, now, e, clock int64, hasClock bool, cost, admitted, record int64, leave func(i int, j int64) int64) Outcome {
	o := Outcome{Admitted: admitted}
	if record > 0 {
		for i := range l.Limits {
			c[i] += record
		}
		o.Reset = l.RecordedReset(now, clock, hasClock)
		clock, hasClock = e, true
	} else if hasClock {
		o.Reset = l.RecordedReset(clock, clock, true)
	}
	o.Remaining = remaining(l.Limits, c)
	if admitted != cost || l.over(c) {
		var gapAt int64
		if gap := Micros(l.MinGap); gap > 0 && hasClock && cost > 0 { // a peek keeps no gap
			gapAt = clock + gap
		}
		l.wait(&o, c, cost, gapAt, leave)
	}
	return o
}

// recordExact drops the entries older than every window and appends n
// entries at e (no earlier than the newest), reusing Log's capacity.
func (l SlidingLog) recordExact(s *State, e, n, wmax int64) {
	if s.B < 0 || s.B > int64(len(s.Log)) {
		s.Log, s.B = s.Log[:0], 0
	}
	s.B += int64(firstAfter(s.Log[s.B:], e-wmax))
	if s.B > 0 && (2*s.B >= int64(len(s.Log)) || int64(len(s.Log))+n > int64(cap(s.Log))) {
		s.Log = s.Log[:copy(s.Log, s.Log[s.B:])]
		s.B = 0
	}
	old := len(s.Log)
	s.Log = grow(s.Log, int(n))
	for j := old; j < len(s.Log); j++ {
		s.Log[j] = e
	}
	s.Expire = e + wmax
}

// grow extends xs by n elements (of unspecified value), reallocating only
// when the capacity is short.
func grow(xs []int64, n int) []int64 {
	if need := len(xs) + n; need > cap(xs) {
		nx := make([]int64, len(xs), max(need, 2*cap(xs)))
		copy(nx, xs)
		xs = nx
	}
	return xs[:len(xs)+n]
}

// firstAfter returns the index of the first element of the ascending xs
// greater than v (len(xs) when none is).
func firstAfter(xs []int64, v int64) int {
	lo, hi := 0, len(xs)
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if xs[m] > v {
			hi = m
		} else {
			lo = m + 1
		}
	}
	return lo
}

func (l SlidingLog) decideSampled(s *State, now, cost int64, commit bool) Outcome {
	b := l.Buckets
	r, _, valid := l.layout(s)
	e, c := l.sampledCounts(s, now)
	gap := Micros(l.MinGap)
	gapOK := !valid || gap == 0 || e-s.A >= gap
	admitted, record := l.admit(&c, cost, gapOK)
	// Walk limit i's buckets from the newest after the decision down to the
	// oldest counted one, until more than L_i - n are newer.
	o := l.outcome(&c, now, e, s.A, valid, cost, admitted, record, func(i int, j int64) int64 {
		w := l.BucketWidth(i)
		cur := e / w
		top := cur
		if record == 0 {
			top = s.A / w
		}
		var acc int64
		for kb := top; kb >= cur-b; kb-- {
			if record > 0 && kb == cur {
				acc += record
			}
			if valid && kb <= s.A/w && kb > s.A/w-r {
				acc += s.Log[int64(i)*r+kb%r]
			}
			if acc >= j {
				return (kb + r) * w
			}
		}
		panic("unreachable: the counts say the bucket exists")
	})
	if commit && record > 0 {
		l.recordSampled(s, e, record, &c)
		s.Expire = o.Reset
	}
	return o
}

// layout returns a sampled log's ring of r = Buckets+1 buckets a limit,
// its k limits, and whether s holds them: k rings, then k running sums.
func (l SlidingLog) layout(s *State) (r, k int64, ok bool) {
	r, k = l.Buckets+1, int64(len(l.Limits))
	return r, k, int64(len(s.Log)) == k*r+k
}

// sampledCounts returns a sampled log's clock for a decision at now
// (e = max(now, A)) and each limit's count at e: limit i's buckets in
// [cur_i-B, a_i] (a_i ≤ cur_i), its running sum over the ring
// (a_i-B-1, a_i] less the buckets that leave when the ring moves to
// cur_i, which sit in the fields of (a_i, cur_i].
func (l SlidingLog) sampledCounts(s *State, now int64) (e int64, c [maxWindows]int64) {
	r, k, ok := l.layout(s)
	if !ok {
		return now, c
	}
	e = max(now, s.A)
	for i := range l.Limits {
		w := l.BucketWidth(i)
		cur, a := e/w, s.A/w
		if cur-a >= r {
			continue
		}
		ring := s.Log[int64(i)*r : int64(i+1)*r]
		c[i] = s.Log[k*r+int64(i)]
		for kb := a + 1; kb <= cur; kb++ {
			c[i] -= ring[kb%r]
		}
	}
	return e, c
}

// recordSampled records n actions at the clock e in a sampled log whose
// counts after them are c, moving each limit's ring on to e's bucket; the
// caller sets Expire.
func (l SlidingLog) recordSampled(s *State, e, n int64, c *[maxWindows]int64) {
	r, k, valid := l.layout(s)
	if !valid {
		s.Log = grow(s.Log[:0], int(k*r+k))
		clear(s.Log)
	}
	for i := range l.Limits {
		w := l.BucketWidth(i)
		cur := e / w
		ring := s.Log[int64(i)*r : int64(i+1)*r]
		if a := s.A / w; valid && cur > a {
			if cur-a >= r {
				clear(ring)
			} else {
				for kb := a + 1; kb <= cur; kb++ {
					ring[kb%r] = 0
				}
			}
		}
		ring[cur%r] += n
		s.Log[k*r+int64(i)] = c[i]
	}
	s.A = e
}

// penalize records n actions at now, past the limits if need be (a debt,
// a penalty): at the log's clock, never before its newest action, with no
// window counting more than MaxExactLimit (exact) or MaxCount (sampled).
func (l SlidingLog) penalize(s *State, now, n int64) {
	most := MaxCount
	var e int64
	var c [maxWindows]int64
	if l.Buckets > 0 {
		e, c = l.sampledCounts(s, now)
	} else {
		most = MaxExactLimit
		live := l.live(s)
		e = now
		if len(live) > 0 {
			e = max(now, live[len(live)-1])
		}
		for i, w := range l.Limits {
			c[i] = int64(len(live) - firstAfter(live, e-Micros(w.Window)))
		}
	}
	for i := range l.Limits {
		n = min(n, most-c[i])
	}
	if n <= 0 {
		return
	}
	if l.Buckets == 0 {
		l.recordExact(s, e, n, l.maxWindow())
		return
	}
	_, _, valid := l.layout(s)
	for i := range l.Limits {
		c[i] += n
	}
	prev := s.A
	l.recordSampled(s, e, n, &c)
	s.Expire = l.RecordedReset(now, prev, valid)
}

// reward removes n recorded actions, the newest first, never below an
// empty log: entries of an exact log; from each limit's buckets, newest
// first, in a sampled one (whose clock stays).
func (l SlidingLog) reward(s *State, n int64) {
	if l.Buckets == 0 {
		live := l.live(s)
		k := min(n, int64(len(live)))
		s.Log = s.Log[:int64(len(s.Log))-k]
		l.trimmed(s)
		return
	}
	r, _, ok := l.layout(s)
	if !ok {
		return
	}
	for i := range l.Limits {
		a := s.A / l.BucketWidth(i)
		left := n
		for kb := a; kb > a-r && left > 0; kb-- {
			left -= l.untake(s, i, kb, left)
		}
	}
}

// over reports whether a count is above its limit (a debt, a uniform
// log's attempts, a limit lowered): then a peek is denied, and waits.
func (l SlidingLog) over(c *[maxWindows]int64) bool {
	for i, w := range l.Limits {
		if c[i] > w.Count {
			return true
		}
	}
	return false
}

// live returns an exact log's entries that are not dropped.
func (l SlidingLog) live(s *State) []int64 {
	if s.B >= 0 && s.B <= int64(len(s.Log)) {
		return s.Log[s.B:]
	}
	return s.Log
}

var slidingLogKind = kindInfo{
	name:   nameSlidingLog,
	fields: []string{"limits", "min_gap", "buckets", "mode"},
	build: func(s Spec) (Limit, error) {
		mode, err := parseMode(s.Mode)
		if err != nil {
			return nil, err
		}
		l := SlidingLog{Limits: s.Limits.windows(), MinGap: time.Duration(s.MinGap), Mode: mode}
		if s.Buckets != nil {
			if *s.Buckets <= 0 {
				return nil, fmt.Errorf("%w: sliding_log buckets must be positive, got %d (leave it out for an exact log)", ErrInvalid, *s.Buckets)
			}
			l.Buckets = *s.Buckets
		}
		return l, nil
	},
	example: SlidingLog{Limits: []Window{{Count: 10, Window: time.Second}, {Name: "hour", Count: 1000, Window: time.Hour}}, MinGap: 10 * time.Millisecond},
}

// Kind implements Limit.
func (SlidingLog) Kind() Kind { return KindSlidingLog }

// Spec implements Limit. The mode is left out when it is Binary.
func (l SlidingLog) Spec() Spec {
	s := Spec{Algorithm: nameSlidingLog, Limits: windowSpecs(l.Limits), MinGap: l.MinGap}
	if l.Buckets > 0 {
		b := l.Buckets
		s.Buckets = &b
	}
	if l.Mode != Binary {
		s.Mode = l.Mode.String()
	}
	return s
}

// quota implements Limit: the smallest limit, in its window.
func (l SlidingLog) quota() (int64, time.Duration) { return windowsQuota(l.Limits) }

// steadyRate implements Limit: the limit with the lowest rate.
func (l SlidingLog) steadyRate() (int64, time.Duration) { return windowsRate(l.Limits) }

// deniedBy implements Limit: the name or window of limit by-1, or
// "min_gap" for DeniedByGap.
func (l SlidingLog) deniedBy(by int) string { return windowsDeniedBy(l.Limits, by) }

func windowSpecs(ws []Window) WindowSpecs {
	out := make(WindowSpecs, len(ws))
	for i, w := range ws {
		out[i] = WindowSpec{Name: w.Name, Limit: w.Count, Window: w.Window}
	}
	return out
}

// windowsQuota is the smallest limit (Result.Quota) and the window of the
// first limit that has it.
func windowsQuota(ws []Window) (int64, time.Duration) {
	if len(ws) == 0 {
		return 0, 0
	}
	q := minLimit(ws)
	for _, w := range ws {
		if w.Count == q {
			return q, w.Window
		}
	}
	return q, 0
}

// windowsRate is the limit whose Limit/Window is the lowest (the first on
// ties).
func windowsRate(ws []Window) (int64, time.Duration) {
	if len(ws) == 0 {
		return 0, 0
	}
	best := ws[0]
	for _, w := range ws[1:] {
		if float64(w.Count)/float64(w.Window) < float64(best.Count)/float64(best.Window) {
			best = w
		}
	}
	return best.Count, best.Window
}

// windowsDeniedBy names limit by-1 (its name, else its window), or the
// minimum gap for DeniedByGap.
func windowsDeniedBy(ws []Window, by int) string {
	switch {
	case by == DeniedByGap:
		return "min_gap"
	case by < 1 || by > len(ws):
		return ""
	case ws[by-1].Name != "":
		return ws[by-1].Name
	}
	return ws[by-1].Window.String()
}

// InBatch returns the plan to apply in a DecideAll of several requests,
// which is all or nothing: for a nary sliding log a binary copy, for any
// other plan p itself (a shared plan, never changed).
func InBatch(p *Plan) *Plan {
	if p.kind != KindSlidingLog || p.sl.Mode != Nary {
		return p
	}
	q := *p
	q.sl.Mode = Binary
	return &q
}

// giveBack removes at most n of the actions recorded at since, while they
// count in a window at now (GiveBack): an exact log's entries at since;
// in a sampled one, from each limit's bucket of since.
func (l SlidingLog) giveBack(s *State, now, since, n int64) {
	if l.Buckets == 0 {
		live := l.live(s)
		if since <= now-l.maxWindow() {
			return
		}
		lo, hi := firstAfter(live, since-1), firstAfter(live, since)
		k := min(n, int64(hi-lo))
		if k == 0 {
			return
		}
		off := len(s.Log) - len(live) + lo
		s.Log = append(s.Log[:off], s.Log[off+int(k):]...)
		l.trimmed(s)
		return
	}
	r, _, ok := l.layout(s)
	if !ok {
		return
	}
	for i := range l.Limits {
		w := l.BucketWidth(i)
		a, kb := s.A/w, since/w
		if kb > a || kb <= a-r || (kb+r)*w <= now {
			continue
		}
		l.untake(s, i, kb, n)
	}
}

// trimmed settles an exact log that entries were taken from: an empty one
// is reset (keeping its buffer, shape and block), any other expires when
// its newest entry leaves the longest window.
func (l SlidingLog) trimmed(s *State) {
	live := l.live(s)
	if len(live) == 0 {
		*s = State{Log: s.Log[:0], Shape: s.Shape, Block: s.Block}
		return
	}
	s.Expire = live[len(live)-1] + l.maxWindow()
}

// untake takes at most n actions from limit i's bucket kb in a sampled
// log, and from that limit's running sum, and returns how many it took.
func (l SlidingLog) untake(s *State, i int, kb, n int64) int64 {
	r, k, _ := l.layout(s)
	ring := s.Log[int64(i)*r : int64(i+1)*r]
	take := min(ring[kb%r], n)
	ring[kb%r] -= take
	s.Log[k*r+int64(i)] -= take
	return take
}
