package algo

import (
	"sync/atomic"
	"time"
)

// Plans is a cache of compiled limits, safe for concurrent use: Compile
// returns the Plan of a limit whose parameters it has seen before without
// validating it or deriving its parameters again (GCRA's emission interval
// costs a division). The memory store keeps one, so that a request that
// carries its limit by value (an algo.GCRA built at the call) decides as
// fast as a limiter handle's. The zero value is ready to use.
//
// It holds plans of limits whose parameters are numbers (GCRA, token
// bucket, fixed window, gate), at most plansSlots of them, two places per
// limit; when both places of a new limit are taken it compiles that limit
// each time, and after plansFlush such misses it empties itself, so that
// the limits in use (after a policy reload, say) take the places back.
// Sliding logs and window counters, whose parameters hold slices, compile
// each time. A cached plan is the plan Compile makes of the limit
// (TestPlansCompile, also under a flush from 4 goroutines). It stays because compiling each call
// costs a decision on a limit passed by value 1.34x–1.62x (bench/NOTES.md,
// "What each micro-optimisation pays").
type Plans struct {
	slots  [plansSlots]atomic.Pointer[cachedPlan]
	misses atomic.Uint32
}

const (
	plansSlots = 256 // a power of two
	plansFlush = 4096
)

type cachedPlan struct {
	key  params
	plan Plan
}

// params are a limit's kind and numbers: equal params, equal plans.
type params struct {
	kind Kind
	a, b int64
	d    time.Duration
}

// paramsOf returns l's params, or false for a limit with slices or of
// another type. l does not escape.
func paramsOf(l Limit) (params, bool) {
	switch l := l.(type) {
	case GCRA:
		return params{KindGCRA, l.Burst, l.Count, l.Period}, true
	case TokenBucket:
		return params{KindTokenBucket, l.Burst, l.Rate, l.Per}, true
	case FixedWindow:
		return params{KindFixedWindow, l.Limit, 0, l.Window}, true
	case Gate:
		return params{KindGate, 0, 0, l.Interval}, true
	case Concurrency:
		return params{KindConcurrency, l.Limit, 0, l.HoldFor}, true
	case *GCRA:
		if l != nil {
			return paramsOf(*l)
		}
	case *TokenBucket:
		if l != nil {
			return paramsOf(*l)
		}
	case *FixedWindow:
		if l != nil {
			return paramsOf(*l)
		}
	case *Gate:
		if l != nil {
			return paramsOf(*l)
		}
	case *Concurrency:
		if l != nil {
			return paramsOf(*l)
		}
	}
	return params{}, false
}

// slot is where k's plan goes (and the slot next to it, slot^1): a
// Fibonacci hash, the top 8 bits of one product, of k's fields shifted to
// set different bits.
func (k params) slot() uint64 {
	x := uint64(k.a) ^ uint64(k.b)<<17 ^ uint64(k.d)<<5 ^ uint64(k.kind)<<58
	return (x * 0x9E3779B97F4A7C15) >> 56 // 0..plansSlots-1
}

// Lookup returns l itself when it is a compiled *Plan, or l's cached
// plan, or nil: then Compile l. The plan returned must not be changed.
func (c *Plans) Lookup(l Limit) *Plan {
	if p, ok := l.(*Plan); ok && p != nil && p.ok {
		return p
	}
	k, ok := paramsOf(l)
	if !ok {
		return nil
	}
	i := k.slot()
	if e := c.slots[i].Load(); e != nil && e.key == k {
		return &e.plan
	}
	if e := c.slots[i^1].Load(); e != nil && e.key == k {
		return &e.plan
	}
	return nil
}

// Compile returns the plan of l, as the function Compile does: a *Plan
// itself, a cached plan, or scratch compiled. The plan returned must not
// be changed. Compile keeps nothing of l: a limit value in an interface
// stays on its caller's stack.
func (c *Plans) Compile(l Limit, scratch *Plan) (*Plan, error) {
	if p := c.Lookup(l); p != nil {
		return p, nil
	}
	k, ok := paramsOf(l)
	if !ok {
		return scratch, scratch.Compile(l)
	}
	i := k.slot()
	if err := scratch.Compile(l); err != nil {
		return scratch, err
	}
	for _, j := range [2]uint64{i, i ^ 1} {
		if c.slots[j].Load() == nil {
			e := &cachedPlan{key: k, plan: *scratch}
			if c.slots[j].CompareAndSwap(nil, e) {
				return &e.plan, nil
			}
		}
	}
	if c.misses.Add(1)%plansFlush == 0 {
		for j := range c.slots {
			c.slots[j].Store(nil)
		}
	}
	return scratch, nil
}
