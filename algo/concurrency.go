package algo

import (
	"cmp"
	"fmt"
	"slices"
	"time"
)

// Concurrency bounds how much is in flight at once per key: a key has
// Limit slots, an admitted cost n holds n of them until its holder
// releases them, and a holder that neither releases nor renews within
// HoldFor loses them (its hold ends), so a holder that crashed frees its
// slots after at most HoldFor.
//
// A decision acts for a permit (ForPermit: an id and an op); a plain
// decision acquires for no permit. With held the units that holders whose
// hold has not ended have at now:
//
//	Acquire, cost n   admitted when held + n <= Limit: a holder of n with
//	                  a hold to now + HoldFor. An id already held is
//	                  renewed instead (an acquire retried is not taken
//	                  twice). Denied: RetryAfter is when enough holds end
//	                  for n, Never for n > Limit. Cost 0 peeks.
//	Renew             the permit's hold runs to now + HoldFor; denied,
//	                  with RetryAfter Never, when the id is not held (it
//	                  was released, its hold ended, or it never was): a
//	                  permit once lost is never renewed.
//	Release           the id's units are freed, Admitted says how many (0
//	                  when it was not held: a release is idempotent). Id 0
//	                  frees cost units of the holders without an id (a
//	                  plain acquire, Envoy's hits), the earliest hold
//	                  first.
//
// Remaining is Limit - held after the decision (0 when a lowered Limit
// is below held), ResetAfter how long until the last hold ends as far as
// the state knows (a bound: a released holder's hold may have been the
// last).
//
// The state: Log holds the holders, three values each: the permit id (0
// for none), when its hold ends and its units. A is the units in Log, B
// a time no hold in Log ends before (0 for none) and Expire one none ends
// after, so that a decision scans Log only when a hold may have ended (B
// <= now), when it denies (for RetryAfter) and when it releases.
type Concurrency struct {
	// Count is the number of slots: 1 to MaxSlots.
	Count int64
	// HoldFor is a slot's hold: MinHoldFor to MaxHoldFor.
	HoldFor time.Duration
}

// The bounds of a concurrency limit: a state holds at most Limit holders
// (three numbers each), and a hold is long enough to renew over a network
// and short enough that a lost holder's slots come back the same day.
// Renewing does not grow the state, however often.
const (
	MaxSlots   = 100_000
	minHoldFor = time.Millisecond
	MaxHoldFor = 24 * time.Hour
)

// MaxPermitID is the largest permit id: ids are 1 to 2^53-1, numbers the
// Redis store's scripts hold exactly.
const MaxPermitID = 1<<53 - 1

// SlotOp is what a decision of a concurrency limit does for its permit
// (ForPermit).
type SlotOp uint8

// The ops; see Concurrency.
const (
	Acquire SlotOp = iota
	Renew
	Release
)

// String returns the op's name.
func (o SlotOp) String() string {
	switch o {
	case Acquire:
		return "acquire"
	case Renew:
		return "renew"
	case Release:
		return "release"
	}
	return fmt.Sprintf("SlotOp(%d)", o)
}

// validate implements Limit.
func (c Concurrency) validate() error {
	switch {
	case c.Count < 1 || c.Count > MaxSlots:
		return fmt.Errorf("%w: concurrency limit must be 1 to %d slots, got %d", ErrInvalid, MaxSlots, c.Count)
	case c.HoldFor < minHoldFor || c.HoldFor > MaxHoldFor:
		return fmt.Errorf("%w: hold_for must be %v to %v, got %v", ErrInvalid, minHoldFor, MaxHoldFor, c.HoldFor)
	}
	return nil
}

// decideFor applies op for the permit id, its Result set in *r (written
// in place, not returned: see Plan.decideTo).
func (c Concurrency) decideFor(s *State, now, cost int64, commit bool, id int64, op SlotOp, r *Result) {
	held := c.held(s, now)
	at := holderAt(s, id, now)
	switch {
	case op == Release:
		freed := c.release(s, now, id, at, cost, commit)
		c.result(r, true, now, held-freed, s.Expire, 0, freed)
		return
	case op == Renew || op == Acquire && at >= 0 && cost > 0:
		if at < 0 {
			c.result(r, false, now, held, s.Expire, Never, 0)
			return
		}
		if commit {
			c.sweep(s, now)
			at = holderAt(s, id, now)
			end := now + c.HoldFor.Microseconds() // before B after a step back
			s.Log[at+1], s.B, s.Expire = end, min(s.B, end), max(s.Expire, end)
		}
		var admitted int64 // an acquire that renews admits its cost again
		if op == Acquire {
			admitted = cost
		}
		c.result(r, true, now, held, s.Expire, 0, admitted)
		return
	case cost == 0:
		c.result(r, true, now, held, s.Expire, 0, 0)
		return
	case cost > c.Count:
		c.result(r, false, now, held, s.Expire, Never, 0)
		return
	case held+cost > c.Count:
		c.result(r, false, now, held, s.Expire, time.Duration(c.freeAt(s, now, held+cost-c.Count)-now)*time.Microsecond, 0)
		return
	}
	if commit {
		c.sweep(s, now)
		end := now + c.HoldFor.Microseconds()
		s.Log = append(s.Log, id, end, cost)
		s.A += cost
		if s.B == 0 || end < s.B {
			s.B = end
		}
		s.Expire = max(s.Expire, end)
	}
	c.result(r, true, now, held+cost, s.Expire, 0, cost)
}

