package algo

import (
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strconv"
	"sync"
	"time"
)

// A Plan is a limit made ready to decide: validated once, with what its
// algorithm derives from its parameters (GCRA's emission interval and
// tolerance, a fixed window's divisor) computed once. Callers compile at
// the edge (a Limiter when it is made, a policy when it loads) and every
// store.Request carries its *Plan: stores never compile.
//
// A Plan holds its limit in the field of its kind, and each method reaches
// the algorithm through a switch on the kind, not through an interface
// method, so that deciding allocates nothing and a Plan compiled on the
// caller's stack stays there. Compile therefore knows the kinds of this
// package and no others (ErrUnsupported).
//
// The zero Plan is not valid.
type Plan struct {
	kind     Kind
	ok       bool   // made by Compile
	stepwise bool   // kinds[kind].stepwise, read on every decision
	shape    uint64 // see Shape
	shapeKey string // see ShapeKey
	maxCost  int64  // see MaxCost; 0 until compiled
	// What is derived from the limit, first, beside the fields above that
	// every decision reads.
	tat TAT       // gcra, token_bucket
	win divisor   // fixed_window: the window in µs
	cal *calendar // fixed_window: a calendar's windows instead (nil: win's)
	// The limit, in the field of its kind; the others are zero.
	gcra GCRA
	tb   TokenBucket
	fw   FixedWindow
	gate Gate
	sl   SlidingLog
	wc   WindowCounter
	cc   Concurrency
	// A concurrency plan's permit (ForPermit): its id (0: none) and op.
	permit int64
	op     SlotOp
	// quota is the limit's Quota, for a block's denial.
	quota int64
	// The limit's block (Blocking), nil for none: a pointer, so that a
	// plan without one (most) is no larger for it.
	blk *Block
	// debt: the limit records denied charges (Debt).
	debt bool
}

// Compile validates l and returns its Plan: what a store decides with
// (store.Request.Plan). Compile once, where the limit is known (a
// Limiter, a policy), and decide many times. The error wraps ErrInvalid,
// and ErrUnsupported for a type that is not an algorithm of this package.
func Compile(l Limit) (Plan, error) {
	var p Plan
	err := p.compile(l)
	return p, err
}

// MustCompile is Compile for a limit known to be valid, such as a literal
// in a package variable: it panics if l is invalid.
func MustCompile(l Limit) *Plan {
	p, err := Compile(l)
	if err != nil {
		panic(err)
	}
	return &p
}

// compile makes p the plan of l, validating l.
func (p *Plan) compile(l Limit) error {
	*p = Plan{}
	var err error
	switch l := l.(type) {
	case GCRA:
		p.kind, p.gcra = KindGCRA, l
		p.tat, err = l.tat()
		p.quota, _ = l.quota()
	case TokenBucket:
		p.kind, p.tb = KindTokenBucket, l
		p.tat, err = l.tat()
		p.quota, _ = l.quota()
	case FixedWindow:
		p.kind, p.fw = KindFixedWindow, l
		if err = l.validate(); err == nil {
			if l.Calendar != (Calendar{}) {
				p.cal = l.calendar()
			} else {
				p.win = newDivisor(l.Window.Microseconds())
			}
		}
		p.quota, _ = l.quota()
	case Gate:
		p.kind, p.gate = KindGate, l
		err = l.validate()
		p.quota, _ = l.quota()
	case SlidingLog:
		// Field by field, the windows copied: a plan keeps none of the
		// caller's memory, so a limit compiled at the call stays on the
		// caller's stack (TestCompileKeepsNoLimit).
		p.kind = KindSlidingLog
		p.sl = SlidingLog{Limits: slices.Clone(l.Limits), MinGap: l.MinGap, Buckets: l.Buckets, Mode: l.Mode}
		err = p.sl.validate()
		p.quota, _ = p.sl.quota()
	case WindowCounter:
		p.kind = KindWindowCounter
		p.wc = WindowCounter{Slice: l.Slice, Limits: slices.Clone(l.Limits)}
		err = p.wc.validate()
		p.quota, _ = p.wc.quota()
	case Concurrency:
		p.kind, p.cc = KindConcurrency, l
		err = l.validate()
		p.quota, _ = l.quota()
	case Blocking: // as Blocking.validate, with the limit validated by compiling it
		if _, nested := l.Limit.(Blocking); nested {
			err = fmt.Errorf("%w: a block of a block", ErrInvalid)
		} else if _, debt := l.Limit.(Debt); debt {
			err = fmt.Errorf("%w: debt with a block: a blocked key records nothing, so a charge would be lost", ErrInvalid)
		} else if err = p.compile(l.Limit); err == nil {
			err = l.Block.validate()
		}
		if err != nil {
			*p = Plan{}
			return err
		}
		// Blocks decide through Decide, which keeps State.Block: not
		// stepwise.
		blk := l.Block
		p.blk, p.stepwise = &blk, false
		return nil
	case Debt:
		return p.compileDebt(l)
	case nil:
		err = errNilLimit
	default:
		err = fmt.Errorf("%w: %w: %s is not an algorithm of package algo", ErrInvalid, ErrUnsupported, reflect.TypeOf(l))
	}
	if err != nil {
		*p = Plan{}
		return err
	}
	p.ok, p.stepwise = true, kinds[p.kind].stepwise
	p.shape = p.computeShape()
	p.shapeKey = p.computeShapeKey()
	p.maxCost = MaxCount
	if p.kind == KindSlidingLog && p.sl.Buckets == 0 {
		p.maxCost = MaxExactCost
	}
	return nil
}

