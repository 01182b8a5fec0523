// Package algo holds the rate-limiting algorithms as pure functions of
// (stored state, now, parameters). Nothing here does I/O or reads a clock.
// A Limit describes an algorithm's parameters; Compile makes it a Plan,
// which decides: a store loads a key's State, calls Plan.Decide (or
// DecideUnlock) with the time of the decision, and saves the State back.
//
// All times inside the package are integer microseconds since the Unix
// epoch, and all durations are integer microseconds. Integers stay below
// 2^53 so that the Redis store's Lua scripts, whose numbers are doubles,
// compute exactly the same values.
//
// # Adding an algorithm
//
// The files a new algorithm touches, each guarded by a test that fails
// while it is missing:
//
//  1. algo/<name>.go: the Limit type (validate, Spec, quota, steadyRate,
//     deniedBy; decide, or step, numbers and at) and its kindInfo (name,
//     Spec fields, build, example, leasable, stepwise)
//     (TestKindsAnswerForThemselves).
//  2. algo/kind.go: the Kind constant and its line in the registry.
//  3. algo/plan.go: a field of Plan for the limit, and its case in
//     compile, decide (or, for a stepwise kind, step, numbers and at),
//     unblocked and shapeParts when its state has a layout
//     (TestPlanDecidesAsTheLimit, TestShapeKeysAreStable).
//  4. algo/denial.go: Equal (TestPlanEqualEveryKind).
//  5. store/redis/<name>.go: the kind's binding (TestEveryKindBound).
//  6. store/redis/scripts/<name>.lua: its script.
//  7. store/redis/bindings.go: its line in the bindings table. The memory
//     store needs nothing.
//  8. conformance/conformance.go: a hand-checked trace, a clock-back and
//     an edge trace, and a race (TestEveryKindCovered).
//  9. README.md: its row in the table of algorithms, with its RateLimit q
//     and w (TestEveryKindDocumented).
//  10. algo/spec.go, when it has new Spec fields: AppendJSON and
//     UnmarshalJSON (TestSpecJSONEveryField); a new duration there is
//     one the simulator's windows read too (sim TestWindowsOfEveryKind).
//
// What is derived from the registry needs no change: `sluice replay -h`
// shows each kind's example, TestDenialStands and the agreement tests go
// over every kind.
package algo

import (
	"errors"
	"fmt"
	"time"
)

// Never is the RetryAfter of a decision whose cost can never be admitted
// because it exceeds the limit.
const Never time.Duration = -1

// MaxHorizon bounds every period, window and interval (and so every state's
// lifetime): 100 years. It keeps now + horizon well below 2^53 µs.
const MaxHorizon = 100 * 365 * 24 * time.Hour

// MaxTime is the latest decision time a store accepts, in µs since the
// Unix epoch (about the year 2255). Together with MaxHorizon it keeps every
// value a script computes below 2^53.
const MaxTime int64 = 1 << 53 / 2

// MaxCount bounds every limit and every cost: 2^53-1, the largest integer
// that a double (a number in the Redis store's Lua scripts) holds exactly,
// so that both stores count alike up to it. The algorithms' own bounds are
// lower where their state needs it:
//
//	gcra, token_bucket  limit·T within MaxHorizon: a limit of at most
//	                    3,153,600,000,000,000 (at T = 1µs)
//	fixed_window        MaxCount
//	gate                1
//	sliding_log         MaxExactLimit (exact), MaxWindowLimit (buckets)
//	window_counter      MaxWindowLimit
//	concurrency         MaxSlots (a state holds a holder per slot at most)
//
// A cost above a limit is denied, never to be admitted (Never); a cost
// above MaxCount, or above MaxExactCost on an exact sliding log (which
// writes an entry per action), is a bad request (Plan.MaxCost).
const MaxCount int64 = 1<<53 - 1

// ErrInvalid is wrapped by every error about a limit's parameters.
var ErrInvalid = errors.New("invalid limit")

