package algo

import (
	"fmt"
	"math/bits"
	"time"
)

// GCRA is the generic cell rate algorithm with exactly the semantics of the
// redis-cell module's CL.THROTTLE key max_burst count period [quantity].
//
// With emission interval T = Period/Count (whole µs) and tolerance
// τ = T·(Burst+1), the stored state is the theoretical arrival time TAT. A
// decision of cost n at time now computes
//
//	tat     = max(stored TAT, now)
//	new_tat = tat + n·T
//	diff    = now - (new_tat - τ)
//
// and is limited when diff < 0: nothing is written, RetryAfter = -diff (Never
// when n·T > τ) and ResetAfter = tat - now. Otherwise new_tat is stored,
// expiring at new_tat, and ResetAfter = new_tat - now. In both cases
// Limit = Burst+1 and Remaining = ⌊(τ - ResetAfter)/T⌋, or 0 when negative.
type GCRA struct {
	// Burst is CL.THROTTLE's max_burst: the limiter admits Burst+1 at once.
	Burst int64
	// Count actions are admitted per Period once the burst is spent.
	Count  int64
	Period time.Duration
}

// validate implements Limit.
func (g GCRA) validate() error {
	_, err := g.tat()
	return err
}

func (g GCRA) tat() (TAT, error) {
	if g.Burst < 0 {
		return TAT{}, fmt.Errorf("%w: gcra burst must be zero or more, got %d", ErrInvalid, g.Burst)
	}
	if g.Count <= 0 {
		return TAT{}, fmt.Errorf("%w: gcra count must be positive, got %d", ErrInvalid, g.Count)
	}
	if err := positiveSpan("gcra period", g.Period); err != nil {
		return TAT{}, err
	}
	return newTAT("gcra", g.Period.Microseconds(), g.Count, g.Burst+1)
}

// TokenBucket holds up to Burst tokens and gains Count tokens every Period
// (in YAML: rate per per); a decision of cost n takes n tokens or is
// limited. A key never seen has a full bucket.
//
// A limit "L per window W with an initial burst B" (PlugLimit's form) is
// TokenBucket{Burst: B, Count: L, Period: W}: B may go at once, and L per
// W on average after that.
//
// It is computed like GCRA with T = Period/Count (whole µs) and
// τ = T·Burst, so Limit = Burst and the state is one TAT; the tokens in the bucket at time
// now are ⌊(τ - (TAT - now))/T⌋.
type TokenBucket struct {
	Burst  int64
	Count  int64
	Period time.Duration
}

// validate implements Limit.
func (b TokenBucket) validate() error {
	_, err := b.tat()
	return err
}

func (b TokenBucket) tat() (TAT, error) {
	if b.Burst <= 0 {
		return TAT{}, fmt.Errorf("%w: token_bucket burst must be positive, got %d", ErrInvalid, b.Burst)
	}
	if b.Count <= 0 {
		return TAT{}, fmt.Errorf("%w: token_bucket rate must be positive, got %d", ErrInvalid, b.Count)
	}
	if err := positiveSpan("token_bucket per", b.Period); err != nil {
		return TAT{}, err
	}
	return newTAT("token_bucket", b.Period.Microseconds(), b.Count, b.Burst)
}

// TAT is the virtual-scheduling core shared by GCRA and TokenBucket: an
// emission Interval T and a Tolerance τ = T·Quota, both in µs; Quota is the
// most one decision admits (Result.Quota).
type TAT struct {
	Interval  int64
	Tolerance int64
	Quota     int64
}

func newTAT(name string, periodUS, count, limit int64) (TAT, error) {
	t := periodUS / count
	if t <= 0 {
		return TAT{}, fmt.Errorf("%w: %s emits %d per %v, faster than one per µs", ErrInvalid, name, count, time.Duration(periodUS)*time.Microsecond)
	}
	// limit·t > the horizon, without a second division or an overflow.
	if hi, lo := bits.Mul64(uint64(limit), uint64(t)); hi != 0 || lo > uint64(MaxHorizon.Microseconds()) {
		return TAT{}, fmt.Errorf("%w: %s burst %d spans more than the 100-year horizon", ErrInvalid, name, limit)
	}
	return TAT{Interval: t, Tolerance: t * limit, Quota: limit}, nil
}