// Shape identifies the layout of the plan's state (State.Shape): 0 for
// GCRA and the token bucket, whose state is one TAT whatever their
// parameters (a changed rate or burst carries on from it); for the others
// their kind and what their state's layout depends on (a sampled sliding
// log's buckets and widths, a window counter's slice and ring).
func (p *Plan) Shape() uint64 { return p.shape }

// ShapeKey is Shape as text, "" for a TAT: the Redis store appends it to
// a state's key name, so that a state of another layout is another key.
// It names the algorithm by its stable name (Spec.Algorithm), then the
// numbers of the layout: "%:fixed_window", "%:gate", "%:sliding_log" (an
// exact log), "%:sliding_log-sampled-10-100000" (buckets, then each
// limit's bucket width), "%:window_counter-1000000-60-2" (slice, slices,
// limits). It never holds a kind's number, which may change. It is made
// when the plan is compiled.
func (p *Plan) ShapeKey() string { return p.shapeKey }

// computeShapeKey makes ShapeKey: for a layout without numbers, its kind's
// (shapeKeys), so that compiling such a plan allocates nothing.
func (p *Plan) computeShapeKey() string {
	if p.shape == 0 {
		return ""
	}
	var buf [64]byte
	b := append(buf[:0], shapeKeys[p.kind]...)
	p.shapeParts(func(v int64) {
		b = append(b, '-')
		b = strconv.AppendInt(b, v, 10)
	}, func(tag string) {
		b = append(b, '-')
		b = append(b, tag...)
	})
	if len(b) == len(shapeKeys[p.kind]) {
		return shapeKeys[p.kind]
	}
	return string(b)
}

// shapeKeys are "%:" and each kind's name: the ShapeKey of a layout with
// no numbers.
var shapeKeys = func() (keys [NumKinds]string) {
	for k := range keys {
		keys[k] = "%:" + Kind(k).String()
	}
	return keys
}()

// shapeParts calls num with the numbers the state's layout depends on,
// beyond its kind, and tag with the words that tell layouts of one kind
// apart.
func (p *Plan) shapeParts(num func(int64), tag func(string)) {
	switch p.kind {
	case KindSlidingLog:
		if p.sl.Buckets == 0 {
			return // an exact log: times, whatever the limits
		}
		tag("sampled")
		num(p.sl.Buckets)
		for i := range p.sl.Limits {
			num(p.sl.BucketWidth(i))
		}
	case KindWindowCounter:
		num(p.wc.SliceMicros())
		num(p.wc.maxSlices())
		num(int64(len(p.wc.Limits)))
	}
}