// Result is the outcome of one decision.
type Result struct {
	// Allowed reports whether the cost was admitted.
	Allowed bool
	// Quota is the most the limiter admits at once (its burst).
	Quota int64
	// Remaining is how much more could be admitted right after this decision.
	Remaining int64
	// RetryAfter is 0 when Allowed; otherwise how long until the same cost
	// would be admitted, or Never when the cost exceeds Limit.
	RetryAfter time.Duration
	// ResetAfter is how long until the limiter is back to its full state.
	ResetAfter time.Duration
	// Admitted is how much of the cost was admitted: the cost when Allowed
	// (0 for a peek), 0 when not, except that a nary SlidingLog may admit
	// part of the cost (0 < Admitted < cost, Allowed false).
	Admitted int64
	// DeniedBy tells which limit a denied decision of an algorithm with
	// several limits (SlidingLog, WindowCounter) waits for, the one that
	// sets RetryAfter: i+1 for Limits[i], or DeniedByGap for a sliding
	// log's minimum gap. It is 0 when allowed and for the other algorithms.
	DeniedBy int
}

// DeniedByGap is the Result.DeniedBy of a sliding log decision that waits
// for its minimum gap.
const DeniedByGap = -1

// State is what a store keeps for one key between decisions. Each algorithm
// gives A, B and Log its own meaning; stores treat them as opaque. The zero
// State is a key that has never been seen; a store that resets an expired
// state may keep Log's capacity (State{Log: s.Log[:0]}), so that a key in
// steady use allocates nothing.
type State struct {
	// Expire is the time (µs since the epoch) from which the state no longer
	// matters: at or after it a store may forget the key, and a forgotten key
	// reads as the zero State.
	Expire int64
	A, B   int64
	// Shape is the layout the state was written in (Plan.Shape): a store
	// that finds another shape than the limit's treats the state as the
	// zero State, so that a limit whose algorithm or layout changed (a
	// policy reload) starts cleanly and never misreads.
	Shape uint64
	// Log is the variable part of the state: a sliding log's timestamps or
	// bucket counters, a window counter's slice counters.
	Log []int64
	// Block is the key's block, for a limit with one (Blocking).
	Block BlockState
}

// clear makes s the zero State of the given shape (a key never seen),
// keeping Log's capacity so that a key in steady use allocates nothing. It
// writes Log only when it holds something: a store that keeps Log apart
// from what decisions write (the memory store's entries) keeps it
// unwritten for the algorithms without one.
func (s *State) clear(shape uint64) {
	s.Expire, s.A, s.B, s.Shape = 0, 0, 0, shape
	if len(s.Log) > 0 {
		s.Log = s.Log[:0]
	}
	s.clearBlock()
}

// clearBlock forgets the block, writing only when there is one: the block
// lies past the fields a decision writes (in the memory store, on another
// cache line), which a key's every decision would otherwise write, and
// cores deciding one key would pass between them.
func (s *State) clearBlock() {
	if s.Block != (BlockState{}) {
		s.Block = BlockState{}
	}
}

// Live reports whether the state matters at now: its algorithm's part
// (Expire) or its block (Block.Expire).
func (s *State) Live(now int64) bool { return s.Expire > now || s.Block.Expire > now }

// Refresh readies s for a decision at now by a limit of the given shape:
// a state of another shape is cleared, and one whose algorithm's part has
// expired is cleared but for a block that still matters (its count goes on
// for forget_after after it ends).
func (s *State) Refresh(shape uint64, now int64) {
	if s.Shape != shape {
		s.clear(shape)
		return
	}
	if s.Expire <= now {
		s.Expire, s.A, s.B = 0, 0, 0
		if len(s.Log) > 0 {
			s.Log = s.Log[:0]
		}
		if s.Block.Expire <= now {
			s.clearBlock()
		}
	}
}

// positiveSpan checks a period, window or interval.
func positiveSpan(field string, d time.Duration) error {
	switch {
	case d <= 0:
		return fmt.Errorf("%w: %s must be positive, got %v", ErrInvalid, field, d)
	case d < time.Microsecond:
		return fmt.Errorf("%w: %s %v is below the 1µs resolution", ErrInvalid, field, d)
	case d > MaxHorizon:
		return fmt.Errorf("%w: %s %v exceeds the 100-year horizon", ErrInvalid, field, d)
	}
	return nil
}