// Result is a decision's Result: held is the units held after it, end
// the state's Expire after it (no hold ends later), and admitted the cost
// taken (Acquire) or the units freed (Release).
func (c Concurrency) Result(ok bool, now, held, end int64, retry time.Duration, admitted int64) Result {
	var r Result
	c.result(&r, ok, now, held, end, retry, admitted)
	return r
}

// result is Result, set in *r.
func (c Concurrency) result(r *Result, ok bool, now, held, end int64, retry time.Duration, admitted int64) {
	*r = Result{Allowed: ok, Quota: c.Count, Remaining: max(c.Count-held, 0), RetryAfter: retry, Admitted: admitted}
	if held > 0 {
		r.ResetAfter = time.Duration(max(end-now, 0)) * time.Microsecond
	}
}

// held returns the units held at now: those of the holders whose hold
// ends after now.
func (c Concurrency) held(s *State, now int64) int64 {
	if s.B == 0 || s.B > now {
		return s.A
	}
	var n int64
	for i := 0; i+2 < len(s.Log); i += 3 {
		if s.Log[i+1] > now {
			n += s.Log[i+2]
		}
	}
	return n
}

// holderAt returns the index in s.Log of id's holder if its hold ends
// after now, or -1 (always for id 0).
func holderAt(s *State, id, now int64) int {
	if id == 0 {
		return -1
	}
	for i := 0; i+2 < len(s.Log); i += 3 {
		if s.Log[i] == id {
			if s.Log[i+1] > now {
				return i
			}
			return -1
		}
	}
	return -1
}

// sweep drops the holders whose hold has ended by now, if B says one may
// have, and sets A, B and Expire to what the holders left say; a state
// left without holders is the zero State (of its shape).
func (c Concurrency) sweep(s *State, now int64) {
	if s.B == 0 || s.B > now {
		return
	}
	kept := s.Log[:0]
	s.A, s.B, s.Expire = 0, 0, 0
	for i := 0; i+2 < len(s.Log); i += 3 {
		if end := s.Log[i+1]; end > now {
			kept = append(kept, s.Log[i], end, s.Log[i+2])
			s.A += s.Log[i+2]
			if s.B == 0 || end < s.B {
				s.B = end
			}
			s.Expire = max(s.Expire, end)
		}
	}
	s.Log = kept
}

// release frees id's units (the holder at index at), or for id 0 up to
// cost units of the holders without an id, the earliest hold first (the
// first taken among equal ones), and returns the units freed; with commit
// false it only counts them.
func (c Concurrency) release(s *State, now, id int64, at int, cost int64, commit bool) int64 {
	if id != 0 {
		if at < 0 {
			return 0
		}
		n := s.Log[at+2]
		if commit {
			c.sweep(s, now)
			at = holderAt(s, id, now)
			s.Log = slices.Delete(s.Log, at, at+3)
			c.drop(s, n)
		}
		return n
	}
	freed := c.freeAnonymous(s, now, cost, false)
	if commit && freed > 0 {
		c.sweep(s, now)
		c.freeAnonymous(s, now, cost, true)
		kept := s.Log[:0]
		for i := 0; i+2 < len(s.Log); i += 3 {
			if s.Log[i+2] > 0 {
				kept = append(kept, s.Log[i], s.Log[i+1], s.Log[i+2])
			}
		}
		s.Log = kept
		c.drop(s, freed)
	}
	return freed
}