// step is the part of Decide that reads and writes the state: it reports
// whether the cost is admitted and the tat that Result takes.
func (p *TAT) step(s *State, now, cost int64, commit bool) (allowed bool, tat int64) {
	tat = max(s.A, now)
	if cost > p.Quota {
		return false, tat
	}
	newTAT := tat + cost*p.Interval
	if newTAT-p.Tolerance > now {
		return false, tat
	}
	if commit && cost > 0 {
		s.A, s.Expire = newTAT, newTAT
	}
	return true, newTAT
}

// Result derives a decision's Result from its outcome: tat is the new TAT
// when allowed and max(stored TAT, now) when limited. The Redis store's
// script reports exactly these values.
func (p TAT) Result(allowed bool, now, tat, cost int64) Result {
	return p.numbers(allowed, now, tat, cost).result(allowed, cost)
}

// numbers are the Result's numbers: see Plan.numbers.
func (p *TAT) numbers(allowed bool, now, tat, cost int64) numbers {
	reset := tat - now
	n := numbers{quota: p.Quota, reset: time.Duration(reset) * time.Microsecond}
	if r := p.Tolerance - reset; r > 0 { // reset >= 0
		n.remaining = r / p.Interval
	}
	if !allowed {
		n.retry = Never
		if cost <= p.Quota {
			n.retry = time.Duration(tat+cost*p.Interval-p.Tolerance-now) * time.Microsecond
		}
	}
	return n
}

var gcraKind = kindInfo{
	name:     nameGCRA,
	stepwise: true,
	fields:   []string{"burst", "count", "period"},
	build: func(s Spec) (Limit, error) {
		return GCRA{Burst: s.Burst, Count: s.Count, Period: time.Duration(s.Period)}, nil
	},
	example: GCRA{Burst: 15, Count: 30, Period: time.Minute},
}

// Kind implements Limit.
func (GCRA) Kind() Kind { return KindGCRA }

// Spec implements Limit.
func (g GCRA) Spec() Spec {
	return Spec{Algorithm: nameGCRA, Burst: g.Burst, Count: g.Count, Period: g.Period}
}

// quota implements Limit: Burst+1 in (Burst+1)·T.
func (g GCRA) quota() (int64, time.Duration) {
	return tatQuota(g.Period.Microseconds(), g.Count, g.Burst+1)
}

// steadyRate implements Limit: Count per Period.
func (g GCRA) steadyRate() (int64, time.Duration) { return g.Count, g.Period }

// deniedBy implements Limit: GCRA has one limit.
func (GCRA) deniedBy(int) string { return "" }

var tokenBucketKind = kindInfo{
	name:     nameTokenBucket,
	stepwise: true,
	fields:   []string{"burst", "rate", "per"},
	build: func(s Spec) (Limit, error) {
		return TokenBucket{Burst: s.Burst, Count: s.Rate, Period: time.Duration(s.Per)}, nil
	},
	example: TokenBucket{Burst: 10, Count: 5, Period: time.Second},
}

// Kind implements Limit.
func (TokenBucket) Kind() Kind { return KindTokenBucket }

// Spec implements Limit.
func (b TokenBucket) Spec() Spec {
	return Spec{Algorithm: nameTokenBucket, Burst: b.Burst, Rate: b.Count, Per: b.Period}
}

// quota implements Limit: Burst in Burst·T.
func (b TokenBucket) quota() (int64, time.Duration) {
	return tatQuota(b.Period.Microseconds(), b.Count, b.Burst)
}

// steadyRate implements Limit: Count per Period.
func (b TokenBucket) steadyRate() (int64, time.Duration) { return b.Count, b.Period }

// deniedBy implements Limit: a token bucket has one limit.
func (TokenBucket) deniedBy(int) string { return "" }

// tatQuota is a TAT's Limit and Tolerance, the whole burst and the time to
// earn it, computed as newTAT does, without validating (0 when count is
// not positive).
func tatQuota(periodUS, count, limit int64) (int64, time.Duration) {
	if count <= 0 {
		return limit, 0
	}
	return limit, time.Duration(periodUS/count*limit) * time.Microsecond
}