// computeShape is an FNV-1a hash of the kind and the shape's numbers,
// never 0 but for a TAT (GCRA and the token bucket share one layout).
func (p *Plan) computeShape() uint64 {
	if p.kind == KindGCRA || p.kind == KindTokenBucket {
		return 0
	}
	h := uint64(14695981039346656037)
	mix := func(v int64) {
		for range 8 {
			h ^= uint64(v & 0xff)
			h *= 1099511628211
			v >>= 8
		}
	}
	mix(int64(p.kind))
	p.shapeParts(mix, func(tag string) {
		for i := 0; i < len(tag); i++ {
			mix(int64(tag[i]))
		}
	})
	return h | 1
}

var errNilLimit = fmt.Errorf("%w: no limit", ErrInvalid)

// ErrUnsupported is wrapped by the error of a limit whose type is not one
// of this package's algorithms (such as a type that embeds one): stores
// run only the algorithms they have the same meaning for.
var ErrUnsupported = errors.New("unsupported limit")

// Decide applies a decision of the given cost at time now (µs since the
// epoch) to the state s, which the caller has reset to the zero State if
// it had expired. When commit is false, s is left as it was; when the
// decision admits nothing, s is left as it was too, except by an
// algorithm that records denied attempts (a uniform SlidingLog).
func (p *Plan) Decide(s *State, now, cost int64, commit bool) Result {
	var r Result
	p.decideTo(s, now, cost, commit, &r)
	return r
}

// decideTo is Decide with its Result set in *r: a Result (seven words)
// returned through a frame that returns another function's is spilled and
// copied back, which on the hot path of a store cost more than the
// algorithm (bench/NOTES.md, "Slots against a check").
func (p *Plan) decideTo(s *State, now, cost int64, commit bool, r *Result) {
	if p.blk != nil && p.op == Acquire { // a block stops no renewal or release of slots held
		*r = p.decideBlocking(s, now, cost, commit)
		return
	}
	if p.debt && cost == 0 {
		// A peek at a debt is denied once nothing remains, the budget
		// spent to the unit and not only past it: as a cost of 1 that
		// records nothing would be.
		if p.decide(s, now, 1, false, r); r.Allowed {
			p.decide(s, now, 0, false, r)
		}
		return
	}
	p.decide(s, now, cost, commit, r)
	if p.debt && commit && !r.Allowed && cost > 0 {
		// The charge is answered as the denial it is, and recorded: what
		// remains after it is 0 (it was more than remained).
		p.owe(s, now, cost)
		r.Remaining = 0
	}
}

// decideBlocking decides for a plan with a block (see Block): a key
// blocked at now is denied without deciding; a denial that commits starts
// a block; the state is kept while its block matters.
func (p *Plan) decideBlocking(s *State, now, cost int64, commit bool) Result {
	if s.Block.Blocked(now) {
		return s.Block.Result(now, p.quota)
	}
	var r Result
	p.decide(s, now, cost, commit, &r)
	if commit && !r.Allowed && cost > 0 { // a peek starts nothing
		s.Block = p.blk.start(s.Block, now)
		r = s.Block.Result(now, p.quota)
	}
	return r
}

// Blocks returns the plan's block, and whether it has one that its
// decisions meet: not a renewal or release of concurrency slots, which a
// block never stops (the holder's slots would outlive their use).
func (p *Plan) Blocks() (Block, bool) {
	if p.blk == nil || p.op != Acquire {
		return Block{}, false
	}
	return *p.blk, true
}

// decide is decideTo without the block and the debt.
func (p *Plan) decide(s *State, now, cost int64, commit bool, r *Result) {
	if kinds[p.kind].stepwise { // p.stepwise is false for a plan with a block
		now = p.at(s, now)
		ok, v := p.step(s, now, cost, commit)
		*r = p.numbers(ok, now, v, cost).result(ok, cost)
		return
	}
	switch p.kind {
	case KindSlidingLog:
		*r = p.sl.decide(s, now, cost, commit)
	case KindWindowCounter:
		*r = p.wc.decide(s, now, cost, commit)
	case KindConcurrency:
		p.cc.decideFor(s, now, cost, commit, p.permit, p.op, r)
	default:
		panic("algo: Decide on a Plan that Compile did not make")
	}
}

