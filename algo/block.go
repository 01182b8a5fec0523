package algo

import (
	"fmt"
	"time"
)

// Block is what a limit does to a key that goes over it: the decision
// that is denied starts a block (a peek, of cost 0, starts none), and until the block ends every decision
// on the key is denied, whatever the algorithm would say, its RetryAfter
// the block's end. Decisions denied during a block do not extend it. A
// block that starts within ForgetAfter of the end of the key's last one
// is Growth times as long as that one, up to Max:
//
//	n = the blocks in a row (1 for the first, or after ForgetAfter)
//	length = min(Max, For · Growth^(n-1)), the power taken one factor
//	         at a time, each product in float64, and the µs truncated
//
// so that Go and Lua (whose numbers are the same doubles) compute the
// same lengths. The count stops at MaxBlockCount: a key blocked more often
// in a row is blocked for as long as the last.
type Block struct {
	// For is the first block's length: MinBlock to MaxBlock.
	For time.Duration `yaml:"for"`
	// Growth multiplies each further block in a row: 1 (the default when
	// 0) to MaxGrowth. A spec that writes growth: 0 is refused (a
	// limits.yaml, JSON): it would read as no block after the first.
	Growth float64 `yaml:"growth,omitempty"`
	// Max bounds a block's length: For to MaxBlock (the default when 0).
	Max time.Duration `yaml:"max,omitempty"`
	// ForgetAfter is how long after a block ends the key's next one
	// still counts as in a row: DefaultForgetAfter when 0, at most
	// MaxBlock.
	ForgetAfter time.Duration `yaml:"forget_after,omitempty"`
}

// The bounds of a Block.
const (
	MinBlock           = time.Millisecond
	MaxBlock           = 365 * 24 * time.Hour
	MaxGrowth          = 1000 // the largest Block.Growth
	defaultForgetAfter = 24 * time.Hour
	// maxBlockCount is the most blocks in a row a key's state counts.
	maxBlockCount = 1000
)

// BlockState is a key's block: when it ends (µs since the epoch; 0 for
// none yet), how many blocks in a row led to it, and when it stops
// mattering (Block.Expire: until + forget_after).
type BlockState struct {
	Until, Count, Expire int64
}

// DeniedByBlock is the Result.DeniedBy of a decision a block denied.
const DeniedByBlock = -2

// WithDefaults returns b with its defaults set.
func (b Block) WithDefaults() Block {
	if b.Growth == 0 {
		b.Growth = 1
	}
	if b.Max == 0 {
		b.Max = MaxBlock
	}
	if b.ForgetAfter == 0 {
		b.ForgetAfter = defaultForgetAfter
	}
	return b
}

// validate reports whether the block's parameters are usable, its
// defaults set. The error wraps ErrInvalid.
func (b Block) validate() error {
	b = b.WithDefaults()
	switch {
	case b.For < MinBlock || b.For > MaxBlock:
		return fmt.Errorf("%w: block for must be %v to %v, got %v", ErrInvalid, MinBlock, MaxBlock, b.For)
	case !(b.Growth >= 1 && b.Growth <= MaxGrowth):
		return fmt.Errorf("%w: block growth must be 1 to %d, got %v", ErrInvalid, MaxGrowth, b.Growth)
	case b.Max < b.For || b.Max > MaxBlock:
		return fmt.Errorf("%w: block max must be from for (%v) to %v, got %v", ErrInvalid, b.For, MaxBlock, b.Max)
	case b.ForgetAfter < 0 || b.ForgetAfter > MaxBlock:
		return fmt.Errorf("%w: block forget_after must be 0 (24h) to %v, got %v", ErrInvalid, MaxBlock, b.ForgetAfter)
	}
	return nil
}

// Blocked reports whether st blocks a decision at now.
func (st BlockState) Blocked(now int64) bool { return now < st.Until }

// start returns the block a denial at now starts after st.
func (b Block) start(st BlockState, now int64) BlockState {
	b = b.WithDefaults()
	n := int64(1)
	if st.Until != 0 && now-st.Until <= b.ForgetAfter.Microseconds() {
		n = min(st.Count+1, maxBlockCount)
	}
	until := now + b.length(n)
	return BlockState{Until: until, Count: n, Expire: until + b.ForgetAfter.Microseconds()}
}

// length returns the length in µs of the n-th block in a row.
func (b Block) length(n int64) int64 {
	b = b.WithDefaults()
	d, most := float64(b.For.Microseconds()), float64(b.Max.Microseconds())
	for i := int64(1); i < n && d < most && b.Growth > 1; i++ {
		d *= b.Growth
	}
	return int64(min(d, most))
}

// Result is the Result of a decision that a block denies: nothing is
// admitted until the block ends (RetryAfter and ResetAfter), and nothing
// remains meanwhile; quota is the limit's.
func (st BlockState) Result(now, quota int64) Result {
	wait := time.Duration(st.Until-now) * time.Microsecond
	return Result{Quota: quota, RetryAfter: wait, ResetAfter: wait, DeniedBy: DeniedByBlock}
}

// Blocking is a limit that blocks the keys that go over it (Block). It
// decides as its Limit does but for the block, which it keeps in
// State.Block; a store keeps a key's state while its block matters
// (State.Live, State.Refresh).
type Blocking struct {
	Limit Limit
	Block Block
}

// Kind implements Limit: the kind of the limit it blocks for.
func (b Blocking) Kind() Kind { return b.Limit.Kind() }

// validate implements Limit.
func (b Blocking) validate() error {
	if b.Limit == nil {
		return errNilLimit
	}
	if _, ok := b.Limit.(Blocking); ok {
		return fmt.Errorf("%w: a block of a block", ErrInvalid)
	}
	if err := b.Limit.validate(); err != nil {
		return err
	}
	return b.Block.validate()
}

// Spec implements Limit: the limit's spec with the block.
func (b Blocking) Spec() Spec {
	s := b.Limit.Spec()
	blk := b.Block
	s.Block = &blk
	return s
}

// quota implements Limit.
func (b Blocking) quota() (int64, time.Duration) { return b.Limit.quota() }

// steadyRate implements Limit.
func (b Blocking) steadyRate() (int64, time.Duration) { return b.Limit.steadyRate() }

// deniedBy implements Limit: "block" for a decision the block denied.
func (b Blocking) deniedBy(by int) string {
	if by == DeniedByBlock {
		return "block"
	}
	return b.Limit.deniedBy(by)
}
