package algo

import (
	"errors"
	"fmt"
	"time"
)

// Adjust is a change to a key's state outside a request (Plan.Adjust):
// a failed login that costs more, a good one that gives some back.
type Adjust uint8

// The adjustments.
const (
	// Penalize consumes n units more, past the limit if need be: a GCRA
	// or token bucket key waits n·T longer (its TAT moves on by n·T, at
	// most MaxHorizon ahead), a fixed window's count grows by n (at most
	// MaxCount), a window counter's current slice by n (no window above
	// MaxCount), a sliding log records n actions at its clock (no window
	// above MaxExactLimit, or MaxCount sampled), so the key is denied
	// longer than a request could make it.
	Penalize Adjust = iota + 1
	// Reward gives back n units, never more than the key has consumed:
	// remaining never rises above the limit (the TAT moves back by n·T,
	// not before now; a window's count falls by n, not below 0; a window
	// counter's slices lose n, the newest first, none below 0; a sliding
	// log loses its n newest actions, or its newest buckets n).
	Reward
)

// String returns the adjustment's name.
func (a Adjust) String() string {
	switch a {
	case Penalize:
		return "penalty"
	case Reward:
		return "reward"
	}
	return fmt.Sprintf("Adjust(%d)", a)
}

// ErrNotAdjustable is wrapped by the error of a penalty or reward on a
// limit that has no count to move both ways.
var ErrNotAdjustable = errors.New("penalty and reward are for gcra, token_bucket, fixed_window, sliding_log and window_counter: a gate holds one action; concurrency slots are released")

// Adjust applies a penalty or a reward of n units (1 to MaxCount) to s at
// now; see Penalize and Reward. The error wraps ErrInvalid for a bad n or
// op, and ErrNotAdjustable (and ErrUnsupported) for the other kinds.
func (p *Plan) Adjust(s *State, now int64, op Adjust, n int64) error {
	if err := p.ValidateAdjust(op, n); err != nil {
		return err
	}
	switch p.kind {
	case KindGCRA, KindTokenBucket:
		if op == Reward {
			if s.A <= now || n > (s.A-now-1)/p.tat.Interval { // all of it back (n·T ≥ TAT - now): a full key
				*s = State{Log: s.Log[:0], Shape: s.Shape, Block: s.Block}
				return nil
			}
			s.A -= n * p.tat.Interval
			s.Expire = s.A
			return nil
		}
		tat := max(s.A, now)
		step := min(n, (now+MaxHorizon.Microseconds()-tat)/p.tat.Interval)
		s.A = tat + step*p.tat.Interval
		s.Expire = s.A
		return nil
	case KindFixedWindow:
		end, count := p.windowEnd(now), int64(0)
		if s.A >= end {
			end, count = s.A, s.B
		}
		if op == Penalize {
			count = min(count+n, MaxCount)
		} else {
			count = max(count-n, 0)
		}
		s.A, s.B, s.Expire = end, count, end
		return nil
	case KindWindowCounter:
		if op == Penalize {
			p.wc.penalize(s, now, n)
		} else {
			p.wc.reward(s, n)
		}
		return nil
	case KindSlidingLog:
		if op == Penalize {
			p.sl.penalize(s, now, n)
		} else {
			p.sl.reward(s, n)
		}
		return nil
	}
	panic("algo: Adjust on a plan ValidateAdjust refuses")
}

// ValidateAdjust reports whether Adjust would take op of n units: an error
// wrapping ErrInvalid for a bad n or op, and ErrNotAdjustable (and
// ErrUnsupported) for a kind without a count to move both ways.
func (p *Plan) ValidateAdjust(op Adjust, n int64) error {
	switch {
	case n < 1 || n > MaxCount:
		return fmt.Errorf("%w: %v of %d units: want 1 to %d", ErrInvalid, op, n, MaxCount)
	case op != Penalize && op != Reward:
		return fmt.Errorf("%w: %v", ErrInvalid, op)
	case p.kind == KindGate || p.kind == KindConcurrency:
		return fmt.Errorf("%w: %w: %v", ErrUnsupported, ErrNotAdjustable, p.kind)
	}
	return nil
}

// ErrNoBlock is wrapped by the error of a block or unblock on a limit
// without a block (Blocking): its decisions never look at one.
var ErrNoBlock = errors.New("the limit has no block: give it block: {for: ...} to block its keys")

var noBlock = fmt.Errorf("%w: %w", ErrUnsupported, ErrNoBlock)

// BlockFor blocks s from now for d (MinBlock to MaxBlock), whatever its
// block was: a block an operator sets. It counts as a block in a row for
// the next one, and is forgotten ForgetAfter after it ends.
func (p *Plan) BlockFor(s *State, now int64, d time.Duration) error {
	if err := p.ValidateBlock(d); err != nil {
		return err
	}
	until := now + d.Microseconds()
	s.Block = BlockState{Until: until, Count: max(s.Block.Count, 1), Expire: until + p.blk.WithDefaults().ForgetAfter.Microseconds()}
	return nil
}

// Unblock ends s's block and forgets its count: the key is as one never
// blocked.
func (p *Plan) Unblock(s *State) error {
	if p.blk == nil {
		return noBlock
	}
	s.Block = BlockState{}
	return nil
}

// ValidateBlock reports whether BlockFor would take a block of d: an error
// wrapping ErrNoBlock (and ErrUnsupported) for a limit without a block
// (Unblock's only error), ErrInvalid for d outside MinBlock..MaxBlock.
func (p *Plan) ValidateBlock(d time.Duration) error {
	switch {
	case p.blk == nil:
		return noBlock
	case d < MinBlock || d > MaxBlock:
		return fmt.Errorf("%w: a block of %v: want %v to %v", ErrInvalid, d, MinBlock, MaxBlock)
	}
	return nil
}

// GiveBack gives back at most n of the units a decision at since took (a
// settled estimate's unused part), and only where they still count at now,
// so that nothing is given back that the decision did not take, nor to a
// window it did not take it from: a fixed window's count while the window
// is the one that held since (none once it has ended); a window counter's
// slice of since, while it is in a window; a sliding log's actions at since
// (exact) or its buckets of since (sampled); a TAT's part of the n·T it
// scheduled from since that lies after now (since is then when the
// decision's n·T began: max(TAT, time) before it). The error is
// ValidateAdjust's.
func (p *Plan) GiveBack(s *State, now, since, n int64) error {
	if err := p.ValidateAdjust(Reward, n); err != nil {
		return err
	}
	switch p.kind {
	case KindGCRA, KindTokenBucket:
		if s.A <= now || since >= s.A {
			return nil
		}
		t := p.tat.Interval
		n = min(n, (s.A-now)/t+1) // no more than the TAT holds: n·T stays small
		back := min(n*t, since+n*t-now)
		if back <= 0 {
			return nil
		}
		if s.A-back <= now {
			*s = State{Log: s.Log[:0], Shape: s.Shape, Block: s.Block}
			return nil
		}
		s.A -= back
		s.Expire = s.A
	case KindFixedWindow:
		if end := p.windowEnd(since); s.A == end && end > now {
			s.B = max(s.B-n, 0)
		}
	case KindWindowCounter:
		p.wc.giveBack(s, now, since, n)
	case KindSlidingLog:
		p.sl.giveBack(s, now, since, n)
	}
	return nil
}