// DecideUnlock commits a decision as Decide does on a state that mu
// guards and the caller has locked, and unlocks mu (when not nil) as soon
// as s is no longer read or written: for GCRA, the token bucket, the
// fixed window and the gate, whose Result follows from the outcome and
// one number, before the Result's arithmetic, so that a store holds a
// key's lock for the state's part alone. It sets *r to the Result unless r
// is nil, and reports whether the cost was admitted.
func (p *Plan) DecideUnlock(s *State, now, cost int64, mu *sync.Mutex, r *Result) bool {
	if !p.stepwise {
		var res Result
		if r == nil {
			r = &res
		}
		p.decideTo(s, now, cost, true, r)
		if mu != nil {
			mu.Unlock()
		}
		return r.Allowed
	}
	now = p.at(s, now)
	ok, v := p.step(s, now, cost, true)
	if mu != nil {
		mu.Unlock()
	}
	if r != nil {
		*r = p.numbers(ok, now, v, cost).result(ok, cost)
	}
	return ok
}

// Allows reports whether a decision of cost at now would be admitted on
// s, changing nothing: the check of an all-or-nothing batch, which
// computes no more of the Result than that.
func (p *Plan) Allows(s *State, now, cost int64) bool {
	if !p.stepwise {
		return p.Decide(s, now, cost, false).Allowed
	}
	ok, _ := p.step(s, p.at(s, now), cost, false)
	return ok
}

// at returns the time a stepwise decision at now is taken at on s: now,
// except for a fixed window whose state counts a window that starts after
// now (FixedWindow.At).
func (p *Plan) at(s *State, now int64) int64 {
	if p.kind == KindFixedWindow {
		if p.cal != nil {
			return p.fw.at(s, now)
		}
		return max(now, s.A-p.win.d)
	}
	return now
}

// MaxCost returns the largest cost one decision of the plan may have:
// MaxExactCost for an exact sliding log, MaxCount for the others, and 0
// for a Plan that Compile did not make. A larger cost is a bad request
// (store.Validate); a cost up to it but above the limit is denied, never to
// be admitted.
func (p *Plan) MaxCost() int64 { return p.maxCost }

// step applies the part of a stepwise plan's decision that reads and
// writes s. It reports whether the cost is admitted, and v for numbers: a
// TAT (GCRA, token bucket), a window's count after the decision (fixed
// window), or when the gate opens.
func (p *Plan) step(s *State, now, cost int64, commit bool) (allowed bool, v int64) {
	switch p.kind {
	case KindGCRA, KindTokenBucket:
		return p.tat.step(s, now, cost, commit)
	case KindFixedWindow:
		return p.fw.step(s, now, p.windowEnd(now), cost, commit)
	case KindGate:
		return p.gate.step(s, now, cost, commit)
	}
	panic("algo: step on a Plan that is not stepwise")
}

// numbers returns the numbers of a stepwise decision's Result from what
// step reported; it reads no state.
func (p *Plan) numbers(allowed bool, now, v, cost int64) numbers {
	switch p.kind {
	case KindGCRA, KindTokenBucket:
		return p.tat.numbers(allowed, now, v, cost)
	case KindFixedWindow:
		return p.fw.numbers(allowed, now, p.windowEnd(now), v, cost)
	case KindGate:
		return p.gate.numbers(allowed, now, v, cost)
	}
	panic("algo: numbers of a Plan that is not stepwise")
}

// windowEnd returns the end of the fixed window that holds now.
func (p *Plan) windowEnd(now int64) int64 {
	if p.cal != nil {
		_, end := p.cal.bounds(now)
		return end
	}
	return p.win.end(now)
}

// numbers are a stepwise decision's Result but for Allowed and Admitted.
// With four fields it stays in registers, where a Result (seven) is
// stored and copied between functions: each algorithm computes its
// numbers, and one literal builds the Result from them.
type numbers struct {
	quota, remaining int64
	retry, reset     time.Duration
}

