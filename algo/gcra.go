package algo

import (
	"fmt"
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

// Validate implements Limit.
func (g GCRA) Validate() error {
	_, err := g.tat()
	return err
}

// Decide implements Limit.
func (g GCRA) Decide(s *State, now, cost int64, commit bool) Result {
	p, _ := g.tat()
	return p.Decide(s, now, cost, commit)
}

// TAT returns the virtual-scheduling parameters of g.
func (g GCRA) TAT() (TAT, error) { return g.tat() }

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
	return newTAT("gcra", Micros(g.Period), g.Count, g.Burst+1)
}

// TokenBucket holds up to Burst tokens and gains Rate tokens every Per; a
// decision of cost n takes n tokens or is limited. A key never seen has a
// full bucket.
//
// A limit "L per window W with an initial burst B" (PlugLimit's form) is
// TokenBucket{Burst: B, Rate: L, Per: W}: B may go at once, and L per W on
// average after that.
//
// It is computed like GCRA with T = Per/Rate (whole µs) and τ = T·Burst, so
// Limit = Burst and the state is one TAT; the tokens in the bucket at time
// now are ⌊(τ - (TAT - now))/T⌋.
type TokenBucket struct {
	Burst int64
	Rate  int64
	Per   time.Duration
}

// Validate implements Limit.
func (b TokenBucket) Validate() error {
	_, err := b.tat()
	return err
}

// Decide implements Limit.
func (b TokenBucket) Decide(s *State, now, cost int64, commit bool) Result {
	p, _ := b.tat()
	return p.Decide(s, now, cost, commit)
}

// TAT returns the virtual-scheduling parameters of b.
func (b TokenBucket) TAT() (TAT, error) { return b.tat() }

func (b TokenBucket) tat() (TAT, error) {
	if b.Burst <= 0 {
		return TAT{}, fmt.Errorf("%w: token_bucket burst must be positive, got %d", ErrInvalid, b.Burst)
	}
	if b.Rate <= 0 {
		return TAT{}, fmt.Errorf("%w: token_bucket rate must be positive, got %d", ErrInvalid, b.Rate)
	}
	if err := positiveSpan("token_bucket per", b.Per); err != nil {
		return TAT{}, err
	}
	return newTAT("token_bucket", Micros(b.Per), b.Rate, b.Burst)
}

// TAT is the virtual-scheduling core shared by GCRA and TokenBucket: an
// emission Interval T and a Tolerance τ = T·Limit, both in µs.
type TAT struct {
	Interval  int64
	Tolerance int64
	Limit     int64
}

func newTAT(name string, periodUS, count, limit int64) (TAT, error) {
	t := periodUS / count
	if t <= 0 {
		return TAT{}, fmt.Errorf("%w: %s emits %d per %v, faster than one per µs", ErrInvalid, name, count, dur(periodUS))
	}
	if limit > Micros(MaxHorizon)/t {
		return TAT{}, fmt.Errorf("%w: %s burst %d spans more than the 100-year horizon", ErrInvalid, name, limit)
	}
	return TAT{Interval: t, Tolerance: t * limit, Limit: limit}, nil
}

// Decide applies the virtual-scheduling step; State.A holds the TAT.
func (p TAT) Decide(s *State, now, cost int64, commit bool) Result {
	tat := max(s.A, now)
	if cost > p.Limit {
		return p.Result(false, now, tat, cost)
	}
	newTAT := tat + cost*p.Interval
	if newTAT-p.Tolerance > now {
		return p.Result(false, now, tat, cost)
	}
	if commit && cost > 0 {
		s.A, s.Expire = newTAT, newTAT
	}
	return p.Result(true, now, newTAT, cost)
}

// Result derives a decision's Result from its outcome: tat is the new TAT
// when allowed and max(stored TAT, now) when limited. The Redis store's
// script reports exactly these values.
func (p TAT) Result(allowed bool, now, tat, cost int64) Result {
	reset := tat - now
	r := Result{Allowed: allowed, Limit: p.Limit, ResetAfter: dur(reset)}
	if allowed {
		r.Admitted = cost
	}
	if rem := (p.Tolerance - reset) / p.Interval; rem > 0 {
		r.Remaining = rem
	}
	if !allowed {
		if cost > p.Limit {
			r.RetryAfter = Never
		} else {
			r.RetryAfter = dur(tat + cost*p.Interval - p.Tolerance - now)
		}
	}
	return r
}