// freeAnonymous frees up to cost units of the live holders without an id,
// the earliest hold first (the first taken among equal ones), leaving a
// holder of 0 units in Log, and returns the units freed; with commit
// false it only counts them.
func (c Concurrency) freeAnonymous(s *State, now, cost int64, commit bool) int64 {
	var anon []int // indexes of the live holders without an id
	for i := 0; i+2 < len(s.Log); i += 3 {
		if s.Log[i] == 0 && s.Log[i+1] > now {
			anon = append(anon, i)
		}
	}
	slices.SortStableFunc(anon, func(a, b int) int { return cmp.Compare(s.Log[a+1], s.Log[b+1]) })
	var freed int64
	for _, i := range anon {
		if freed == cost {
			break
		}
		take := min(s.Log[i+2], cost-freed)
		freed += take
		if commit {
			s.Log[i+2] -= take
		}
	}
	return freed
}

// drop takes n units off A after a release, making a state without
// holders the zero State.
func (c Concurrency) drop(s *State, n int64) {
	s.A -= n
	if s.A <= 0 {
		s.A, s.B, s.Expire, s.Log = 0, 0, 0, s.Log[:0]
	}
}

// freeAt returns when need units held at now will have been freed by
// holds ending (none released or renewed meanwhile): the end of the
// hold that brings the units freed to need.
func (c Concurrency) freeAt(s *State, now, need int64) int64 {
	type hold struct{ end, n int64 }
	var ls []hold
	for i := 0; i+2 < len(s.Log); i += 3 {
		if s.Log[i+1] > now {
			ls = append(ls, hold{s.Log[i+1], s.Log[i+2]})
		}
	}
	slices.SortFunc(ls, func(a, b hold) int { return cmp.Compare(a.end, b.end) })
	var freed int64
	for _, l := range ls {
		if freed += l.n; freed >= need {
			return l.end
		}
	}
	return now
}

var concurrencyKind = kindInfo{
	name:    nameConcurrency,
	fields:  []string{"limit", "hold_for"},
	build:   func(s Spec) (Limit, error) { return Concurrency{Count: s.Limit, HoldFor: s.HoldFor}, nil },
	example: Concurrency{Count: 10, HoldFor: 30 * time.Second},
}

// Kind implements Limit.
func (Concurrency) Kind() Kind { return KindConcurrency }

// Spec implements Limit.
func (c Concurrency) Spec() Spec {
	return Spec{Algorithm: nameConcurrency, Limit: c.Count, HoldFor: c.HoldFor}
}

// quota implements Limit: Limit slots, which a holder keeps for HoldFor at
// most without renewing.
func (c Concurrency) quota() (int64, time.Duration) { return c.Count, c.HoldFor }

// steadyRate implements Limit: Count per HoldFor, the most that holders
// who keep their slots for a whole hold start.
func (c Concurrency) steadyRate() (int64, time.Duration) { return c.Count, c.HoldFor }

// deniedBy implements Limit: a concurrency limit has one limit.
func (Concurrency) deniedBy(int) string { return "" }

// Holder is one holder of a concurrency limit's slots.
type Holder struct {
	// Permit is the holder's permit id, 0 for slots taken for no permit.
	Permit int64
	// Units is how many slots it holds.
	Units int64
	// End is when its hold ends (µs since the epoch), unless renewed.
	End int64
}

// Holders returns the holders of s whose hold ends after now, the
// earliest hold first (the first taken among equal ones).
func (c Concurrency) Holders(s *State, now int64) []Holder {
	var hs []Holder
	for i := 0; i+2 < len(s.Log); i += 3 {
		if s.Log[i+1] > now {
			hs = append(hs, Holder{Permit: s.Log[i], End: s.Log[i+1], Units: s.Log[i+2]})
		}
	}
	slices.SortStableFunc(hs, func(a, b Holder) int { return cmp.Compare(a.End, b.End) })
	return hs
}

// ForPermit makes p, the plan of a concurrency limit, decide op for the
// permit id (see Concurrency): 1 to MaxPermitID, or 0 for the holders
// without one (an acquire or a release only). It changes p in place, so
// that a holder that keeps a copy of the plan switches ops without
// copying it again. The error wraps ErrUnsupported for the other kinds
// and ErrInvalid for a bad id or op; p is then unchanged.
func ForPermit(p *Plan, id int64, op SlotOp) error {
	switch {
	case !p.ok || p.kind != KindConcurrency:
		return fmt.Errorf("%w: %v has no permits (only a concurrency limit holds slots)", ErrUnsupported, p.kind)
	case id < 0 || id > MaxPermitID:
		return fmt.Errorf("%w: permit id %d is outside 1..%d", ErrInvalid, id, int64(MaxPermitID))
	case op > Release:
		return fmt.Errorf("%w: %v", ErrInvalid, op)
	case id == 0 && op == Renew:
		return fmt.Errorf("%w: a renewal needs a permit id", ErrInvalid)
	}
	p.permit, p.op = id, op
	return nil
}