func (n numbers) result(allowed bool, cost int64) Result {
	var admitted int64
	if allowed {
		admitted = cost
	}
	// One literal, returned as it is: a Result built and then changed is
	// copied through memory.
	return Result{Allowed: allowed, Quota: n.quota, Remaining: n.remaining, RetryAfter: n.retry, ResetAfter: n.reset, Admitted: admitted}
}

// Limit returns the limit the plan was compiled from (nil for a Plan
// Compile did not make).
func (p *Plan) Limit() Limit {
	if p == nil || !p.ok {
		return nil
	}
	switch {
	case p.blk != nil:
		return Blocking{Limit: p.unblocked(), Block: *p.blk}
	case p.debt:
		return Debt{Limit: p.unblocked()}
	}
	return p.unblocked()
}

// unblocked returns the limit the plan was compiled from, without its
// block.
func (p *Plan) unblocked() Limit {
	switch p.kind {
	case KindGCRA:
		return p.gcra
	case KindTokenBucket:
		return p.tb
	case KindFixedWindow:
		return p.fw
	case KindGate:
		return p.gate
	case KindSlidingLog:
		return p.sl
	case KindWindowCounter:
		return p.wc
	case KindConcurrency:
		return p.cc
	}
	return nil
}

// Kind returns the plan's algorithm.
func (p *Plan) Kind() Kind { return p.kind }

// Debt reports whether the plan records denied charges (Debt): a store
// deciding several levels at once records such a level's charge even when
// another level denies.
func (p *Plan) Debt() bool { return p.debt }

// DenialStands reports whether a denial by the plan's limit stands on its
// own until its RetryAfter has passed: deciding a denied cost leaves the
// state as it was, and from the time of the denial until RetryAfter later
// that cost, and any larger one, stays denied whatever else is decided
// meanwhile, since only time frees capacity and other decisions only take
// it. A store may then remember a denial and repeat it without reading
// the state (an over-limit cache). It is so for every algorithm but a
// sliding log in the nary or uniform mode, whose denials record, and a
// concurrency limit, whose slots come back when their holders release
// them; nor for a limit with debt, whose denials record the charge.
func (p *Plan) DenialStands() bool {
	return p.ok && !p.debt && p.kind != KindConcurrency && (p.kind != KindSlidingLog || p.sl.Mode == Binary)
}

// Equal reports whether p and q decide alike: the same kind and
// parameters (a window's Name aside).
func (p *Plan) Equal(q *Plan) bool {
	same := func(a, b Window) bool { return a.Count == b.Count && a.Window == b.Window }
	return p.kind == q.kind && p.ok == q.ok && p.debt == q.debt && p.tat == q.tat &&
		p.gcra == q.gcra && p.tb == q.tb && p.fw == q.fw && p.gate == q.gate && p.cc == q.cc &&
		p.permit == q.permit && p.op == q.op && (p.blk == nil) == (q.blk == nil) && (p.blk == nil || *p.blk == *q.blk) &&
		p.sl.MinGap == q.sl.MinGap && p.sl.Buckets == q.sl.Buckets && p.sl.Mode == q.sl.Mode &&
		slices.EqualFunc(p.sl.Limits, q.sl.Limits, same) &&
		p.wc.Slice == q.wc.Slice && slices.EqualFunc(p.wc.Limits, q.wc.Limits, same)
}

// TAT returns the virtual-scheduling parameters of a GCRA or token bucket
// plan; the error wraps ErrUnsupported for the other kinds.
func (p *Plan) TAT() (TAT, error) {
	if !p.ok || p.kind != KindGCRA && p.kind != KindTokenBucket {
		return TAT{}, fmt.Errorf("%w: %v cannot reserve ahead or give units back (only gcra and token_bucket refill steadily); use Allow, or Wait to block until a cost is admitted", ErrUnsupported, p.kind)
	}
	return p.tat, nil
}

// Concurrency returns the concurrency limit of a plan of one (with a
// block or not), and false for the other kinds.
func (p *Plan) Concurrency() (Concurrency, bool) { return p.cc, p.ok && p.kind == KindConcurrency }

// Permit returns the permit id and op of a plan ForPermit made (0 and
// Acquire for any other).
func (p *Plan) Permit() (int64, SlotOp) { return p.permit, p.op }
